"""Small loop-IR queries: affine strides, lane dependence, captures, SIMD reduction loops.

The CPU code generator decides by them; they are written here (not taken from a simplifier)
so its decisions only depend on the shape of the expressions it is handed. They sit in the
IR layer, not in codegen_cpu, because the program features (search.features) must count a
loop as vectorized exactly when the code generator vectorizes it, and search does not import
a code generator (tests/test_imports.py).
"""
from __future__ import annotations

from typing import NamedTuple

from . import expr as E
from . import stmt as S

REDUCE_MIN_EXTENT = 4    # shorter reduction loops stay scalar


def depends(e: E.Expr, var: E.Var) -> bool:
    """Does `e` mention `var` (directly or inside a load index)?"""
    return any(n is var for n in E.walk(e))


def stride(e: E.Expr, var: E.Var) -> int | None:
    """The constant step of integer expression `e` per unit step of `var`, or None when `e`
    is not affine in `var` with a constant coefficient. 0 means `e` does not vary with `var`."""
    if e is var:
        return 1
    if isinstance(e, (E.Const, E.Var)):
        return 0
    if isinstance(e, (E.Add, E.Sub, E.Mul)):
        sa, sb = stride(e.a, var), stride(e.b, var)
        if sa is None or sb is None:
            return None
        if isinstance(e, E.Add):
            return sa + sb
        if isinstance(e, E.Sub):
            return sa - sb
        if sa == 0 and sb == 0:
            return 0
        for c, s in ((e.b, sa), (e.a, sb)):
            if isinstance(c, E.Const) and type(c.value) is int:
                return s * c.value
        return None
    if isinstance(e, E.Cast) and e.dtype in E.INT_DTYPES and e.value.dtype in E.INT_DTYPES:
        return stride(e.value, var)
    return None if depends(e, var) else 0


def risky(e: E.Expr) -> bool:
    """Could evaluating `e` fault when its enclosing condition is false (a load out of
    bounds, an integer division by zero)? Such subtrees are emitted under a guard."""
    for n in E.walk(e):
        if isinstance(n, E.Load):
            return True
        if (isinstance(n, (E.FloorDiv, E.FloorMod, E.Div)) and not E.is_float(n.dtype)
                and not isinstance(n.b, E.Const)):
            return True
    return False


def accumulated(s: S.Store) -> E.Expr | None:
    """`x` if `s` is an update `buf[i] = buf[i] op x` (or `x op buf[i]`) for a binary op, else None."""
    v = s.value
    if not isinstance(v, E.Binary):
        return None
    for acc, other in ((v.a, v.b), (v.b, v.a)):
        if isinstance(acc, E.Load) and acc.buffer is s.buffer and E.same(acc.index, s.index):
            return other
    return None


def is_reduce_update(s: S.Store) -> bool:
    """Is `s` a float reduction update `buf[i] = buf[i] + x` (or `x + buf[i]`, or `*`)?"""
    return (isinstance(s.value, (E.Add, E.Mul)) and E.is_float(s.value.dtype)
            and accumulated(s) is not None)


def can_vectorize(body: S.Stmt, var: E.Var) -> bool:
    """Can `body` run with `var` as an explicit SIMD vector? Nested loops and allocations
    have no vector form here, a lane-dependent `if` would need predicated stores, and a
    lane-varying value stored to one address would change what the serial loop leaves."""
    for s in S.walk_stmt(body):
        if isinstance(s, (S.For, S.Allocate, S.Barrier)):
            return False
        if isinstance(s, S.IfThenElse) and depends(s.cond, var):
            return False
        if isinstance(s, S.Store) and stride(s.index, var) == 0 and depends(s.value, var):
            return False
    return True


def captures(s: S.Stmt, vars_: dict, bufs: dict) -> tuple[list[E.Var], list[S.Buffer]]:
    """The variables and buffers defined outside `s` (keys of `vars_` / `bufs`) that `s`
    uses, in first-use order: what an outlined parallel body must be handed."""
    seen_v: dict[int, E.Var] = {}
    seen_b: dict[int, S.Buffer] = {}
    for st in S.walk_stmt(s):
        if isinstance(st, (S.Store, S.Prefetch)) and st.buffer in bufs:
            seen_b.setdefault(id(st.buffer), st.buffer)
        for root in S.stmt_exprs(st):
            for n in E.walk(root):
                if isinstance(n, E.Var) and n in vars_:
                    seen_v.setdefault(id(n), n)
                elif isinstance(n, E.Load) and n.buffer in bufs:
                    seen_b.setdefault(id(n.buffer), n.buffer)
    return list(seen_v.values()), list(seen_b.values())




class ReduceLoop(NamedTuple):
    """A recognised reduction loop: `store.buffer[store.index] = combine(acc, src)`."""
    store: S.Store
    kind: type  # E.Add, E.Max or E.Min
    src: E.Expr


def match_reduce_loop(s: S.For) -> ReduceLoop | None:
    """The reduction over `s.var` that `s` is, or None: its body is exactly one float update
    `acc[c] = acc[c] op f(k)` (op +, max, min; `c` not depending on `k`), every load of `f`
    that depends on `k` is contiguous in `k` (a gather would be slower than the scalar loop)
    and `f` does not read the accumulator's buffer. codegen_cpu.reduction emits such a loop
    as SIMD partial sums."""
    body = s.body
    if not isinstance(body, S.Store) or not isinstance(s.extent, E.Const):
        return None
    if s.extent.value < REDUCE_MIN_EXTENT or s.kind not in ("serial", "unrolled", "vectorized"):
        return None
    v, var = body.value, s.var
    if not isinstance(v, (E.Add, E.Max, E.Min)) or not E.is_float(v.dtype):
        return None
    if depends(body.index, var):
        return None
    src = accumulated(body)
    if src is None or not depends(src, var):
        return None
    for n in E.walk(src):
        if isinstance(n, E.Load):
            if n.buffer is body.buffer:
                return None
            if stride(n.index, var) not in (0, 1):
                return None
        elif isinstance(n, (E.FloorDiv, E.FloorMod)) and depends(n, var):
            return None
    return ReduceLoop(body, type(v), src)
