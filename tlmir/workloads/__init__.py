"""Real networks as tuning tasks: each network's fused subgraphs with occurrence weights.

    NETWORKS["resnet-50"]()      -> [(Task, weight), ...]   identical subgraphs merged
    network_tasks("bert-base")   -> the same, unknown names raise DefinitionError
    split_tasks("train")         -> distinct tasks of the training networks
    split_tasks("held-out")      -> distinct tasks of the held-out networks
    describe()                   -> a table: network, split, #tasks, weighted GFLOP

Networks are batch 1 unless their name says ``-b2`` / ``-b4`` / ``-b8``; CNNs take 224x224
images (Inception-v3 299x299) unless the name says ``-160``; transformers use seq 128
unless the name says ``-seqN`` (ViT: 197 tokens). How layers map to subgraphs: see
`cnn`, `transformer` and `others`.

The split is by whole network. HELD_OUT is the TLM paper's held-out set (ResNet-50,
MobileNetV2, ResNeXt-50, BERT-tiny/base/large, DenseNet-121, DCGAN) plus LLaMA-7B decode:
decode is a different regime from everything in training (M = 1 matrix-vector denses,
one-row attention over a KV cache, memory-bound), so it tests whether a cost model
trained on prefill-shaped GEMMs extrapolates to decode shapes, while LLaMA-7B prefill
stays in training. The held-out networks' architectures also stay out of training at
other batch sizes. Any training task whose key also occurs in a held-out network (e.g. a
ResNet-18 3x3 conv that ResNet-50 shares) is dropped from the training split.
"""
from __future__ import annotations

from functools import partial
from typing import Callable

from ..errors import DefinitionError
from ..runtime.task import Task
from . import cnn, others, transformer

SPLITS = ("train", "held-out")


def _tasks(builder: Callable, **kw) -> list[tuple[Task, float]]:
    return builder(**kw).tasks()


def _net(builder: Callable, **kw) -> Callable[[], list[tuple[Task, float]]]:
    return partial(_tasks, builder, **kw)


HELD_OUT: tuple[str, ...] = (
    "resnet-50", "mobilenet-v2", "resnext-50", "bert-tiny", "bert-base", "bert-large",
    "densenet-121", "dcgan", "llama-7b-decode",
)

NETWORKS: dict[str, Callable[[], list[tuple[Task, float]]]] = {
    # ---- held-out
    "resnet-50": _net(cnn.resnet50),
    "mobilenet-v2": _net(cnn.mobilenet_v2),
    "resnext-50": _net(cnn.resnext50_32x4d),
    "bert-tiny": _net(transformer.bert, layers=2, hidden=128, heads=2),
    "bert-base": _net(transformer.bert, layers=12, hidden=768, heads=12),
    "bert-large": _net(transformer.bert, layers=24, hidden=1024, heads=16),
    "densenet-121": _net(cnn.densenet),
    "dcgan": _net(others.dcgan_generator),
    "llama-7b-decode": _net(transformer.llama_layer, seq=1, kv_len=128),
    # ---- train: CNNs
    "inception-v3": _net(cnn.inception_v3),
    "inception-v3-b4": _net(cnn.inception_v3, n=4),
    "resnet-18": _net(cnn.resnet18),
    "resnet-18-b4": _net(cnn.resnet18, n=4),
    "resnet-18-b8": _net(cnn.resnet18, n=8),
    "resnet-18-160": _net(cnn.resnet18, image=160),
    "vgg-16": _net(cnn.vgg),
    "vgg-16-b4": _net(cnn.vgg, n=4),
    "squeezenet-1.1": _net(cnn.squeezenet1_1),
    "squeezenet-1.1-b4": _net(cnn.squeezenet1_1, n=4),
    "mobilenet-v1": _net(cnn.mobilenet_v1),
    "mobilenet-v1-b4": _net(cnn.mobilenet_v1, n=4),
    "mobilenet-v1-160": _net(cnn.mobilenet_v1, image=160),
    # ---- train: transformers
    "bert-mini": _net(transformer.bert, layers=4, hidden=256, heads=4),
    "bert-small": _net(transformer.bert, layers=4, hidden=512, heads=8),
    "bert-medium": _net(transformer.bert, layers=8, hidden=512, heads=8),
    "bert-medium-seq256": _net(transformer.bert, layers=8, hidden=512, heads=8, seq=256),
    "gpt-2": _net(transformer.gpt2),
    "gpt-2-seq256": _net(transformer.gpt2, seq=256),
    "gpt-2-b2": _net(transformer.gpt2, batch=2),
    "vit-b16": _net(transformer.vit),
    "vit-s16": _net(transformer.vit, hidden=384, heads=6),
    "llama-7b-prefill": _net(transformer.llama_layer, seq=128, kv_len=128),
}


def network_tasks(name: str) -> list[tuple[Task, float]]:
    """The (task, weight) list of network `name`."""
    if name not in NETWORKS:
        raise DefinitionError(f"unknown network {name!r}; known networks: "
                              f"{', '.join(sorted(NETWORKS))}")
    return NETWORKS[name]()


def split_of(name: str) -> str:
    if name not in NETWORKS:
        network_tasks(name)                                   # raises the DefinitionError
    return "held-out" if name in HELD_OUT else "train"


def _merged(names) -> dict[str, Task]:
    """key -> task over the networks `names`, weights summed; first occurrence's name."""
    out: dict[str, Task] = {}
    for net in names:
        for task, w in network_tasks(net):
            if task.key in out:
                out[task.key].weight += w
            else:
                task.weight = w
                out[task.key] = task
    return out


def split_tasks(split: str) -> list[Task]:
    """The distinct tasks (by key) of the networks in `split` ("train" or "held-out"), each
    with its weight summed over those networks, in registry then layer order. Training
    tasks whose key occurs in a held-out network are left out."""
    if split not in SPLITS:
        raise DefinitionError(f"unknown split {split!r}; splits: {', '.join(SPLITS)}")
    held = _merged(HELD_OUT)
    if split == "held-out":
        return list(held.values())
    train = _merged(n for n in NETWORKS if n not in HELD_OUT)
    return [t for k, t in train.items() if k not in held]


def describe() -> str:
    """A table of the networks: split, distinct tasks, weighted GFLOP (sum of weight x flops)."""
    rows = []
    for name in NETWORKS:
        tasks = network_tasks(name)
        gflop = sum(t.flops * w for t, w in tasks) / 1e9
        rows.append((name, split_of(name), str(len(tasks)), f"{gflop:.3f}"))
    for split in SPLITS:
        tasks = split_tasks(split)
        rows.append((f"[{split} split, distinct]", split, str(len(tasks)),
                     f"{sum(t.flops * t.weight for t in tasks) / 1e9:.3f}"))
    head = ("network", "split", "#tasks", "GFLOP")
    widths = [max(len(r[i]) for r in rows + [head]) for i in range(4)]

    def fmt(r) -> str:
        return "  ".join(c.ljust(w) if i < 2 else c.rjust(w)
                         for i, (c, w) in enumerate(zip(r, widths)))
    lines = [fmt(head), "  ".join("-" * w for w in widths)]
    lines += [fmt(r) for r in rows[:-2]] + [lines[1]] + [fmt(r) for r in rows[-2:]]
    return "\n".join(lines)


__all__ = ["NETWORKS", "HELD_OUT", "SPLITS", "network_tasks", "split_of", "split_tasks",
           "describe"]
