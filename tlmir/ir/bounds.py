"""Every tensor read of a compute definition stays inside the tensor, or the definition is
refused: `A[i + 1, j]` over i in [0, 8) of an 8-row A is a DefinitionError naming the
stage, the tensor, the axis and the index range, where it used to read the next row (or
segfault).

Each index's range comes from the ranges of the loop variables (arith.const_bound). A
read in a branch of `te.if_then_else`, or under a reduction's `where`, is checked with the
ranges the branch's condition allows: each conjunct over one variable narrows that
variable to the values that satisfy it (found by evaluating it over the variable's
range), so the padding idiom `if_then_else(i >= 1, A[i - 1], 0)` passes and
`if_then_else(i >= 0, A[i - 1], 0)` does not. A read guarded by a condition over several
variables, or by data, cannot be decided here: it is left to the guard (codegen masks the
branch not taken), as is an index that reads another tensor (a gather).
"""
from __future__ import annotations

from ..errors import DefinitionError
from .arith import const_bound, evaluate
from .expr import And, Call, Expr, Not, Reduce, Select, TensorRead, Var, free_vars, walk

MAX_ENUMERATED = 1 << 16  # a condition's variable is narrowed by evaluation up to this extent


def check_reads(stage: str, axes: list, body: Expr) -> None:
    """Raise DefinitionError if a read of `body` (the compute of `stage` over `axes`, plus
    its reduction axes) can leave its tensor."""
    ranges = {iv.var: (0, iv.extent - 1) for iv in axes}
    if isinstance(body, Reduce):
        ranges.update({iv.var: (0, iv.extent - 1) for iv in body.axes})
    _visit(stage, body, ranges, decided=True)


def _visit(stage: str, e: Expr, ranges: dict, decided: bool) -> None:
    if isinstance(e, Select):
        _visit(stage, e.cond, ranges, decided)
        for branch, cond in ((e.t, e.cond), (e.f, Not(e.cond))):
            narrowed = _narrow(ranges, cond)
            if narrowed is not None:  # None: the branch is never taken
                _visit(stage, branch, narrowed[0], decided and narrowed[1])
        return
    if isinstance(e, Reduce) and e.condition is not None:
        _visit(stage, e.condition, ranges, decided)
        narrowed = _narrow(ranges, e.condition)
        if narrowed is not None:
            _visit(stage, e.source, narrowed[0], decided and narrowed[1])
        return
    if isinstance(e, TensorRead):
        if decided:
            _check(stage, e, ranges)
    for c in e.children():
        _visit(stage, c, ranges, decided)


def _conjuncts(cond: Expr) -> list[Expr]:
    if isinstance(cond, And):
        return _conjuncts(cond.a) + _conjuncts(cond.b)
    if isinstance(cond, Not) and isinstance(cond.a, Not):
        return _conjuncts(cond.a.a)
    return [cond]


def _narrow(ranges: dict, cond: Expr) -> tuple[dict, bool] | None:
    """(ranges where `cond` holds, whether every conjunct was decided); None if no value
    of some variable satisfies it."""
    out, decided = dict(ranges), True
    for c in _conjuncts(cond):
        vs = free_vars(c)
        if len(vs) != 1 or any(isinstance(n, (TensorRead, Call)) for n in walk(c)):
            decided = False
            continue
        (v,) = vs
        if v not in out or out[v][1] - out[v][0] >= MAX_ENUMERATED:
            decided = False
            continue
        lo, hi = out[v]
        try:
            ok = [x for x in range(lo, hi + 1) if evaluate(c, {v: x})]
        except (ValueError, ZeroDivisionError):
            decided = False
            continue
        if not ok:
            return None
        out[v] = (ok[0], ok[-1])
    return out, decided


def _check(stage: str, read: TensorRead, ranges: dict) -> None:
    t = read.tensor
    for k, (idx, extent) in enumerate(zip(read.indices, t.shape)):
        if any(isinstance(n, (TensorRead, Call)) for n in walk(idx)):
            continue  # a data-dependent index: a gather, checked by nobody here
        if not all(isinstance(v, Var) and v in ranges for v in free_vars(idx)):
            continue
        lo, hi = const_bound(idx, ranges)
        if lo < 0 or hi > extent - 1:
            args = ", ".join(str(i) for i in read.indices)
            raise DefinitionError(
                f"compute {stage!r}: the read {t.name}[{args}] can leave {t.name}: axis {k} index "
                f"{idx} ranges over [{_num(lo)}, {_num(hi)}], {t.name} has {extent} there "
                f"(guard it with te.if_then_else, or pad the tensor first)")


def _num(x) -> str:
    return str(int(x)) if x == int(x) else str(x)
