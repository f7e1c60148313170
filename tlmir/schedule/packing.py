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

from ..ir.expr import TensorRead, Var, substitute, walk
from ..ir.tensor import ComputeOp, PlaceholderOp
from .relations import Fuse, derive_trip_counts


def _reads(op: ComputeOp) -> list[TensorRead]:
    return [n for n in walk(op.body) if isinstance(n, TensorRead)]


def pack_layouts(op, vector_axis: int = -1) -> list[tuple[str, tuple[int, ...]]]:
    """(input name, layout) for each input of `op` worth packing, in first-read order:
    inputs indexed by the spatial axis `op.axis[vector_axis]` (the innermost, which gets
    vectorized, unless a transposed accumulator puts another last) and by a reduction
    axis; the layout moves the dimension of that spatial axis last (the identity if it is
    last already). Only inputs (placeholders) read with bare variables in every read
    qualify."""
    if not isinstance(op, ComputeOp) or not op.reduce_axis or not op.axis:
        return []
    vec = id(op.axis[vector_axis].var)
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


def transposed_vector_axis(op, lanes: int) -> int | None:
    """The spatial axis to vectorize instead of the innermost one, or None.

    An NCHW conv vectorizes its output width: 7 lanes of 16 on ResNet's last stage, and
    a gather of every input vector when it strides by 2. Its output channels `k` fill
    whole vectors when the weight is packed with `k` last and the input is broadcast, as
    oneDNN's blocked layouts do. Offered when the innermost axis is shorter than two
    vectors and another axis (the innermost such) has a multiple of `lanes` elements and
    indexes no input except ones `pack_layouts` can pack for it (at least one)."""
    if not isinstance(op, ComputeOp) or not op.reduce_axis or len(op.axis) < 2:
        return None
    if op.axis[-1].extent >= 2 * lanes:
        return None
    reduce_vars = {id(a.var) for a in op.reduce_axis}
    for d in range(len(op.axis) - 2, -1, -1):
        if op.axis[d].extent % lanes:
            continue
        v = id(op.axis[d].var)
        readers = [r for r in _reads(op)
                   if v in {id(x) for i in r.indices for x in walk(i) if isinstance(x, Var)}]
        if readers and all(isinstance(r.tensor.op, PlaceholderOp)
                           and _layout(r.indices, v, reduce_vars) is not None for r in readers):
            return d
    return None


def axis_last(ndim: int, d: int) -> tuple[int, ...]:
    """The layout (a permutation) that moves dimension `d` last."""
    return tuple(p for p in range(ndim) if p != d) + (d,)


def _layout(indices, vec: int, reduce_vars: set) -> tuple[int, ...] | None:
    """Var identities (`==` on expressions builds an expression)."""
    if not all(isinstance(i, Var) for i in indices):
        return None
    ids = [id(i) for i in indices]
    if vec not in ids or not reduce_vars.intersection(ids):
        return None
    return axis_last(len(indices), ids.index(vec))


def pack_repeats(pack, chain: list[tuple]) -> dict[int, int]:
    """How many times a pack computed at each loop copies every element it holds, by
    id(loop): the product of the trip counts of the loops around it (itself included) that
    run over axes the pack's indices do not depend on. Computed inside the loop over dense's
    `i` tiles, each tile packs the same panel of W again; at a loop over `j` or `k` tiles
    each copy is a different part of it.

    `chain`: the reader of `pack` and the stages it is attached inside, innermost first,
    each with the loop the chain enters it by (rules.cpu._attach_chain). An axis of a stage is
    relevant when its variable indexes the pack (the reader) or indexes, in the stage's
    reads of the next stage inward, a relevant axis of that stage; a stage that does not
    read the next one directly counts every axis as relevant. Trip counts are those bound
    inference will give: a stage attached inside a loop covers only the part of each axis
    that the loops inside the attach point cover."""
    relevant = _relevant_axes(pack, [st for st, _ in chain])
    deriv = {id(st): _derivation(st) for st, _ in chain}
    trips: dict[int, int] = {}
    region: dict[int, int] = {}
    for k in range(len(chain) - 1, -1, -1):
        st = chain[k][0]
        trips.update(_trip_counts(st, region))
        if k:
            region = _child_region(st, chain[k - 1][0], chain[k][1], trips, deriv[id(st)])
    out, prod = {}, 1
    for st, entry in reversed(chain):
        leaves = st.leaf_iter_vars
        last = leaves.index(entry) if entry is not None else len(leaves) - 1
        irrelevant = _irrelevant_trips(st, relevant, trips, deriv[id(st)])
        for iv in leaves[:last + 1]:
            prod *= irrelevant[id(iv)]
            out[id(iv)] = prod
    return out


def _roots(st) -> list:
    return list(st.op.axis) + list(st.op.reduce_axis)


def _relevant_axes(pack, stages: list) -> set[int]:
    """ids of the root axes of `stages` (innermost first) that the pack depends on."""
    used = {id(v) for r in _reads(stages[0].op) if r.tensor is pack for i in r.indices
            for v in walk(i) if isinstance(v, Var)}
    relevant = {id(a) for a in _roots(stages[0]) if id(a.var) in used}
    out, inner = set(relevant), stages[0]
    for st in stages[1:]:
        reads = _index_lists(st, inner)
        if reads:
            rel_vars = {id(v) for r in reads for d, i in enumerate(r)
                        if d < len(inner.op.axis) and id(inner.op.axis[d]) in relevant
                        for v in walk(i) if isinstance(v, Var)}
            relevant = {id(a) for a in st.op.axis if id(a.var) in rel_vars}
        else:
            relevant = {id(a) for a in _roots(st)}
        out |= relevant
        inner = st
    return out


def _index_lists(st, target) -> list[tuple]:
    """The index lists with which stage `st` reads stage `target`'s output, also through
    stages inlined into it (gelu reads D through the inlined `bias`: D[i, j] in gelu's
    variables). Reads name the original tensor of a stage that a cache_read rewrote."""
    out = []
    for r in _reads(st.op):
        src = st.sch[r.tensor]
        if src is target:
            out.append(r.indices)
        elif src.attach[0] == "inline":
            vmap = {a.var: i for a, i in zip(src.op.axis, r.indices)}
            out += [tuple(substitute(i, vmap) for i in idx) for idx in _index_lists(src, target)]
    return out


def _trip_counts(st, region: dict[int, int]) -> dict[int, int]:
    """id(loop) -> trip count of each loop of `st` whose root axes cover `region` (by id;
    the whole axis where absent), as lowering will count them."""
    t = {id(a): region.get(id(a), a.extent) for a in _roots(st)}
    derive_trip_counts(st.relations, t)
    return t


def _derivation(st) -> dict[int, set[int]]:
    """id(loop) -> ids of the root axes it runs over."""
    d = {id(a): {id(a)} for a in _roots(st)}
    for rel in st.relations:
        if isinstance(rel, Fuse):
            d[id(rel.fused)] = d[id(rel.outer)] | d[id(rel.inner)]
        else:
            d[id(rel.outer)] = d[id(rel.inner)] = d[id(rel.parent)]
    return d


def _child_region(parent, child, entry, trips: dict[int, int],
                  deriv: dict[int, set[int]]) -> dict[int, int]:
    """How much of each of `child`'s axes one iteration of `parent`'s loop `entry` covers:
    the trip counts of the parent's loops inside `entry` over the axis that indexes it
    (`deriv`: the parent's `_derivation`)."""
    leaves = parent.leaf_iter_vars
    inside = leaves[leaves.index(entry) + 1:]
    span = {id(a): 1 for a in _roots(parent)}
    for iv in inside:
        for r in deriv[id(iv)]:
            span[r] *= trips[id(iv)]
    by_var = {id(a.var): span[id(a)] for a in parent.op.axis}
    region: dict[int, int] = {}
    for r in _index_lists(parent, child):
        for d, i in enumerate(r):
            if d < len(child.op.axis) and id(i) in by_var:
                a = child.op.axis[d]
                region[id(a)] = min(a.extent, max(region.get(id(a), 0), by_var[id(i)]))
    return region


def _irrelevant_trips(st, relevant: set[int], trips: dict[int, int],
                      deriv: dict[int, set[int]]) -> dict[int, int]:
    """id(loop) -> the part of its trip count over axes not in `relevant` (`deriv`: the
    stage's `_derivation`)."""
    f = {k: (1 if roots & relevant else trips[k]) for k, roots in deriv.items()}
    for rel in st.relations:
        if isinstance(rel, Fuse):  # a fused loop of i and j tiles: the i part
            f[id(rel.fused)] = f[id(rel.outer)] * f[id(rel.inner)]
    return f
