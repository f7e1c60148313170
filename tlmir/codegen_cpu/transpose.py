"""Transposing copies as register-blocked transposes: `for a: for b: dst[a, b] = src[b, a]`.

Why: the packed copy of torch Linear's N×K weight (`W.pack[k, j] = W[j, k]`, the space's
rule `pack`) is a transposition. Emitted element by element it is a strided scalar load
and a store per value; vectorized along `b` it is a gather per vector, one load per lane.
That copy runs at about a tenth of the best dense kernels' speed. Blocked, it reads
L contiguous vectors along `a` (L rows of `src`), transposes the L×L block in registers
with log2(L) rounds of two-source shuffles, and writes L contiguous vectors along `b`:
two memory operations and log2(L) shuffles per vector of L values.

Taken: a loop whose body is exactly one loop whose body is one copy `dst[f] = src[g]`,
constant extents of at least L, `dst` contiguous in the inner variable and `src` contiguous
in the outer one, different buffers, and rows of `dst` that do not overlap (so the order of
the copies cannot matter). Extents that L does not divide leave scalar edge loops.
"""
from __future__ import annotations

from typing import NamedTuple

from llvmlite import ir

from ..ir import expr as E
from ..ir import stmt as S
from ..ir.analysis import stride
from .exprs import I64, elem_size


class TransposeNest(NamedTuple):
    """A recognised transposing copy: `outer { inner { store } }`, store.value a Load."""
    outer: S.For
    inner: S.For
    store: S.Store


_KINDS = ("serial", "unrolled", "vectorized", "parallel")


def match_transpose_nest(s: S.For, lanes: int) -> TransposeNest | None:
    """The transposing copy that loop nest `s` is, or None (see the module docstring)."""
    inner = s.body
    if not isinstance(inner, S.For) or s.kind not in _KINDS or inner.kind not in _KINDS[:3]:
        return None
    if not (isinstance(s.extent, E.Const) and isinstance(inner.extent, E.Const)):
        return None
    if s.extent.value < lanes or inner.extent.value < lanes:
        return None
    st = inner.body
    if not isinstance(st, S.Store) or not isinstance(st.value, E.Load):
        return None
    ld, dt = st.value, st.buffer.dtype
    if ld.buffer is st.buffer or ld.dtype != dt or dt == "bool":
        return None
    if any(isinstance(n, E.Load) for e in (ld.index, st.index) for n in E.walk(e)):
        return None  # an indirect index might read what the copy writes
    a, b = s.var, inner.var
    if stride(st.index, b) != 1 or stride(ld.index, a) != 1:
        return None
    row, col = stride(st.index, a), stride(ld.index, b)
    if row is None or abs(row) < inner.extent.value or col in (None, 0, 1):
        return None
    return TransposeNest(s, inner, st)


def transpose_block(em, rows: list[ir.Value]) -> list[ir.Value]:
    """Columns of the L×L block whose rows are `rows` (L a power of two): log2(L) rounds,
    each zipping row i with row i + L/2 into two rows (lower halves, then upper halves)."""
    n, h = len(rows), len(rows) // 2
    lo = [x for k in range(h) for x in (k, n + k)]
    hi = [x for k in range(h, n) for x in (k, n + k)]
    for _ in range(n.bit_length() - 1):
        out = []
        for i in range(h):
            out += [em.shuffle(rows[i], rows[i + h], lo), em.shuffle(rows[i], rows[i + h], hi)]
        rows = out
    return rows


def _index_at(em, e: E.Expr, binds: dict) -> ir.Value:
    """`e` evaluated with the loop variables in `binds` set to the given values."""
    old = {v: em.env.get(v) for v in binds}
    em.env.update(binds)
    try:
        return em.index(e)
    finally:
        for v, x in old.items():
            if x is None:
                del em.env[v]
            else:
                em.env[v] = x


def emit_transpose_nest(em, t: TransposeNest, a_lo: ir.Value | None = None,
                        n_a: ir.Value | None = None) -> None:
    """Emit the copy `t` (matched by `match_transpose_nest`) as L×L register transposes
    over the part of the nest L divides, then plain loops over the edges. `a_lo` / `n_a`
    give a share of the outer range instead of the whole (a parallel thread's chunk)."""
    w = em.mod.lanes_hint
    outer, inner, st = t
    ld, dt = st.value, st.buffer.dtype
    a, b, n_b = outer.var, inner.var, inner.extent.value
    vt, align = em.ty(dt, w, mem=True), elem_size(dt)
    src, dst = em.buffer(ld.buffer), em.buffer(st.buffer)
    a_lo = em.index(outer.min) if a_lo is None else a_lo
    fixed = outer.extent.value if n_a is None else None
    n_a = ir.Constant(I64, fixed) if n_a is None else n_a
    b_lo = em.index(inner.min)
    blocks_a = em.b.sdiv(n_a, ir.Constant(I64, w))
    done_a = em.b.mul(blocks_a, ir.Constant(I64, w), flags=("nsw",))

    def at(base: ir.Value, blk: ir.Value, k: int) -> ir.Value:
        start = em.b.add(base, em.b.mul(blk, ir.Constant(I64, w), flags=("nsw",)), flags=("nsw",))
        return em.b.add(start, ir.Constant(I64, k), flags=("nsw",)) if k else start

    def block(ai: ir.Value, bi: ir.Value) -> None:
        a0, b0 = at(a_lo, ai, 0), at(b_lo, bi, 0)
        rows = [em.b.load(em.gep(src, _index_at(em, ld.index, {a: a0, b: at(b_lo, bi, r)}), dt),
                          typ=vt, align=align) for r in range(w)]
        for c, col in enumerate(transpose_block(em, rows)):
            p = em.gep(dst, _index_at(em, st.index, {a: at(a_lo, ai, c), b: b0}), dt)
            em.b.store(col, p, align=align)

    zero = ir.Constant(I64, 0)
    em.loop(zero, blocks_a, lambda ai: em.loop(zero, ir.Constant(I64, n_b // w),
                                               lambda bi: block(ai, bi), f"{b.name}.tr"), f"{a.name}.tr")
    done_b = n_b // w * w
    if done_b < n_b:  # columns past the last whole block, for the rows the blocks covered
        edge = S.For(b, inner.min + E.const(done_b), E.const(n_b - done_b), inner.kind, st)
        em.loop(a_lo, em.b.add(a_lo, done_a, flags=("nsw",)), lambda i: em.stmt_with(a, i, edge), a.name)
    if fixed is None or fixed % w:  # rows past the last whole block, every column
        em.loop(em.b.add(a_lo, done_a, flags=("nsw",)), em.b.add(a_lo, n_a, flags=("nsw",)),
                lambda i: em.stmt_with(a, i, inner), a.name)
