"""Reduction loops as SIMD: `for k: acc[i] = acc[i] + f(k)` with f contiguous in k.

Why: a reduction whose loop is the innermost one (a row sum of softmax / layernorm, the
final horizontal step of an rfactor'ed reduction) is one serial dependence chain: LLVM may
not reorder float additions, so it neither vectorizes the loop nor splits the chain, and
every step waits for the previous add (4 cycles). PyTorch's row reductions keep several
vector partial results and combine them with a shuffle tree; this emits the same: `f` is
evaluated for `lanes_hint` consecutive k at once into `REDUCE_ACCUMULATORS` independent
vector partials, which are combined by halving the vector (log2 steps) at the end. The
summation order changes (like rfactor, or any vectorized sum); max / min give the same
result as the serial loop for non-NaN data.

The loops taken are those `ir.analysis.match_reduce_loop` matches (one such store, every
load of `f` contiguous in k), a definition the program features share.
"""
from __future__ import annotations

from llvmlite import ir

from ..ir import expr as E
from ..ir import stmt as S
from ..ir.analysis import ReduceLoop
from .exprs import I32, I64, REDUCE_FLAGS, Lanes, elem_size

REDUCE_ACCUMULATORS = 4  # independent vector partials: hides the add latency (4 cycles, 2 ports)


def _identity(kind: type) -> float:
    return {E.Add: 0.0, E.Max: -float("inf"), E.Min: float("inf")}[kind]


def _combine(em, kind: type, a: ir.Value, b: ir.Value) -> ir.Value:
    """The same combine the serial loop uses (select for max / min, as exprs.py)."""
    if kind is E.Add:
        return em.b.fadd(a, b, flags=REDUCE_FLAGS)
    return em.b.select(em.b.fcmp_ordered(">" if kind is E.Max else "<", a, b), a, b)


def _horizontal(em, kind: type, v: ir.Value, dtype: str) -> ir.Value:
    """One scalar from a vector: pad to a power of two with the identity, then halve."""
    n = v.type.count
    p = 1 << (n - 1).bit_length()
    if p != n:
        pad = em.const(_identity(kind), dtype, n)
        v = em.shuffle(v, pad, list(range(n)) + [n] * (p - n))
    while p > 1:
        h = p // 2
        undef = ir.Constant(v.type, ir.Undefined)
        v = _combine(em, kind, em.shuffle(v, undef, list(range(h))),
                     em.shuffle(v, undef, list(range(h, p))))
        p = h
    return em.b.extract_element(v, ir.Constant(I32, 0))


def _lanes_of(em, red: ReduceLoop, var: E.Var, base: ir.Value, n: int) -> ir.Value:
    """`src` for k = base .. base + n - 1 as one <n x T> vector."""
    shadowed = em.env.pop(var, None)
    em.lanes = Lanes(var, base, n)
    try:
        v = em.splat(em.expr(red.src), n)
    finally:
        em.lanes = None
        if shadowed is not None:
            em.env[var] = shadowed
    return v


def emit_reduce_loop(em, s: S.For, red: ReduceLoop) -> None:
    """Emit reduction loop `s` (matched by `match_reduce_loop`) with vector partials."""
    n, w = s.extent.value, em.mod.lanes_hint
    dt = red.store.buffer.dtype
    lo = em.index(s.min)
    if n <= REDUCE_ACCUMULATORS * w:
        total = _horizontal(em, red.kind, _lanes_of(em, red, s.var, lo, n), dt)
    else:
        step = REDUCE_ACCUMULATORS * w
        vt = ir.VectorType(em.ty(dt), w)
        slots = [em.entry_alloca(vt, f"{s.var.name}.acc") for _ in range(REDUCE_ACCUMULATORS)]
        for p in slots:
            em.b.store(em.const(_identity(red.kind), dt, w), p)

        def chunk(c: ir.Value) -> None:
            start = em.b.add(lo, em.b.mul(c, ir.Constant(I64, step)), flags=("nsw",))
            for a, p in enumerate(slots):
                base = em.b.add(start, ir.Constant(I64, a * w), flags=("nsw",))
                v = _lanes_of(em, red, s.var, base, w)
                em.b.store(_combine(em, red.kind, em.b.load(p, typ=vt), v), p)

        em.loop(ir.Constant(I64, 0), ir.Constant(I64, n // step), chunk, s.var.name + ".red")
        accs = [em.b.load(p, typ=vt) for p in slots]
        done = n // step * step
        for j in range((n - done) // w):  # whole vectors left over
            base = em.b.add(lo, ir.Constant(I64, done + j * w), flags=("nsw",))
            accs[j] = _combine(em, red.kind, accs[j], _lanes_of(em, red, s.var, base, w))
        while len(accs) > 1:
            accs = [_combine(em, red.kind, accs[k], accs[k + 1]) if k + 1 < len(accs) else accs[k]
                    for k in range(0, len(accs), 2)]
        total = _horizontal(em, red.kind, accs[0], dt)
        tail = n % w
        if tail:
            base = em.b.add(lo, ir.Constant(I64, n - tail), flags=("nsw",))
            total = _combine(em, red.kind, total,
                             _horizontal(em, red.kind, _lanes_of(em, red, s.var, base, tail), dt))
    st = red.store
    ptr = em.gep(em.buffer(st.buffer), em.index(st.index), dt)
    acc = em.b.load(ptr, typ=total.type, align=elem_size(dt))
    em.b.store(_combine(em, red.kind, acc, total), ptr, align=elem_size(dt))
