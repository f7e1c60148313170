"""tlmir.workloads: real networks' fused subgraphs as tuning tasks; the train / held-out split."""
from __future__ import annotations

import time
from collections import defaultdict

import numpy as np
import pytest

import tlmir
from tlmir import workloads as W
from tlmir.build import reference_outputs
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


HELD_OUT_TASKS = 189       # distinct tasks of the held-out networks


def test_training_split_has_the_shape_variants(splits):
    train, held = splits["train"], splits["held-out"]
    assert 1500 <= len({t.key for t in train}) == len(train) <= 2400
    assert len({t.key for t in held}) == len(held) == HELD_OUT_TASKS
    held_keys = {t.key for name in W.HELD_OUT for t, _ in W.network_tasks(name)}
    assert not {t.key for t in train} & held_keys
    assert sum(t.flops > 20e9 for t in train) <= 10            # few very large tasks


def test_no_held_out_architecture_in_training():
    """No training network is a held-out architecture at another size."""
    from tlmir.workloads import cnn, transformer
    banned = {cnn.resnet50, cnn.mobilenet_v2, cnn.resnext50_32x4d, cnn.densenet,
              W.others.dcgan_generator}
    for name, fn in W.NETWORKS.items():
        if name in W.HELD_OUT:
            continue
        assert not any(name.startswith(h) for h in W.HELD_OUT), name
        builder, kw = fn.args[0], fn.keywords
        assert builder not in banned, name
        if builder is transformer.bert:
            assert kw["hidden"] not in (128, 768, 1024), name
        if builder is transformer.llama_layer:
            assert kw["seq"] == kw["kv_len"] > 1, name                # prefill only
        if builder is transformer.llama_prefill:
            assert kw.get("seq", 128) > 1, name


def test_variant_names():
    for name in ["resnet-18-b4-192", "resnet-34-b4-160", "mobilenet-v1-w0.5-b2-160",
                 "bert-small-seq64-b2", "gpt-2-medium-seq32-b2", "vit-ti16-384",
                 "llama-13b-prefill-seq64", "inception-v3-b8", "squeezenet-1.1-b8-160"]:
        assert W.split_of(name) == "train", name
    # a variant the explicit entries already name is theirs, and is the same network
    for name, (builder, kw) in W.variants().items():
        fn = W.NETWORKS[name]
        if (fn.args[0], fn.keywords) != (builder, kw):
            got = [(t.key, w) for t, w in fn()]
            assert got == [(t.key, w) for t, w in builder(**kw).tasks()], name
    big = {t.name: t.flops for t, _ in W.network_tasks("llama-13b-prefill-seq32")}
    assert big["dense_m32_n13824_k5120"] == 2 * 32 * 13824 * 5120
    assert {t.name for t, _ in W.network_tasks("vit-ti16-384")} >= {
        "conv2d_nchw_1x3x384x384_k192_16x16_s16_p0", "batch_matmul_b3_m577_n577_k64"}


def test_split_tasks_returns_copies():
    a = W.split_tasks("train")
    w = a[0].weight
    a[0].weight = -1.0
    assert W.split_tasks("train")[0].weight == w


def test_split_is_deterministic_and_fast():
    W._split.cache_clear()                  # time a fresh build, not the cached split
    t0 = time.perf_counter()
    a = W.split_tasks("train")
    assert time.perf_counter() - t0 < 10
    b = W.split_tasks("train")
    assert [(t.key, t.name, t.weight) for t in a] == [(t.key, t.name, t.weight) for t in b]


@pytest.mark.parametrize("name,gflop", [
    # 2 x the published multiply-add counts (plus the few bias / activation / pool flops)
    ("resnet-50", 8.18), ("resnext-50", 8.46), ("mobilenet-v2", 0.60), ("densenet-121", 5.67),
    ("inception-v3", 11.43), ("vgg-16", 30.94), ("resnet-18", 3.63), ("squeezenet-1.1", 0.70),
    ("mobilenet-v1", 1.14), ("vit-b16", 35.1), ("regnet-x-400mf", 0.82), ("regnet-x-800mf", 1.60),
    ("regnet-x-200mf", 0.40),
    # shape variants: width multipliers, deeper / wider families, a larger image
    ("mobilenet-v1-w0.5", 0.298), ("mobilenet-v1-w0.75", 0.650), ("resnet-34", 7.34),
    ("vgg-11", 15.22), ("vgg-13", 22.62), ("vgg-19", 39.26), ("vit-ti16", 2.52),
    ("vit-l16", 123.2), ("vit-b16-384", 111.0),
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
    want = reference_outputs(task, xs)
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
