"""Real networks as tuning tasks: each network's fused subgraphs with occurrence weights.

    NETWORKS["resnet-50"]()      -> [(Task, weight), ...]   identical subgraphs merged
    network_tasks("bert-base")   -> the same, unknown names raise DefinitionError
    split_tasks("train")         -> distinct tasks of the training networks
    split_tasks("held-out")      -> distinct tasks of the held-out networks
    describe()                   -> a table: network, split, #tasks, weighted GFLOP

Names encode the shape of a network beside its family's defaults, in this order:
``-w<width>`` (MobileNetV1 width multiplier, default 1.0), ``-gw<N>`` (RegNetX group
width, default the configuration's), ``-seq<N>`` (transformer sequence length, default
128, LLaMA prefill's prompt length), ``-b<N>`` (batch, default 1), ``-<N>`` (N x N input
image: CNNs 224, Inception-v3 299, ViT 224; ViT's sequence is (image / 16)^2 + 1
tokens). E.g. ``resnet-18-b4-192``, ``mobilenet-v1-w0.5-b2-160``, ``regnet-x-400mf-gw4``,
``bert-small-seq64-b2``, ``vit-ti16-384``, ``llama-13b-prefill-seq64``. Besides the
explicit entries, the training networks include the shape variants the TLM paper trains
on (batch sizes, sequence lengths, image sizes, widths, group widths), generated from
the VARIANTS table. How layers map to subgraphs: see `cnn`, `transformer` and `others`.

The split is by whole network. HELD_OUT is the TLM paper's held-out set (ResNet-50,
MobileNetV2, ResNeXt-50, BERT-tiny/base/large, DenseNet-121, DCGAN) plus LLaMA-7B decode:
decode is a different regime from everything in training (M = 1 matrix-vector denses,
one-row attention over a KV cache, memory-bound), so it tests whether a cost model
trained on prefill-shaped GEMMs extrapolates to decode shapes, while LLaMA prefill
stays in training. The held-out networks' architectures stay out of training at every
batch size, sequence length and image size. Any training task whose key also occurs in
a held-out network (e.g. a ResNet-18 3x3 conv that ResNet-50 shares) is dropped from the
training split.
"""
from __future__ import annotations

import copy
import inspect
from functools import lru_cache, partial
from itertools import product
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
    "regnet-x-400mf": _net(cnn.regnet_x, config="400mf"),
    "regnet-x-800mf": _net(cnn.regnet_x, config="800mf"),
    "regnet-x-200mf": _net(cnn.regnet_x, config="200mf"),
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


# ---- train: shape variants, generated. A grid maps builder parameters to the values to
# take (all combinations); several grids per family give a ragged table. Every variant
# the explicit entries above already name is left to them. ResNet-34 repeats ResNet-18's
# layer shapes (as BERT-medium does BERT-small's): it adds weight, not distinct tasks.
BERT_MINI = dict(layers=4, hidden=256, heads=4)
BERT_SMALL = dict(layers=4, hidden=512, heads=8)
GPT2_MEDIUM = dict(layers=24, hidden=1024, heads=16)
LLAMA_13B = dict(hidden=5120, heads=40, ffn=13824)
_B4, _B5 = (1, 2, 4, 8), (1, 2, 4, 8, 16)

VARIANTS: tuple[tuple[str, Callable, dict, tuple[dict, ...]], ...] = (
    # family, builder, fixed keyword arguments, grids
    ("resnet-18", cnn.resnet18, {},
     ({"n": _B5, "image": (160, 224)}, {"n": (1, 4), "image": (128, 192, 256)})),
    ("resnet-34", cnn.resnet34, {}, ({"n": (1, 4), "image": (160, 224)},)),
    ("vgg-11", cnn.vgg, {"cfg": cnn.VGG11}, ({"n": (1, 2), "image": (160, 224)},)),
    ("vgg-13", cnn.vgg, {"cfg": cnn.VGG13}, ({"n": (1, 2), "image": (128, 224)},)),
    ("vgg-16", cnn.vgg, {}, ({"n": (1, 2, 4), "image": (128, 160, 192, 224)},)),
    ("vgg-19", cnn.vgg, {"cfg": cnn.VGG19}, ({"n": (1, 2), "image": (192, 224)},)),
    ("inception-v3", cnn.inception_v3, {}, ({"n": _B4},)),
    ("squeezenet-1.1", cnn.squeezenet1_1, {},
     ({"n": _B4, "image": (160, 224)}, {"image": (128, 192)})),
    ("mobilenet-v1", cnn.mobilenet_v1, {},
     ({"width": (0.5, 0.75, 1.0), "image": (128, 160, 192, 224)},
      {"width": (0.5, 1.0), "n": (2, 8), "image": (160, 224)})),
    ("regnet-x-200mf", cnn.regnet_x, {"config": "200mf"}, ({"n": (1, 4), "image": (160, 224)},)),
    ("regnet-x-400mf", cnn.regnet_x, {"config": "400mf"}, ({"group_width": (4, 8)},)),
    ("regnet-x-800mf", cnn.regnet_x, {"config": "800mf"}, ({"group_width": (4, 8)},)),
    ("bert-mini", transformer.bert, BERT_MINI,
     ({"seq": (32, 64, 128, 256, 384, 512), "batch": _B4},)),
    ("bert-small", transformer.bert, BERT_SMALL,
     ({"seq": (32, 64, 128, 256, 384, 512), "batch": _B4},)),
    ("gpt-2", transformer.gpt2, {},
     ({"seq": (32, 64, 128), "batch": _B4}, {"seq": (256, 512, 1024)})),
    ("gpt-2-medium", transformer.gpt2, GPT2_MEDIUM,
     ({"seq": (32, 64, 128), "batch": (1, 2)}, {"seq": (256, 512)})),
    ("vit-ti16", transformer.vit, dict(hidden=192, heads=3),
     ({"image": (224, 384), "batch": _B4},)),
    ("vit-s16", transformer.vit, dict(hidden=384, heads=6),
     ({"image": (224, 384), "batch": _B4},)),
    ("vit-b16", transformer.vit, {}, ({"image": (224, 384), "batch": (1, 2, 4)},)),
    ("vit-l16", transformer.vit, dict(layers=24, hidden=1024, heads=16),
     ({"image": (224, 384), "batch": (1, 2)},)),
    ("llama-7b-prefill", transformer.llama_prefill, {}, ({"seq": (32, 64, 128, 256, 512)},)),
    ("llama-13b-prefill", transformer.llama_prefill, LLAMA_13B, ({"seq": (32, 64, 128)},)),
    ("pix2pix-unet", others.pix2pix_unet, {},
     ({"image": (128, 256)}, {"n": (2, 4), "image": (128,)}, {"ngf": (32,), "image": (128, 256)})),
    ("conv-autoencoder", others.conv_autoencoder, {},
     ({"image": (32, 64, 128), "n": (1, 8)}, {"width": (16, 64), "levels": (2, 4)})),
)


def variant_name(family: str, builder: Callable, params: dict) -> str:
    """`family` plus ``-w<width>``, ``-gw<group_width>``, ``-ngf<ngf>``, ``-l<levels>``,
    ``-seq<seq>``, ``-b<batch>``, ``-<image>`` for each of those parameters in `params`
    that differs from `builder`'s default."""
    default = {k: p.default for k, p in inspect.signature(builder).parameters.items()}
    suffix = {"width": "-w{:g}", "group_width": "-gw{}", "ngf": "-ngf{}", "levels": "-l{}",
              "seq": "-seq{}", "n": "-b{}", "batch": "-b{}", "image": "-{}"}
    return family + "".join(fmt.format(params[k]) for k, fmt in suffix.items()
                            if k in params and params[k] != default[k])


def variants() -> dict[str, tuple[Callable, dict]]:
    """name -> (builder, keyword arguments) of every variant of the VARIANTS table."""
    out: dict[str, tuple[Callable, dict]] = {}
    for family, builder, fixed, grids in VARIANTS:
        for grid in grids:
            for values in product(*grid.values()):
                params = dict(zip(grid, values))
                name = variant_name(family, builder, params)
                if name in out:
                    raise DefinitionError(f"variant {name!r} is generated twice")
                out[name] = (builder, {**fixed, **params})
    return out


NETWORKS.update({name: _net(builder, **kw) for name, (builder, kw) in variants().items()
                 if name not in NETWORKS})


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


@lru_cache(maxsize=4)
def _split(split: str, networks: tuple, held_out: tuple) -> tuple[Task, ...]:
    held = _merged(held_out)
    if split == "held-out":
        return tuple(held.values())
    train = _merged(n for n, _ in networks if n not in held_out)
    return tuple(t for k, t in train.items() if k not in held)


def split_tasks(split: str) -> list[Task]:
    """The distinct tasks (by key) of the networks in `split` ("train" or "held-out"), each
    with its weight summed over those networks, in registry then layer order. Training
    tasks whose key occurs in a held-out network are left out. The split is built once
    per registry state; each call returns fresh (shallow) copies of its tasks, so a caller
    may change a task's weight without affecting later calls."""
    if split not in SPLITS:
        raise DefinitionError(f"unknown split {split!r}; splits: {', '.join(SPLITS)}")
    return [copy.copy(t) for t in _split(split, tuple(NETWORKS.items()), tuple(HELD_OUT))]


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
