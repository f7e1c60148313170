"""A dense's epilogue: the element-wise region after it, computed in its kernel.

Relay fuses the injective ops after a dense into its kernel; a chain of single-user ops
is not enough for that, because models write functions that read a value several times
(GPT-2's tanh-GELU reads the dense's output three times). The region here is a DAG: the
element-wise nodes after the dense that read its output or an earlier region node, whose
other operands are values computed before the dense (a residual) or constants, each
either of the region's shape or broadcast along rows (a per-column vector, a scalar), up
to the region's single exit. It is evaluated in the dense's (rows, N) layout, so views
that keep the last axis are transparent. The task is te: dense, bias, then the region.
"""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.fx as fx

from .. import te
from ..runtime.task import Task
from .capture import Graph, op_name
from .elementwise import broadcast_read, chain_expr, is_elementwise

VIEWS = {"view", "_unsafe_view", "reshape"}


def epilogue_region(g: Graph, n: fx.Node, order: dict, taken: set, window: int = 64) -> list[fx.Node]:
    """The region after dense output n, in graph order (empty if none): its last node is
    the only one used outside it, and a graph output only if last."""
    shape, start = g.shape(n), order[n]
    numel, N = math.prod(shape), shape[-1]
    inside, grown = {n}, []
    for u in g.nodes:
        if order[u] <= start or u in taken:
            continue
        if order[u] > start + window:
            break
        if not isinstance(u.meta.get("val"), torch.Tensor):
            continue
        s = g.shape(u)
        if not s or s[-1] != N or math.prod(s) != numel:
            continue
        if op_name(u) in VIEWS:
            ok = u.args[0] in inside
        elif not is_elementwise(u):
            continue
        else:
            tensors = [a for a in u.args if isinstance(a, fx.Node)]
            ok = any(a in inside for a in tensors) and all(
                a in inside or (order.get(a, -1) < start and row_broadcast(g, a, s)) for a in tensors)
        if ok:
            inside.add(u)
            grown.append(u)
    for end in range(len(grown), 0, -1):    # the longest prefix with a single exit
        region = grown[:end]
        members = {n, *region}
        if any(op_name(u) not in VIEWS for u in region) and all(
                not g.is_output(v) and all(w in members for w in v.users) for v in [n, *region[:-1]]):
            return region
    return []


def row_broadcast(g: Graph, a: fx.Node, shape: tuple) -> bool:
    """Whether `a` reads the same in a dense's (rows, N) layout as at `shape`: the full
    shape, or one that broadcasts along every axis but the last."""
    s = g.shape(a)
    core = tuple(s[next((i for i, d in enumerate(s) if d != 1), len(s)):])
    return s == shape or len(core) == 0 or (len(core) == 1 and core[0] in (1, shape[-1]))


def dense_epilogue_task(g: Graph, n: fx.Node, region: list[fx.Node], M: int, N: int, K: int,
                        bias: bool) -> tuple[Task, list[tuple[fx.Node, tuple, torch.Tensor | None]]]:
    """The te task `dense[_bias]_mMnNkK_<ops>` (inputs X, W, [b], then the region's outside
    operands) and those operands as (node, shape in the kernel, constant or None)."""
    X, W = te.placeholder((M, K), name="X"), te.placeholder((N, K), name="W")
    ins = [X, W] + ([te.placeholder((N,), name="b")] if bias else [])
    k = te.reduce_axis(K, "k")
    D = te.compute((M, N), lambda i, j: te.sum(X[i, k] * W[j, k], axis=k), name="D")
    if bias:
        d0, b = D, ins[2]
        D = te.compute((M, N), lambda i, j: d0[i, j] + b[j], name="bias")
    extra: dict[fx.Node, te.Tensor] = {}
    operands = []
    for u in region:
        for a in u.args:
            if isinstance(a, fx.Node) and a is not n and a not in region and a not in extra:
                full = g.shape(a) == g.shape(u)
                s = (M, N) if full else ((N,) if g.shape(a)[-1:] == (N,) and N != 1 else (1,))
                c = g.constants.get(a)
                operands.append((a, s, c.float().reshape(s).contiguous() if c is not None else None))
                extra[a] = te.placeholder(s, name=f"in{len(extra)}")
                ins.append(extra[a])
    views = {u: (lambda x, idx: x) for u in region if op_name(u) in VIEWS}

    def body(i, j):
        return chain_expr(region, lambda a: D[i, j] if a is n else broadcast_read(extra[a], (M, N), (i, j)),
                          views, (i, j))
    out = te.compute((M, N), body, name="out")
    words = [op_name(u).strip("_") for u in region if u not in views]
    name = (f"dense{'_bias' if bias else ''}_m{M}_n{N}_k{K}_" + "_".join(words[:4])
            + ("_etc" if len(words) > 4 else ""))
    return Task(name, ins + [out], reference=_reference(n, region, list(extra), g.shape(n), bias)), operands


def _reference(n: fx.Node, region: list, extra: list, shape: tuple, bias: bool):
    """dense (+ bias) in float64, then the region evaluated by PyTorch on the nodes' own
    shapes: a task reference independent of te."""
    def ref(x, w, *rest):
        d = np.asarray(x, np.float64) @ np.asarray(w, np.float64).T
        if bias:
            d = d + np.asarray(rest[0], np.float64)
            rest = rest[1:]
        env = {n: torch.from_numpy(d.reshape(shape))}
        for a, v in zip(extra, rest):
            env[a] = torch.from_numpy(np.asarray(v, np.float64))
        for u in region:
            env[u] = u.target(*[_value(env, a) for a in u.args], **u.kwargs)
        return [env[region[-1]].numpy().reshape(d.shape)]
    return ref


def _value(env: dict, a):
    """An argument in the reference: an operand held in the kernel's layout ((rows, N),
    (N,) or (1,)) is read back at its node's own shape."""
    if not isinstance(a, fx.Node):
        return a
    want = tuple(a.meta["val"].shape)
    v = env[a]
    return v.reshape(want) if tuple(v.shape) != want else v
