"""Expression nodes shared by the tensor language (te) and the loop IR.

Nodes are immutable. `children()` / `with_children()` give one generic way to walk and
rebuild any tree, so passes (substitution, simplification, codegen) stay short.
Python's `==` on expressions builds an EQ node (TE style); use `same(a, b)` or
`key()` for structural comparison.
"""
from __future__ import annotations

from typing import Callable, Iterator, Sequence

from ..errors import DefinitionError

INDEX = "int64"  # dtype of loop variables and index arithmetic
FLOAT_DTYPES = ("float16", "float32", "float64")
INT_DTYPES = ("int8", "int32", "int64")
DTYPES = FLOAT_DTYPES + INT_DTYPES + ("bool",)


def is_float(dtype: str) -> bool:
    return dtype in FLOAT_DTYPES


def _bits(dtype: str) -> int:
    return {"bool": 1, "int8": 8, "float16": 16, "int32": 32, "float32": 32}.get(dtype, 64)


class Expr:
    __slots__ = ("dtype",)

    def children(self) -> tuple:
        return ()

    def with_children(self, ch: Sequence["Expr"]) -> "Expr":
        return self

    def key(self) -> tuple:
        """Structural identity: equal keys means the same computation."""
        return (type(self).__name__, self.dtype) + tuple(c.key() for c in self.children())

    # arithmetic (TE style operator overloading)
    def __add__(self, o): return binary(Add, self, o)
    def __radd__(self, o): return binary(Add, o, self)
    def __sub__(self, o): return binary(Sub, self, o)
    def __rsub__(self, o): return binary(Sub, o, self)
    def __mul__(self, o): return binary(Mul, self, o)
    def __rmul__(self, o): return binary(Mul, o, self)
    def __truediv__(self, o): return _div(self, o)
    def __rtruediv__(self, o): return _div(o, self)
    def __floordiv__(self, o): return binary(FloorDiv, self, o)
    def __rfloordiv__(self, o): return binary(FloorDiv, o, self)
    def __mod__(self, o): return binary(FloorMod, self, o)
    def __rmod__(self, o): return binary(FloorMod, o, self)
    def __neg__(self): return binary(Sub, const(0, self.dtype), self)
    def __lt__(self, o): return binary(LT, self, o)
    def __le__(self, o): return binary(LE, self, o)
    def __gt__(self, o): return binary(LT, o, self)
    def __ge__(self, o): return binary(LE, o, self)
    def __eq__(self, o): return binary(EQ, self, o)  # type: ignore[override]
    def __ne__(self, o): return binary(NE, self, o)  # type: ignore[override]
    def __and__(self, o): return binary(And, self, o)
    def __or__(self, o): return binary(Or, self, o)
    def __invert__(self): return Not(self)
    __hash__ = object.__hash__

    def __bool__(self):
        raise DefinitionError(f"expression {self} has no truth value; use te.if_then_else")

    def __repr__(self) -> str:
        return expr_str(self)

    __str__ = __repr__


class Const(Expr):
    __slots__ = ("value",)

    def __init__(self, value, dtype: str):
        self.dtype = dtype
        self.value = float(value) if is_float(dtype) else (bool(value) if dtype == "bool" else int(value))

    def key(self):
        return ("Const", self.dtype, self.value)


class Var(Expr):
    """A named scalar variable; identity (not name) distinguishes variables."""
    __slots__ = ("name",)

    def __init__(self, name: str, dtype: str = INDEX):
        self.dtype = dtype
        self.name = name

    def key(self):
        return ("Var", id(self))


class Binary(Expr):
    __slots__ = ("a", "b")
    symbol = "?"

    def __init__(self, a: Expr, b: Expr):
        self.a, self.b = a, b
        self.dtype = "bool" if self.is_compare else a.dtype

    is_compare = False

    def children(self):
        return (self.a, self.b)

    def with_children(self, ch):
        return type(self)(ch[0], ch[1])


class Add(Binary): symbol = "+"
class Sub(Binary): symbol = "-"
class Mul(Binary): symbol = "*"
class Div(Binary): symbol = "/"          # float division
class FloorDiv(Binary): symbol = "//"
class FloorMod(Binary): symbol = "%"
class Min(Binary): symbol = "min"
class Max(Binary): symbol = "max"
class And(Binary): symbol = "&&"
class Or(Binary): symbol = "||"


class Compare(Binary):
    is_compare = True


class LT(Compare): symbol = "<"
class LE(Compare): symbol = "<="
class EQ(Compare):
    symbol = "=="

    def __bool__(self):  # lets `a == b` act as identity in plain Python code paths
        return self.a is self.b


class NE(Compare):
    symbol = "!="

    def __bool__(self):
        return self.a is not self.b


class Not(Expr):
    __slots__ = ("a",)

    def __init__(self, a: Expr):
        self.a, self.dtype = a, "bool"

    def children(self):
        return (self.a,)

    def with_children(self, ch):
        return Not(ch[0])


class Select(Expr):
    """cond ? t : f. Only the chosen side's loads happen (codegen masks them),
    so a padded read like `if_then_else(i >= 1, A[i - 1], 0)` is safe."""
    __slots__ = ("cond", "t", "f")

    def __init__(self, cond: Expr, t: Expr, f: Expr):
        self.cond, self.t, self.f, self.dtype = cond, t, f, t.dtype

    def children(self):
        return (self.cond, self.t, self.f)

    def with_children(self, ch):
        return Select(*ch)


class Cast(Expr):
    __slots__ = ("value",)

    def __init__(self, dtype: str, value: Expr):
        if dtype not in DTYPES:
            raise DefinitionError(f"unknown dtype {dtype!r}; expected one of {DTYPES}")
        self.dtype, self.value = dtype, value

    def children(self):
        return (self.value,)

    def with_children(self, ch):
        return Cast(self.dtype, ch[0])


MATH_FUNCS = ("exp", "log", "sqrt", "rsqrt", "tanh", "erf", "sigmoid", "abs")


class Call(Expr):
    """A pure math function of float arguments."""
    __slots__ = ("op", "args")

    def __init__(self, op: str, args: Sequence[Expr], dtype: str):
        if op not in MATH_FUNCS:
            raise DefinitionError(f"unknown math function {op!r}; expected one of {MATH_FUNCS}")
        self.op, self.args, self.dtype = op, tuple(args), dtype

    def children(self):
        return self.args

    def with_children(self, ch):
        return Call(self.op, ch, self.dtype)

    def key(self):
        return ("Call", self.op, self.dtype) + tuple(a.key() for a in self.args)


class TensorRead(Expr):
    """tensor[indices] in an operator definition (te level)."""
    __slots__ = ("tensor", "indices")

    def __init__(self, tensor, indices: Sequence[Expr]):
        self.tensor, self.indices, self.dtype = tensor, tuple(indices), tensor.dtype

    def children(self):
        return self.indices

    def with_children(self, ch):
        return TensorRead(self.tensor, ch)

    def key(self):
        return ("TensorRead", id(self.tensor)) + tuple(i.key() for i in self.indices)


REDUCERS = {"sum": Add, "max": Max, "min": Min}


class Reduce(Expr):
    """combiner over `axes` of `source`, only where `condition` holds (te level)."""
    __slots__ = ("combiner", "source", "axes", "condition")

    def __init__(self, combiner: str, source: Expr, axes: Sequence, condition: Expr | None = None):
        self.combiner, self.source, self.axes = combiner, source, tuple(axes)
        self.condition, self.dtype = condition, source.dtype

    def children(self):
        return (self.source,) if self.condition is None else (self.source, self.condition)

    def with_children(self, ch):
        return Reduce(self.combiner, ch[0], self.axes, ch[1] if len(ch) > 1 else None)

    def key(self):
        return ("Reduce", self.combiner, tuple(id(a) for a in self.axes)) + tuple(
            c.key() for c in self.children())

    def identity(self) -> Const:
        if self.combiner == "sum":
            return const(0, self.dtype)
        big = float("inf") if is_float(self.dtype) else (1 << (_bits(self.dtype) - 1)) - 1
        return const(-big if self.combiner == "max" else big, self.dtype)


class Load(Expr):
    """buffer[index] in the loop IR: a flat, row-major element index."""
    __slots__ = ("buffer", "index")

    def __init__(self, buffer, index: Expr):
        self.buffer, self.index, self.dtype = buffer, index, buffer.dtype

    def children(self):
        return (self.index,)

    def with_children(self, ch):
        return Load(self.buffer, ch[0])

    def key(self):
        return ("Load", id(self.buffer), self.index.key())


# ---------------------------------------------------------------- construction helpers

def const(value, dtype: str | None = None) -> Expr:
    if isinstance(value, Expr):
        return value
    if hasattr(value, "_e"):  # an IterVar stands for its variable
        return value._e()
    if dtype is None:
        dtype = "bool" if isinstance(value, bool) else (INDEX if isinstance(value, int) else "float32")
    if not isinstance(value, (int, float, bool)):
        raise DefinitionError(f"cannot use {value!r} ({type(value).__name__}) in an expression")
    if isinstance(value, float) and not is_float(dtype):
        dtype = "float32"
    return Const(value, dtype)


def promote(a, b) -> tuple[Expr, Expr]:
    """Bring two operands to one dtype: a Python literal takes the other side's dtype,
    int meets float as float, narrower meets wider as wider."""
    a = a._e() if hasattr(a, "_e") else a
    b = b._e() if hasattr(b, "_e") else b
    if not isinstance(a, Expr) and not isinstance(b, Expr):
        a = const(a)
    if not isinstance(a, Expr):
        a = const(a, b.dtype)
    if not isinstance(b, Expr):
        b = const(b, a.dtype)
    if a.dtype == b.dtype:
        return a, b
    fa, fb = is_float(a.dtype), is_float(b.dtype)
    if fa != fb:
        target = a.dtype if fa else b.dtype
    else:
        target = a.dtype if _bits(a.dtype) >= _bits(b.dtype) else b.dtype
    return (a if a.dtype == target else cast(target, a)), (b if b.dtype == target else cast(target, b))


def cast(dtype: str, value) -> Expr:
    value = const(value)
    if value.dtype == dtype:
        return value
    if isinstance(value, Const):
        return Const(value.value, dtype)
    return Cast(dtype, value)


def binary(cls, a, b) -> Expr:
    a, b = promote(a, b)
    if cls in (And, Or):
        a, b = cast("bool", a), cast("bool", b)
    return cls(a, b)


def _div(a, b) -> Expr:
    a, b = promote(a, b)
    return Div(a, b) if is_float(a.dtype) else FloorDiv(a, b)


def same(a: Expr, b: Expr) -> bool:
    return a is b or a.key() == b.key()


def walk(e: Expr) -> Iterator[Expr]:
    """Pre-order traversal."""
    stack = [e]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(node.children()))


def transform(e: Expr, fn: Callable[[Expr], Expr | None]) -> Expr:
    """Rebuild `e` bottom-up; `fn` returns a replacement for a node or None to keep it."""
    ch = e.children()
    if ch:
        new = tuple(transform(c, fn) for c in ch)
        if any(n is not o for n, o in zip(new, ch)):
            e = e.with_children(new)
    out = fn(e)
    return e if out is None else out


def substitute(e: Expr, vmap: dict) -> Expr:
    """Replace variables by expressions (`vmap` keyed by Var)."""
    if not vmap:
        return e
    return transform(e, lambda n: vmap.get(n) if isinstance(n, Var) else None)


def free_vars(e: Expr) -> set:
    return {n for n in walk(e) if isinstance(n, Var)}


# ---------------------------------------------------------------- printing

_PREC = {Or: 1, And: 2, LT: 3, LE: 3, EQ: 3, NE: 3, Add: 4, Sub: 4,
         Mul: 5, Div: 5, FloorDiv: 5, FloorMod: 5}


def _fmt_const(c: Const) -> str:
    if c.dtype == "bool":
        return "True" if c.value else "False"
    if is_float(c.dtype):
        v = repr(c.value)
        return v if c.dtype == "float32" else f"{c.dtype}({v})"
    return str(c.value)


def expr_str(e: Expr, parent_prec: int = 0, names: dict | None = None) -> str:
    """`names`: display names of loop variables that would otherwise print alike (stmt_str)."""
    def sub(x: Expr, prec: int = 0) -> str:
        return expr_str(x, prec, names)
    if isinstance(e, Const):
        return _fmt_const(e)
    if isinstance(e, Var):
        return names.get(e, e.name) if names else e.name
    if isinstance(e, (Min, Max)):
        return f"{e.symbol}({sub(e.a)}, {sub(e.b)})"
    if isinstance(e, Binary):
        p = _PREC[type(e)]
        s = f"{sub(e.a, p)} {e.symbol} {sub(e.b, p + 1)}"
        return f"({s})" if p < parent_prec else s
    if isinstance(e, Not):
        return f"!{sub(e.a, 9)}"
    if isinstance(e, Select):
        return f"select({sub(e.cond)}, {sub(e.t)}, {sub(e.f)})"
    if isinstance(e, Cast):
        return f"{e.dtype}({sub(e.value)})"
    if isinstance(e, Call):
        return f"{e.op}({', '.join(sub(a) for a in e.args)})"
    if isinstance(e, TensorRead):
        return f"{e.tensor.name}[{', '.join(sub(i) for i in e.indices)}]"
    if isinstance(e, Reduce):
        axes = ", ".join(a.name for a in e.axes)
        cond = "" if e.condition is None else f", where={sub(e.condition)}"
        return f"{e.combiner}({sub(e.source)}, axis=[{axes}]{cond})"
    if isinstance(e, Load):
        return f"{e.buffer.name}[{sub(e.index)}]"
    return f"<{type(e).__name__}>"
