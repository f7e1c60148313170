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
