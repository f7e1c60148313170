"""Which vectorized loops become one float2 / float4 access.

A vectorized loop of 2 or 4 float32 lanes whose body copies `dst[base + v] = src[base' +
v]` is one wide load and one wide store when both bases are multiples of the lane count
(the buffers themselves are 16-byte aligned). A cooperative fetch into shared memory
indexes its source through the fused loop it was split from (`(o*4 + v) // W * S + (o*4 +
v) % W`), which the simplifier leaves as is; `lanes` reads such an index as `base + c*v`
and knows the base's alignment, using that a lane run of an aligned base never crosses a
multiple of W when the lane count divides W.
"""
from __future__ import annotations

from math import gcd
from typing import NamedTuple

from ..ir import arith
from ..ir import expr as E
from ..ir.stmt import For, IfThenElse, Stmt, Store

ALIGNED = 1 << 30  # the alignment of 0: any


class Lanes(NamedTuple):
    """An index as `base + coeff * v`, with `base` a multiple of `align` for every value of
    the other variables."""
    base: E.Expr
    coeff: int
    align: int


def lanes(e: E.Expr, v: E.Var, n: int) -> Lanes | None:
    """`e` over lanes v = 0..n-1 as a Lanes, or None when it cannot be read so."""
    if e is v:
        return Lanes(E.const(0), 1, ALIGNED)
    if isinstance(e, E.Const):
        return Lanes(e, 0, abs(int(e.value)) or ALIGNED) if type(e.value) is int else None
    if isinstance(e, (E.Add, E.Sub)):
        a, b = lanes(e.a, v, n), lanes(e.b, v, n)
        if a is None or b is None:
            return None
        sign = 1 if isinstance(e, E.Add) else -1
        return Lanes(type(e)(a.base, b.base), a.coeff + sign * b.coeff, gcd(a.align, b.align))
    if isinstance(e, E.Mul):
        for x, k in ((e.a, e.b), (e.b, e.a)):
            if isinstance(k, E.Const) and type(k.value) is int:
                a = lanes(x, v, n)
                return None if a is None else Lanes(E.Mul(a.base, k), a.coeff * k.value,
                                                     min(a.align * abs(k.value), ALIGNED) or ALIGNED)
        return None if any(x is v for x in E.walk(e)) else Lanes(e, 0, 1)
    if isinstance(e, (E.FloorDiv, E.FloorMod)) and isinstance(e.b, E.Const) and e.b.value > 0:
        a, w = lanes(e.a, v, n), e.b.value
        span = a.coeff * n if a is not None else 0
        if a is None or a.coeff < 0 or (a.coeff and (a.align % span or w % span)):
            return None  # the lanes may cross a multiple of w
        if isinstance(e, E.FloorDiv):
            return Lanes(E.FloorDiv(a.base, e.b), 0, a.align // w if a.align % w == 0 else 1)
        return Lanes(E.FloorMod(a.base, e.b), a.coeff, gcd(a.align, w))
    return None if any(x is v for x in E.walk(e)) else Lanes(e, 0, 1)


class VectorCopy(NamedTuple):
    """`dst[dst_base : + n] = src[src_base : + n]` as one access of `n` float32 lanes,
    under `cond` (None: always)."""
    n: int
    dst: Store
    dst_base: E.Expr
    src: E.Load
    src_base: E.Expr
    cond: E.Expr | None


def vector_copy(loop: For) -> VectorCopy | None:
    """The wide copy a vectorized loop is, or None (it runs as an unrolled scalar loop)."""
    n = loop.extent.value if isinstance(loop.extent, E.Const) else 0
    body: Stmt = loop.body
    cond = None
    if isinstance(body, IfThenElse) and body.orelse is None and not any(x is loop.var for x in E.walk(body.cond)):
        cond, body = body.cond, body.then
    if (n not in (2, 4) or not isinstance(body, Store) or not isinstance(body.value, E.Load)
            or body.buffer.dtype != "float32" or body.value.buffer.dtype != "float32"):
        return None
    d, s = lanes(body.index, loop.var, n), lanes(body.value.index, loop.var, n)
    if d is None or s is None or (d.coeff, s.coeff) != (1, 1) or d.align % n or s.align % n:
        return None
    return VectorCopy(n, body, arith.simplify(d.base), body.value, arith.simplify(s.base), cond)
