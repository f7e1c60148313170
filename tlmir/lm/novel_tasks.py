"""Tasks of no workload, drawn at random: prompts a model meets only outside its training.

Fine-tuning on the training split's tasks moves a model most where their prompts are, and
also where they are not: an operator of no network, a shape no variant has. Stages that
hold a model to what it was (the KL anchor of `tlmir.lm.validity`) need such prompts to
hold it there. They need no measurement, only tasks, so they are drawn here:

- a library op (`tlmir.ops.OPS`) at a random shape, its extents products of small primes
  (1,000 = 2^3 5^3, 3,000, 30, 96, ...) as well as powers of two, a matrix product's rows
  one a quarter of the time (a decoder's step); named as a network's task of that op
  (`tlmir.workloads.common.task_name`), so its programs lend to the op's tasks;
- a small program written in `te`: an element-wise chain over a matrix and broadcast
  vectors, a row reduction followed by an element-wise stage, or a dense / matmul
  followed by an element-wise epilogue written by hand;
- besides those n draws, n // 8 grouped convolutions (`grouped_conv`), drawn from a
  stream of their own so that the mixed draws, and the records measured on them, stay as
  they are. The training networks group 16 channels (RegNet); a ResNeXt groups 4 or 32,
  and its convolutions had no source of their group width to borrow from;
- then n // 8 element-wise ops over an N×C×H×W feature map (`feature_map_op`) and
  n // 16 row ops over one row (`one_row_op`), each from a stream of its own too. The
  training networks add two maps only inside `add_relu`, so a lone `add` of 4-D maps
  asks its innermost axis where every lone element-wise op a model had read (2-D,
  `add_128x256`) asks its second; and they normalize one row only in a held-out
  network (LLaMA's decode step), whose sketches are numbered otherwise.

A task whose key any workload split holds is drawn again, so these tasks stay novel.
Measured (`tlmir iterate --split novel`), their fastest programs join a model's
transfer sources (`tlmir train sources --novel`).
"""
from __future__ import annotations

import math
import random
from typing import Callable

from .. import ops, te
from ..errors import TlmirError
from ..ir.dag import ComputeDAG
from ..runtime.task import Task
from .place_names import LARGEST_WORD_NUMBER

_PRIMES = (2, 2, 2, 3, 5, 7)
NOVEL_TASKS = 600  # how many a corpus samples and a vocabulary walks (as validity draws by default)


class OddExtents(random.Random):
    """A stream whose every `extent` is any integer (`odd_shape_tasks`)."""


def extent(rng: random.Random, lo: int, hi: int) -> int:
    """An extent in [lo, hi]: half the time a power of two, else a product of small primes
    (every factorization a tile question can meet); from an `OddExtents` stream any
    integer: half the time uniform up to the largest number word (so each such number
    turns up), else log-uniform (primes and what no product of small primes reaches)."""
    if isinstance(rng, OddExtents):
        if rng.random() < 0.5 and lo <= LARGEST_WORD_NUMBER:
            return rng.randint(lo, min(hi, LARGEST_WORD_NUMBER))
        return max(lo, min(hi, round(math.exp(rng.uniform(math.log(lo), math.log(hi + 1)) - 0.5))))
    if rng.random() < 0.5:
        powers = [1 << k for k in range(20) if lo <= 1 << k <= hi]
        if powers:
            return rng.choice(powers)
    n = 1
    for _ in range(64):
        p = rng.choice(_PRIMES)
        if n * p > hi:
            break
        n *= p
        if n >= lo and rng.random() < 0.25:
            break
    return max(lo, min(n, hi))


def _image(rng: random.Random) -> dict:
    return {"N": rng.choice((1, 1, 1, 2, 4)), "C": extent(rng, 3, 512), "H": extent(rng, 7, 112)}


def _conv(rng: random.Random, builder: Callable, **extra) -> ops.OpDef:
    im, r = _image(rng), rng.choice((1, 1, 3, 3, 5, 7))
    stride, pad = rng.choice((1, 1, 2)), rng.choice((0, r // 2))
    h = max(im["H"], r)
    return builder(im["N"], im["C"], h, h, extent(rng, 8, 512), r, r, stride=stride, padding=pad, **extra)


def _rows(rng: random.Random, hi: int) -> int:
    """The rows of a matrix product: one (a decoder's step) a quarter of the time."""
    return 1 if rng.random() < 0.25 else extent(rng, 1, hi)


def _library_op(rng: random.Random) -> ops.OpDef:
    kind = rng.choice(sorted(ops.OPS))
    e = lambda lo, hi: extent(rng, lo, hi)  # noqa: E731
    if kind == "matmul":
        return ops.matmul(_rows(rng, 1024), e(8, 4096), e(8, 4096))
    if kind == "batch_matmul":
        return ops.batch_matmul(e(1, 16), _rows(rng, 512), e(8, 512), e(8, 256))
    if kind == "dense":
        return ops.dense(_rows(rng, 512), e(8, 4096), e(8, 4096), bias=rng.random() < 0.5,
                         act=rng.choice((None, "relu", "gelu")))
    if kind in ("conv2d_nchw", "conv2d_nhwc", "conv2d_bias_relu", "conv2d_bias"):
        return _conv(rng, ops.OPS[kind])
    if kind == "conv2d_transpose_nchw":
        im, r = _image(rng), rng.choice((2, 3, 4))
        return ops.conv2d_transpose_nchw(im["N"], im["C"], min(im["H"], 32), min(im["H"], 32),
                                         e(3, 256), r, r, stride=2, padding=1 if r > 2 else 0)
    if kind == "depthwise_conv2d_nchw":
        im, r = _image(rng), rng.choice((3, 5))
        return ops.depthwise_conv2d_nchw(im["N"], im["C"], im["H"], im["H"], r, r,
                                         stride=rng.choice((1, 2)), padding=r // 2)
    if kind in ("max_pool2d", "avg_pool2d"):
        im, k = _image(rng), rng.choice((2, 3))
        return ops.OPS[kind](im["N"], im["C"], im["H"], im["H"], kernel=k, stride=rng.choice((1, 2)),
                             padding=k // 2 if k == 3 else 0)
    if kind in ("softmax", "layernorm", "rmsnorm", "bias_add_gelu", "silu_mul"):
        return ops.OPS[kind](e(1, 1024), e(8, 8192))
    return ops.OPS[kind]((e(1, 64), e(8, 512), e(1, 64)) if rng.random() < 0.5 else (e(1, 256), e(8, 8192)))


_UNARY: tuple[Callable, ...] = (lambda v: te.max(v, 0.0), te.sigmoid, te.tanh, te.exp,
                                lambda v: v * v, lambda v: v * 0.5 + 1.0, te.abs)


def _elementwise(rng: random.Random, v, x, vectors, j):
    """A random element-wise expression of `v` (and x, broadcast vectors at column j)."""
    for _ in range(rng.randint(1, 3)):
        pick = rng.random()
        if pick < 0.4:
            v = rng.choice(_UNARY)(v)
        elif pick < 0.7 and vectors:
            vec = rng.choice(vectors)
            v = v * vec[j] if rng.random() < 0.5 else v + vec[j]
        else:
            v = v * x if rng.random() < 0.5 else v + x
    return v


def _root(v):
    """sqrt(|v|): a sum of signed terms may be negative, and a NaN reference checks nothing."""
    return te.sqrt(te.abs(v))


def _te_program(rng: random.Random) -> tuple[str, list]:
    M, N = extent(rng, 1, 1024), extent(rng, 8, 8192)
    kind = rng.choice(("chain", "reduce", "epilogue"))
    if kind == "epilogue":
        K = extent(rng, 8, 4096)
        base = (ops.dense if rng.random() < 0.5 else ops.matmul)(M, N, K)
        D = base.outputs[0]
        y = te.compute((M, N), lambda i, j: _elementwise(rng, D[i, j], D[i, j], [], j), name="epilogue")
        return "te_epilogue", base.inputs + [y]
    x = te.placeholder((M, N), name="x")
    vectors = [te.placeholder((N,), name=f"v{k}") for k in range(rng.randint(0, 2))]
    if kind == "chain":
        stages = [x]
        for s in range(rng.randint(1, 3)):
            prev = stages[-1]
            stages.append(te.compute((M, N), lambda i, j: _elementwise(rng, prev[i, j], x[i, j], vectors, j),
                                     name=f"s{s}"))
        read = {facts.op for facts in ComputeDAG([stages[-1]]).stages}
        return "te_chain", [x] + [v for v in vectors if v.op in read] + [stages[-1]]
    k = te.reduce_axis(N, "k")
    f = rng.choice(_UNARY)
    combine = te.sum if rng.random() < 0.7 else (lambda v, axis: te.max(v, axis=axis))
    red = te.compute((M,), lambda i: combine(f(x[i, k]), axis=k), name="reduce")
    out = te.compute((M,), lambda i: rng.choice((_root, te.exp, lambda v: v * 0.5))(red[i]), name="post")
    return "te_reduce", [x, out]


def grouped_conv(rng: random.Random) -> ops.OpDef:
    """A grouped convolution: 1 to 64 channels per group (1: depthwise written as a conv),
    up to 2,048 channels, the image shrunk until one map holds at most 4 M values."""
    width = rng.choice((1, 2, 4, 4, 8, 16, 32, 32, 64))
    groups = extent(rng, 2, max(2, 2048 // width))
    C = width * groups
    h, r = extent(rng, 7, 112), rng.choice((3, 3, 3, 1, 5))
    while C * h * h > 1 << 22 and h > 7:
        h //= 2
    builder = rng.choice((ops.conv2d_bias_relu, ops.conv2d_bias_relu, ops.conv2d_nchw, ops.conv2d_bias))
    return builder(rng.choice((1, 1, 1, 2)), C, max(h, r), max(h, r), C * rng.choice((1, 1, 2)), r, r,
                   stride=rng.choice((1, 1, 2)), padding=r // 2, groups=groups)


def feature_map_op(rng: random.Random) -> ops.OpDef:
    """An element-wise library op (`add` or `add_relu`) over an N×C×H×W feature map,
    one map at most 4 M values."""
    C, h = extent(rng, 3, 2048), extent(rng, 5, 112)
    while C * h * h > 1 << 22 and h > 1:
        h //= 2
    return ops.OPS[rng.choice(("add", "add", "add_relu"))]((rng.choice((1, 1, 1, 2, 4, 8)), C, h, h))


def one_row_op(rng: random.Random) -> ops.OpDef:
    """A row op (softmax, layernorm, rmsnorm, ...) over one row: a decoder's step."""
    kind = rng.choice(("softmax", "layernorm", "rmsnorm", "rmsnorm", "bias_add_gelu", "silu_mul"))
    return ops.OPS[kind](1, extent(rng, 8, 16384))


def _draw(rng: random.Random, draw: Callable[[random.Random], Task], n: int, known: set) -> list[Task]:
    """`n` distinct tasks of `draw` whose keys are not in `known` (which grows by theirs)."""
    out: list[Task] = []
    for _ in range(50 * n):
        if len(out) == n:
            break
        try:
            task = draw(rng)
        except TlmirError:
            continue  # a shape the op refuses (a kernel larger than the image, ...)
        if task.key not in known:
            known.add(task.key)
            out.append(task)
    return out


def _named(op: ops.OpDef) -> Task:
    """A library op's task, named as a network's task of it (so its programs lend to them)."""
    from ..workloads.common import task_name
    return Task.from_op(op, name=task_name(op))


def _mixed(rng: random.Random) -> Task:
    if rng.random() < 0.5:
        return _named(_library_op(rng))
    name, args = _te_program(rng)
    return Task(f"novel_{name}", args)


def _library_draw(draw_op: Callable[[random.Random], ops.OpDef]) -> Callable[[random.Random], Task]:
    """A draw of `draw_op`'s library ops as tasks named as a network's (`_named`)."""
    return lambda rng: _named(draw_op(rng))


def _workload_keys() -> set[str]:
    """The task keys of both workload splits: what a task of no workload must not be."""
    from ..workloads import split_tasks
    return {t.key for split in ("train", "held-out") for t in split_tasks(split)}


def novel_tasks(n: int, seed: int = 0, avoid: frozenset[str] = frozenset()) -> list[Task]:
    """`n` tasks drawn at random (half library ops at random shapes, half `te` programs),
    then `n // 8` grouped convolutions, `n // 8` element-wise ops over feature maps and
    `n // 16` row ops over one row, none of a workload split (train or held-out) and none
    whose key is in `avoid`."""
    known = _workload_keys() | set(avoid)
    tasks = _draw(random.Random(seed), _mixed, n, known)
    for stream, draw_op, count in (("grouped", grouped_conv, n // 8), ("feature map", feature_map_op, n // 8),
                                   ("one row", one_row_op, n // 16)):
        tasks += _draw(random.Random(f"{stream}:{seed}"), _library_draw(draw_op), count, known)
    return tasks


def odd_shape_tasks(n: int, seed: int = 0) -> list[Task]:
    """`n` tasks drawn as `novel_tasks` draws its mixed ones, every extent any integer: a
    prompt's numbers are what a sentence copies into its questions (`tile s0.r0 640`), and
    a number no training prompt holds is one a model has never learnt to copy (it writes
    another). Validity training on these (`tlmir train validity --odd`) teaches the copy
    for every number a vocabulary holds."""
    return _draw(OddExtents(f"odd:{seed}"), _mixed, n, _workload_keys())


def split_tasks_or_novel(split: str) -> list[Task]:
    """The tasks of a workload split, or (`novel`) the NOVEL_TASKS tasks of no workload:
    what a corpus samples and a vocabulary walks."""
    from ..workloads import split_tasks
    return novel_tasks(NOVEL_TASKS) if split == "novel" else split_tasks(split)
