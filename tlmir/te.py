"""The user-facing tensor expression language, spelled as in TVM TE."""
from __future__ import annotations

import builtins
import inspect
from typing import Callable

from .errors import DefinitionError, ShapeError
from .ir.expr import (DTYPES, Call, Expr, Max, Min, Reduce, Select, binary, cast, const,
                      is_float, promote)
from .ir.bounds import check_reads
from .ir.tensor import ComputeOp, IterVar, PlaceholderOp, Tensor

__all__ = ["placeholder", "compute", "reduce_axis", "sum", "max", "min", "exp", "log", "sqrt",
           "rsqrt", "tanh", "erf", "sigmoid", "abs", "if_then_else", "select", "const", "cast",
           "all", "any", "Tensor", "IterVar"]


def _check_shape(name: str, shape) -> tuple:
    shape = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
    if not shape or not builtins.all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in shape):
        raise ShapeError(f"tensor {name!r}: shape must be positive ints, got {shape!r}")
    return shape


def placeholder(shape, dtype: str = "float32", name: str = "placeholder") -> Tensor:
    if dtype not in DTYPES:
        raise DefinitionError(f"placeholder {name!r}: unknown dtype {dtype!r}")
    return PlaceholderOp(name, _check_shape(name, shape), dtype).output()


def reduce_axis(extent, name: str = "k") -> IterVar:
    if isinstance(extent, (tuple, list)):  # TVM's (0, n) form
        lo, hi = extent
        if lo != 0:
            raise DefinitionError(f"reduce_axis {name!r}: domains start at 0, got {extent}")
        extent = hi
    return IterVar(name, extent, "reduce")


def compute(shape, fcompute: Callable, name: str = "compute", tag: str = "") -> Tensor:
    shape = _check_shape(name, shape)
    params = list(inspect.signature(fcompute).parameters.values())
    if params and params[0].kind == inspect.Parameter.VAR_POSITIONAL:
        names = [f"i{d}" for d in range(len(shape))]
    else:
        names = [p.name for p in params]
        if len(names) != len(shape):
            raise ShapeError(f"compute {name!r}: shape has {len(shape)} dimensions but the "
                             f"function takes {len(names)} indices")
    axis = [IterVar(n, s) for n, s in zip(names, shape)]
    body = const(fcompute(*[a.var for a in axis]))
    op = ComputeOp(name, axis, body, tag)
    check_reads(name, axis, op.body)
    return op.output()


def _reduce(combiner: str, expr, axis, where=None) -> Reduce:
    axes = list(axis) if isinstance(axis, (list, tuple)) else [axis]
    for a in axes:
        if not isinstance(a, IterVar) or a.kind != "reduce":
            raise DefinitionError(f"te.{combiner}: axis must be te.reduce_axis, got {a!r}")
    return Reduce(combiner, const(expr), axes, None if where is None else cast("bool", where))


def sum(expr, axis=None, where=None) -> Reduce:  # noqa: A001 - TE spelling
    if axis is None:
        raise DefinitionError("te.sum needs axis= (a te.reduce_axis, or a list of them)")
    return _reduce("sum", expr, axis, where)


def max(a, b=None, axis=None, where=None) -> Expr:  # noqa: A001
    """te.max(expr, axis=k) reduces; te.max(a, b) is element-wise."""
    if axis is not None:
        return _reduce("max", a, axis, where)
    if b is None:
        raise DefinitionError("te.max needs either axis= (a reduction) or two operands")
    return binary(Max, a, b)


def min(a, b=None, axis=None, where=None) -> Expr:  # noqa: A001
    if axis is not None:
        return _reduce("min", a, axis, where)
    if b is None:
        raise DefinitionError("te.min needs either axis= (a reduction) or two operands")
    return binary(Min, a, b)


def _math(op: str):
    def fn(x) -> Expr:
        x = const(x)
        if not is_float(x.dtype):
            x = cast("float32", x)
        return Call(op, [x], x.dtype)
    fn.__name__ = op
    fn.__doc__ = f"Element-wise {op}."
    return fn


exp, log, sqrt, rsqrt, tanh, erf, sigmoid, abs = (_math(n) for n in  # noqa: A001
                                                  ("exp", "log", "sqrt", "rsqrt", "tanh", "erf",
                                                   "sigmoid", "abs"))


def if_then_else(cond, t, f) -> Expr:
    """t where cond holds, else f; reads in the branch not taken never happen."""
    t, f = promote(t, f)
    return Select(cast("bool", const(cond)), t, f)


select = if_then_else


def all(*conds) -> Expr:  # noqa: A001
    out = const(conds[0])
    for c in conds[1:]:
        out = out & c
    return out


def any(*conds) -> Expr:  # noqa: A001
    out = const(conds[0])
    for c in conds[1:]:
        out = out | c
    return out
