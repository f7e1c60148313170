"""When a multi-level-tiled reduction should read an input through a packed copy.

A tiled stage's innermost loop is its last spatial axis, the one that gets vectorized.
When an input is contiguous in a reduction axis (its innermost dimension is indexed by a
bare reduce axis) and that innermost spatial axis indexes another of its dimensions,
every vector of the inner loop is a gather: dense's `W[j, k]` (torch Linear's N×K weight)
read over 16 lanes of `j` is `vgatherdps` with a 3 KiB stride. Copying the part of the
input a tile needs into a buffer with that dimension last (`W.pack[k, j]`) makes the inner
loop read contiguous vectors, as the demo matmul's packed panel of B does (the derivation
rule `pack` in space.py).

An input that already has that dimension last but is also indexed by a reduction axis
(matmul's `B[k, j]`) gets a copy in its own layout: computed inside the loop over the
tiles of its other spatial dimensions, the copy is the contiguous K×(tile width) panel
those tiles read, where `B` itself strides 4 KiB from one `k` to the next. The demo
matmul's schedule is this; one 8×32 tiling of matmul 1024³ runs 2.4× faster with the
panel than without it.
"""
from __future__ import annotations

from ..ir.expr import TensorRead, Var, walk
from ..ir.tensor import ComputeOp, PlaceholderOp
from .schedule import Fuse


def _reads(op: ComputeOp) -> list[TensorRead]:
    return [n for n in walk(op.body) if isinstance(n, TensorRead)]


def pack_layouts(op) -> list[tuple[str, tuple[int, ...]]]:
    """(input name, layout) for each input of `op` worth packing, in first-read order:
    inputs indexed by `op`'s innermost spatial axis and by a reduction axis; the layout
    moves the dimension of that spatial axis last (the identity if it is last already).
    Only inputs (placeholders) read with bare variables in every read qualify."""
    if not isinstance(op, ComputeOp) or not op.reduce_axis or not op.axis:
        return []
    vec = id(op.axis[-1].var)
    reduce_vars = {id(a.var) for a in op.reduce_axis}
    by_tensor: dict[str, list[TensorRead]] = {}
    tensors = {}
    for r in _reads(op):
        by_tensor.setdefault(r.tensor.name, []).append(r)
        tensors[r.tensor.name] = r.tensor
    out = []
    for name, reads in by_tensor.items():
        if not isinstance(tensors[name].op, PlaceholderOp) or len(tensors[name].shape) < 2:
            continue
        layouts = {_layout(r.indices, vec, reduce_vars) for r in reads}
        if len(layouts) == 1 and None not in layouts:
            out.append((name, layouts.pop()))
    return out


def _layout(indices, vec: int, reduce_vars: set) -> tuple[int, ...] | None:
    """Var identities (`==` on expressions builds an expression)."""
    if not all(isinstance(i, Var) for i in indices):
        return None
    ids = [id(i) for i in indices]
    if vec not in ids or not reduce_vars.intersection(ids):
        return None
    d = ids.index(vec)
    return tuple(p for p in range(len(indices)) if p != d) + (d,)


def pack_repeats(pack, chain: list[tuple]) -> dict[int, int]:
    """How many times a pack computed at each loop copies every element it holds, by
    id(loop): the product of the extents of the loops around it (itself included) that run
    over axes the pack's indices do not depend on. Computed inside the loop over dense's
    `i` tiles, each tile packs the same panel of W again; at a loop over `j` or `k` tiles
    each copy is a different part of it.

    `chain`: the reader of `pack` and the stages it is attached inside, innermost first,
    each with the loop the chain enters it by (space._attach_chain). An axis of a stage is
    relevant when its variable indexes the pack (the reader) or indexes, in the stage's
    reads of the next stage inward, an axis of that stage which is relevant; a stage that
    does not read the next one directly counts every axis as relevant (never pruned)."""
    reader = chain[0][0]
    used = {id(v) for r in _reads(reader.op) if r.tensor is pack for i in r.indices
            for v in walk(i) if isinstance(v, Var)}
    relevant = {id(a) for a in list(reader.op.axis) + list(reader.op.reduce_axis) if id(a.var) in used}
    factors, inner = {}, reader
    for k, (st, _) in enumerate(chain):
        if k:
            reads = [r for r in _reads(st.op) if r.tensor is inner.op.output()]
            if reads:
                rel_vars = {id(i) for r in reads for d, i in enumerate(r.indices)
                            if d < len(inner.op.axis) and id(inner.op.axis[d]) in relevant}
                relevant = {id(a) for a in st.op.axis if id(a.var) in rel_vars}
            else:
                relevant = {id(a) for a in list(st.op.axis) + list(st.op.reduce_axis)}
        factors.update(_irrelevant_extents(st, relevant))
        inner = st
    out, prod = {}, 1
    for st, entry in reversed(chain):
        leaves = st.leaf_iter_vars
        last = leaves.index(entry) if entry is not None else len(leaves) - 1
        for iv in leaves[:last + 1]:
            prod *= factors[id(iv)]
            out[id(iv)] = prod
    return out


def _irrelevant_extents(st, relevant: set[int]) -> dict[int, int]:
    """id(loop) -> the part of its extent over axes not in `relevant` (root axes of `st`),
    following the stage's splits and fuses."""
    f = {id(a): (1 if id(a) in relevant else a.extent) for a in list(st.op.axis) + list(st.op.reduce_axis)}
    for rel in st.relations:
        if isinstance(rel, Fuse):
            f[id(rel.fused)] = f[id(rel.outer)] * f[id(rel.inner)]
        else:
            p = f[id(rel.parent)]
            f[id(rel.outer)] = min(rel.outer.extent, p) if p > 1 else 1
            f[id(rel.inner)] = min(rel.inner.extent, p) if p > 1 else 1
    return f
