"""tlmir.workloads: real networks' fused subgraphs as tuning tasks; the train / held-out split."""
from __future__ import annotations

import time
from collections import defaultdict

import numpy as np
import pytest

import tlmir
from tlmir import workloads as W
from tlmir.errors import DefinitionError
from tlmir.runtime.task import Task

REQUIRED = ["resnet-50", "mobilenet-v2", "resnext-50", "densenet-121", "inception-v3",
            "bert-tiny", "bert-base", "bert-large", "gpt-2", "llama-7b-prefill",
            "llama-7b-decode", "dcgan", "vgg-16", "resnet-18", "squeezenet-1.1"]


@pytest.fixture(scope="module")
def nets():
    return {name: W.network_tasks(name) for name in W.NETWORKS}


@pytest.fixture(scope="module")
def splits():
    return {s: W.split_tasks(s) for s in W.SPLITS}


def test_registry_and_held_out():
    assert set(REQUIRED) <= set(W.NETWORKS)
    assert set(W.HELD_OUT) == {"resnet-50", "mobilenet-v2", "resnext-50", "bert-base",
                               "bert-tiny", "densenet-121", "bert-large", "dcgan",
                               "llama-7b-decode"}
    assert W.split_of("gpt-2") == "train" and W.split_of("dcgan") == "held-out"


def test_every_network_builds(nets):
    for name, tasks in nets.items():
        assert tasks, name
        keys = [t.key for t, _ in tasks]
        assert len(set(keys)) == len(keys), f"{name}: identical subgraphs not merged"
        for t, w in tasks:
            assert isinstance(t, Task) and t.flops > 0
            assert w > 0 and t.weight == w, (name, t.name)


def test_split_sizes_and_no_overlap(splits):
    train, held = splits["train"], splits["held-out"]
    train_keys, held_keys = [t.key for t in train], [t.key for t in held]
    assert len(set(train_keys)) == len(train_keys) >= 300
    assert len(set(held_keys)) == len(held_keys) > 0
    assert not set(train_keys) & set(held_keys)
    for tasks in (train, held):
        assert all(t.weight > 0 for t in tasks)
        assert len({t.name for t in tasks}) == len(tasks)     # names tell the tasks apart


def test_split_weights_are_summed_over_networks(nets, splits):
    for split, tasks in splits.items():
        want = defaultdict(float)
        for name, net in nets.items():
            if W.split_of(name) == split:
                for t, w in net:
                    want[t.key] += w
        for t in tasks:
            assert t.weight == pytest.approx(want[t.key]), (split, t.name)
    # a shared subgraph: the 7x7 stem conv of ResNet-50, ResNeXt-50 and DenseNet-121
    stem = [t for t in splits["held-out"] if t.name == "conv2d_bias_relu_1x3x224x224_k64_7x7_s2_p3"]
    assert len(stem) == 1 and stem[0].weight == 3


def test_split_is_deterministic_and_fast():
    t0 = time.perf_counter()
    a = W.split_tasks("train")
    assert time.perf_counter() - t0 < 10
    b = W.split_tasks("train")
    assert [(t.key, t.name, t.weight) for t in a] == [(t.key, t.name, t.weight) for t in b]


@pytest.mark.parametrize("name,gflop", [
    # 2 x the published multiply-add counts (plus the few bias / activation / pool flops)
    ("resnet-50", 8.18), ("resnext-50", 8.46), ("mobilenet-v2", 0.60), ("densenet-121", 5.67),
    ("inception-v3", 11.43), ("vgg-16", 30.94), ("resnet-18", 3.63), ("squeezenet-1.1", 0.70),
    ("mobilenet-v1", 1.14), ("vit-b16", 35.1),
    # BERT-base: 12 x (4 x 768^2 + 2 x 768 x 3072) x 128 x 2 + attention 12 x 2 x 128^2 x 768 x 2
    ("bert-base", 12 * (4 * 768 ** 2 + 2 * 768 * 3072) * 128 * 2e-9
     + 12 * 2 * 128 ** 2 * 768 * 2e-9),
])
def test_network_flops_match_published(nets, name, gflop):
    total = sum(t.flops * w for t, w in nets[name]) / 1e9
    assert total == pytest.approx(gflop, rel=0.03)


def test_llama_shapes(nets):
    prefill = {t.name: w for t, w in nets["llama-7b-prefill"]}
    decode = {t.name: w for t, w in nets["llama-7b-decode"]}
    assert prefill["dense_m128_n4096_k4096"] == 4 and prefill["dense_m128_n11008_k4096"] == 2
    assert prefill["batch_matmul_b32_m128_n128_k128"] == 2         # scores and context
    assert decode["dense_m1_n4096_k4096"] == 4 and decode["silu_mul_1x11008"] == 1
    assert decode["softmax_32x128"] == 1 and decode["rmsnorm_1x4096_eps1e-06"] == 2


# tasks small enough to build and run under the default schedule quickly
SAMPLES = [
    ("bert-tiny", "batch_matmul_b2_m128_n128_k64"),
    ("dcgan", "conv2d_transpose_tanh_1x128x32x32_k3_4x4_s2_p1"),
    ("llama-7b-decode", "silu_mul_1x11008"),
    ("mobilenet-v2", "depthwise_conv2d_1x960x7x7_3x3_s1_p1"),
    ("inception-v3", "conv2d_bias_relu_1x2048x8x8_k192_1x1_s1_p0"),
    ("squeezenet-1.1", "max_pool2d_1x256x27x27_3_s2_p0"),
    ("gpt-2", "layernorm_128x768_eps1e-05"),
    ("resnet-50", "add_relu_1x2048x7x7"),
]


@pytest.mark.parametrize("net,name", SAMPLES)
def test_sample_task_default_schedule_matches_reference(nets, net, name):
    task = {t.name: t for t, _ in nets[net]}[name]
    xs = task.random_inputs()
    want = task.reference_outputs(xs)
    got = [np.zeros(t.shape, t.dtype) for t in task.outputs]
    tlmir.build(tlmir.create_schedule(task.outputs), task.args)(*xs, *got)
    for g, r in zip(got, want):
        np.testing.assert_allclose(g, r, rtol=1e-3, atol=1e-3)


def test_unknown_network_and_split():
    with pytest.raises(DefinitionError, match="'resnet-9000'.*resnet-50"):
        W.network_tasks("resnet-9000")
    with pytest.raises(DefinitionError, match="'test'"):
        W.split_tasks("test")


def test_describe(splits):
    text = W.describe()
    for name in W.NETWORKS:
        assert name in text
    assert f"{len(splits['train'])}" in text and "GFLOP" in text
