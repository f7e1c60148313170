"""Expression codegen: each IR expression becomes a scalar LLVM value, or, inside an
explicitly vectorized loop, an `<L x T>` vector when it varies across lanes.

Lane-invariant subexpressions stay scalar and are broadcast only where they meet a vector,
so address arithmetic for contiguous accesses is computed once per vector, not per lane.
Loads and integer divisions under a false condition (the untaken side of a Select) must
not fault: they are emitted under a guard (clamped index / masked load / safe divisor).
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator, NamedTuple

from llvmlite import ir

from ..errors import BuildError
from ..ir import expr as E
from ..ir.analysis import risky, stride
from .vecmath import FAST_F32, emit_f32

I1, I8, I32, I64 = ir.IntType(1), ir.IntType(8), ir.IntType(32), ir.IntType(64)
PTR = ir.PointerType()
VOID = ir.VoidType()
_TYPES = {"float16": ir.HalfType(), "float32": ir.FloatType(), "float64": ir.DoubleType(),
          "int8": I8, "int32": I32, "int64": I64, "bool": I1}
_SIZES = {"float16": 2, "float32": 4, "float64": 8, "int8": 1, "int32": 4, "int64": 8, "bool": 1}
_MANGLE = {"half": "f16", "float": "f32", "double": "f64", "ptr": "p0"}
FLOAT_FLAGS = ("contract",)  # lets the backend fuse a*b+c into FMA, nothing more
# The combine of a reduction update (`acc[i] = acc[i] + x`): the order of a sum is not part
# of its meaning, so LLVM may keep several partial sums (vectorize / interleave the loop,
# build a shuffle tree for a horizontal sum) instead of one latency-bound chain.
REDUCE_FLAGS = ("reassoc", "contract")
# Division: `arcp` lets LLVM multiply by a reciprocal computed once for a repeated divisor.
DIV_FLAGS = ("arcp",)
# vector loads with a constant stride up to this are contiguous loads + a shuffle, not a
# gather: s loads of n lanes and a permute beat n scalar loads while s stays small
MAX_SHUFFLED_STRIDE = 4


def value_type(dtype: str) -> ir.Type:
    """The register type of a dtype (bool is i1)."""
    try:
        return _TYPES[dtype]
    except KeyError:
        raise BuildError(f"the CPU backend has no type for dtype {dtype!r}") from None


def mem_type(dtype: str) -> ir.Type:
    """The in-memory element type (bool is stored as one byte, like numpy)."""
    return I8 if dtype == "bool" else value_type(dtype)


def elem_size(dtype: str) -> int:
    return _SIZES[dtype]


def lanes_of(v: ir.Value) -> int | None:
    return v.type.count if isinstance(v.type, ir.VectorType) else None


def mangle(ty: ir.Type) -> str:
    """The type suffix of an overloaded intrinsic name, e.g. v16f32, v8p0, i64."""
    if isinstance(ty, ir.VectorType):
        return f"v{ty.count}{mangle(ty.element)}"
    return _MANGLE.get(str(ty), str(ty))


class ModuleContext:
    """The LLVM module being built plus module-wide settings."""

    def __init__(self, name: str, openmp: bool, lanes_hint: int):
        self.module = ir.Module(name=name)
        self.openmp = openmp
        self.lanes_hint = lanes_hint
        self._counter = 0

    def declare(self, name: str, ret: ir.Type, args: list[ir.Type]) -> ir.Function:
        """An external function or intrinsic, declared once."""
        fn = self.module.globals.get(name)
        if fn is None:
            return ir.Function(self.module, ir.FunctionType(ret, args), name)
        if not fn.is_declaration:
            raise BuildError(f"{name}: the kernel's name clashes with a runtime function it calls; rename it")
        return fn

    def unique(self, base: str) -> str:
        self._counter += 1
        return f"{base}.{self._counter}"


class Lanes(NamedTuple):
    """The explicitly vectorized loop being emitted: `var` takes base + 0..n-1."""
    var: E.Var
    base: ir.Value
    n: int


class ExprEmitter:
    """Expression codegen state for one LLVM function."""

    def __init__(self, mod: ModuleContext, builder: ir.IRBuilder, fname: str):
        self.mod, self.b, self.fname = mod, builder, fname
        self.env: dict[E.Var, ir.Value] = {}
        self.bufs: dict = {}
        self.lanes: Lanes | None = None
        self.guard: ir.Value | None = None  # i1 / <L x i1>: the loads being emitted may run only where true
        self._index_math = False  # inside an index: integer arithmetic cannot overflow (nsw)

    # ------------------------------------------------------------ values and types

    def ty(self, dtype: str, n: int | None = None, mem: bool = False) -> ir.Type:
        t = mem_type(dtype) if mem else value_type(dtype)
        return t if n is None else ir.VectorType(t, n)

    def const(self, value, dtype: str, n: int | None = None) -> ir.Value:
        c = ir.Constant(value_type(dtype), int(value) if dtype == "bool" else value)
        return c if n is None else ir.Constant(ir.VectorType(c.type, n), [c] * n)

    def splat(self, v: ir.Value, n: int | None) -> ir.Value:
        if n is None or isinstance(v.type, ir.VectorType):
            return v
        vt = ir.VectorType(v.type, n)
        if isinstance(v, ir.Constant):
            return ir.Constant(vt, [v] * n)
        undef = ir.Constant(vt, ir.Undefined)
        one = self.b.insert_element(undef, v, ir.Constant(I32, 0))
        return self.shuffle(one, undef, [0] * n)

    def shuffle(self, x: ir.Value, y: ir.Value, idx: list[int]) -> ir.Value:
        """Lanes `idx` of x ++ y (shufflevector with a constant mask)."""
        return self.b.shuffle_vector(x, y, ir.Constant(ir.VectorType(I32, len(idx)), idx))

    def match(self, *vals: ir.Value) -> list[ir.Value]:
        """Broadcast scalars to the lane count of any vector among `vals`."""
        n = next((lanes_of(v) for v in vals if lanes_of(v)), None)
        return [self.splat(v, n) for v in vals]

    def not_(self, v: ir.Value) -> ir.Value:
        return self.b.xor(v, self.const(True, "bool", lanes_of(v)))

    def any_lane(self, mask: ir.Value) -> ir.Value:
        if lanes_of(mask) is None:
            return mask
        fn = self.mod.declare(f"llvm.vector.reduce.or.{mangle(mask.type)}", I1, [mask.type])
        return self.b.call(fn, [mask])

    def intrinsic(self, name: str, *args: ir.Value) -> ir.Value:
        """An overloaded intrinsic whose result type is its first argument's (llvm.exp...)."""
        t = args[0].type
        return self.b.call(self.mod.declare(f"llvm.{name}.{mangle(t)}", t, [a.type for a in args]), args)

    def gep(self, ptr: ir.Value, idx: ir.Value, dtype: str, inbounds: bool = True) -> ir.Value:
        """Element address; `inbounds=False` where masked-off lanes may point anywhere."""
        return self.b.gep(ptr, [idx], inbounds=inbounds, source_etype=mem_type(dtype))

    def buffer(self, buf) -> ir.Value:
        try:
            return self.bufs[buf]
        except KeyError:
            raise BuildError(f"{self.fname}: buffer '{buf.name}' is used outside its allocation "
                             "and is not an argument") from None

    # ------------------------------------------------------------ guards and lane views

    @contextmanager
    def guarded(self, cond: ir.Value) -> Iterator[None]:
        old = self.guard
        self.guard = cond if old is None else self.b.and_(*self.match(old, cond))
        try:
            yield
        finally:
            self.guard = old

    @contextmanager
    def scalar_view(self) -> Iterator[None]:
        """Evaluate with the vector loop variable at its first lane, as a scalar: for
        addresses of contiguous or lane-invariant accesses."""
        lanes, guard = self.lanes, self.guard
        self.lanes = None
        self.env[lanes.var] = lanes.base
        self.guard = None if guard is None else self.any_lane(guard)
        try:
            yield
        finally:
            del self.env[lanes.var]
            self.lanes, self.guard = lanes, guard

    # ------------------------------------------------------------ expressions

    def reduce_value(self, e: E.Binary) -> ir.Value:
        """The value of a reduction update (`analysis.is_reduce_update`): its combine may
        be reassociated."""
        return self._binary(e, reassoc=True)

    def expr(self, e: E.Expr) -> ir.Value:
        if isinstance(e, E.Const):
            return self.const(e.value, e.dtype)
        if isinstance(e, E.Var):
            return self._var(e)
        if isinstance(e, E.Load):
            return self.load(e)
        if isinstance(e, E.Binary):
            return self._binary(e)
        if isinstance(e, E.Select):
            return self._select(e)
        if isinstance(e, E.Cast):
            return self.convert(self.expr(e.value), e.value.dtype, e.dtype)
        if isinstance(e, E.Not):
            return self.not_(self.to_bool(e.a))
        if isinstance(e, E.Call):
            return self._call(e)
        raise BuildError(f"{self.fname}: cannot generate code for {type(e).__name__} `{e}`; "
                         "only loop-IR expressions can be compiled")

    def to_bool(self, e: E.Expr) -> ir.Value:
        return self.convert(self.expr(e), e.dtype, "bool")

    def index(self, e: E.Expr) -> ir.Value:
        if e.dtype not in E.INT_DTYPES:
            raise BuildError(f"{self.fname}: index `{e}` has dtype {e.dtype}, expected an integer")
        outer, self._index_math = self._index_math, True
        try:
            return self.convert(self.expr(e), e.dtype, "int64")
        finally:
            self._index_math = outer

    def _var(self, e: E.Var) -> ir.Value:
        if self.lanes is not None and e is self.lanes.var:
            n = self.lanes.n
            ramp = ir.Constant(ir.VectorType(I64, n), list(range(n)))
            return self.b.add(self.splat(self.lanes.base, n), ramp, flags=("nsw",))
        try:
            return self.env[e]
        except KeyError:
            raise BuildError(f"{self.fname}: variable '{e.name}' is used outside the loop "
                             "that defines it") from None

    def convert(self, v: ir.Value, src: str, dst: str) -> ir.Value:
        if src == dst:
            return v
        n, b = lanes_of(v), self.b
        t = self.ty(dst, n)
        if dst == "bool":
            zero = self.const(0, src, n)
            return b.fcmp_unordered("!=", v, zero) if E.is_float(src) else b.icmp_unsigned("!=", v, zero)
        if E.is_float(src) and E.is_float(dst):
            return b.fpext(v, t) if elem_size(dst) > elem_size(src) else b.fptrunc(v, t)
        if E.is_float(src):
            return b.fptosi(v, t)
        if src == "bool":
            return b.uitofp(v, t) if E.is_float(dst) else b.zext(v, t)
        if E.is_float(dst):
            return b.sitofp(v, t)
        return b.sext(v, t) if elem_size(dst) > elem_size(src) else b.trunc(v, t)

    def _binary(self, e: E.Binary, reassoc: bool = False) -> ir.Value:
        dt = e.a.dtype
        if e.b.dtype != dt:
            raise BuildError(f"{self.fname}: operands of `{e}` have dtypes {dt} and {e.b.dtype}")
        if isinstance(e, (E.And, E.Or)):
            a = self.to_bool(e.a)
            b = self._maybe_guarded(e.b, lambda: a if isinstance(e, E.And) else self.not_(a))
            a, b = self.match(a, self.convert(b, e.b.dtype, "bool"))
            return self.b.and_(a, b) if isinstance(e, E.And) else self.b.or_(a, b)
        a, b = self.expr(e.a), self.expr(e.b)
        if (isinstance(e, E.Div) and E.is_float(dt) and lanes_of(a) and not lanes_of(b)):
            # a lane-invariant divisor: one scalar reciprocal, then a vector multiply
            # (a vector divide is 10-20x the cost of a multiply)
            return self.b.fmul(a, self.splat(self.b.fdiv(self.const(1.0, dt), b), lanes_of(a)),
                               flags=FLOAT_FLAGS)
        a, b = self.match(a, b)
        if E.is_float(dt):
            if reassoc and isinstance(e, (E.Add, E.Mul)):
                return (self.b.fadd if isinstance(e, E.Add) else self.b.fmul)(a, b, flags=REDUCE_FLAGS)
            return self._float_binary(e, a, b)
        return self._int_binary(e, a, b, dt)

    def _float_binary(self, e: E.Binary, a: ir.Value, b: ir.Value) -> ir.Value:
        bd = self.b
        if isinstance(e, E.Add):
            return bd.fadd(a, b, flags=FLOAT_FLAGS)
        if isinstance(e, E.Sub):
            return bd.fsub(a, b, flags=FLOAT_FLAGS)
        if isinstance(e, E.Mul):
            return bd.fmul(a, b, flags=FLOAT_FLAGS)
        if isinstance(e, E.Div):
            return bd.fdiv(a, b, flags=DIV_FLAGS)
        if isinstance(e, (E.FloorDiv, E.FloorMod)):
            q = self.intrinsic("floor", bd.fdiv(a, b))
            return q if isinstance(e, E.FloorDiv) else bd.fsub(a, bd.fmul(q, b))
        if isinstance(e, (E.Min, E.Max)):
            return bd.select(bd.fcmp_ordered("<" if isinstance(e, E.Min) else ">", a, b), a, b)
        if isinstance(e, E.NE):
            return bd.fcmp_unordered("!=", a, b)
        return bd.fcmp_ordered(_CMP[type(e)], a, b)

    def _int_binary(self, e: E.Binary, a: ir.Value, b: ir.Value, dt: str) -> ir.Value:
        bd = self.b
        cmp = bd.icmp_unsigned if dt == "bool" else bd.icmp_signed
        flags = ("nsw",) if self._index_math else ()  # data arithmetic wraps, like numpy
        if isinstance(e, E.Add):
            return bd.add(a, b, flags=flags)
        if isinstance(e, E.Sub):
            return bd.sub(a, b, flags=flags)
        if isinstance(e, E.Mul):
            return bd.mul(a, b, flags=flags)
        if isinstance(e, (E.Div, E.FloorDiv, E.FloorMod)):
            return self._floor_divmod(e, a, b, dt)
        if isinstance(e, (E.Min, E.Max)):
            return bd.select(cmp("<" if isinstance(e, E.Min) else ">", a, b), a, b)
        return cmp(_CMP[type(e)], a, b)

    def _floor_divmod(self, e: E.Binary, a: ir.Value, b: ir.Value, dt: str) -> ir.Value:
        """Python semantics: the quotient rounds toward -inf, the remainder has b's sign."""
        bd, n = self.b, lanes_of(a)
        is_div = not isinstance(e, E.FloorMod)
        c = e.b.value if isinstance(e.b, E.Const) else None
        if c == 0:
            raise BuildError(f"{self.fname}: integer division by zero in `{e}`")
        if c is not None and c > 0 and c & (c - 1) == 0:
            if is_div:
                return bd.ashr(a, self.const(c.bit_length() - 1, dt, n))
            return bd.and_(a, self.const(c - 1, dt, n))
        if c is None and self.guard is not None:
            g, b = self.match(self.guard, b)
            b = bd.select(g, b, self.const(1, dt, lanes_of(b)))
            a, b = self.match(a, b)
            n = lanes_of(a)
        q, r = bd.sdiv(a, b), bd.srem(a, b)
        zero = self.const(0, dt, n)
        if c is not None and c > 0:
            fix = bd.icmp_signed("<", r, zero)
        else:
            fix = bd.and_(bd.icmp_signed("!=", r, zero), bd.icmp_signed("<", bd.xor(r, b), zero))
        if is_div:
            return bd.sub(q, bd.zext(fix, q.type))
        return bd.add(r, bd.select(fix, b, zero))

    def _select(self, e: E.Select) -> ir.Value:
        c = self.to_bool(e.cond)
        t, f = (self._maybe_guarded(e.t, lambda: c), self._maybe_guarded(e.f, lambda: self.not_(c)))
        t, f = self.match(t, f)
        if lanes_of(c) and not lanes_of(t):
            t, f = self.splat(t, lanes_of(c)), self.splat(f, lanes_of(c))
        return self.b.select(c, t, f)

    def _maybe_guarded(self, e: E.Expr, cond: Callable[[], ir.Value]) -> ir.Value:
        """`e`, evaluated under guard `cond()` only when it could fault."""
        if not risky(e):
            return self.expr(e)
        with self.guarded(cond()):
            return self.expr(e)

    def _call(self, e: E.Call) -> ir.Value:
        dt = e.dtype
        if not E.is_float(dt):
            if e.op != "abs":
                raise BuildError(f"{self.fname}: {e.op} needs a float argument, got {dt} in `{e}`")
            x = self.expr(e.args[0])
            zero = self.const(0, dt, lanes_of(x))
            return self.b.select(self.b.icmp_signed("<", x, zero), self.b.sub(zero, x), x)
        work = "float32" if dt == "float16" else dt  # libm has no half-precision functions
        args = [self.convert(self.expr(a), a.dtype, work) for a in e.args]
        out = self._math(e.op, args[0], work)
        return self.convert(out, work, dt)

    def _math(self, op: str, x: ir.Value, dt: str) -> ir.Value:
        bd, n = self.b, lanes_of(x)
        if dt == "float32" and op in FAST_F32:  # inline polynomials: vectors stay vectors
            return emit_f32(op, bd, self.mod.declare, x)
        one = self.const(1.0, dt, n)
        if op in ("exp", "log", "sqrt"):
            return self.intrinsic(op, x)
        if op == "abs":
            return self.intrinsic("fabs", x)
        if op == "rsqrt":
            return bd.fdiv(one, self.intrinsic("sqrt", x))
        if op == "sigmoid":
            return bd.fdiv(one, bd.fadd(one, self.intrinsic("exp", bd.fneg(x))))
        return self._libm(op + ("f" if dt == "float32" else ""), x)

    def _libm(self, name: str, x: ir.Value) -> ir.Value:
        """A libm call; vectors go lane by lane (there is no vector libm to call). float32
        exp/log/tanh/erf/sigmoid never get here: vecmath.py emits them inline."""
        st = x.type.element if isinstance(x.type, ir.VectorType) else x.type
        fn = self.mod.declare(name, st, [st])
        if lanes_of(x) is None:
            return self.b.call(fn, [x])
        out = ir.Constant(x.type, ir.Undefined)
        for i in range(lanes_of(x)):
            lane = ir.Constant(I32, i)
            out = self.b.insert_element(out, self.b.call(fn, [self.b.extract_element(x, lane)]), lane)
        return out

    # ------------------------------------------------------------ memory

    def from_mem(self, v: ir.Value, dtype: str) -> ir.Value:
        return self.convert(v, "int8", "bool") if dtype == "bool" else v

    def to_mem(self, v: ir.Value, dtype: str) -> ir.Value:
        return self.b.zext(v, self.ty("int8", lanes_of(v))) if dtype == "bool" else v

    def masked(self, op: str, args: list[ir.Value], ret: ir.Type, align: int) -> ir.Value:
        """llvm.masked.{load,store,gather,scatter}; the pointer operand carries the alignment."""
        vec = ret if op in ("load", "gather") else args[0].type
        p = 0 if op in ("load", "gather") else 1
        name = f"llvm.masked.{op}.{mangle(vec)}.{mangle(args[p].type)}"
        call = self.b.call(self.mod.declare(name, ret, [a.type for a in args]), args, arg_attrs={p: ()})
        call.arg_attributes[p].align = align
        return call

    def load(self, e: E.Load) -> ir.Value:
        dt, bd = e.dtype, self.b
        ptr, align = self.buffer(e.buffer), elem_size(dt)
        if self.lanes is None:
            idx = self.index(e.index)
            if self.guard is not None:
                idx = bd.select(self.guard, idx, ir.Constant(I64, 0))
            return self.from_mem(bd.load(self.gep(ptr, idx, dt), typ=mem_type(dt), align=align), dt)
        n = self.lanes.n
        s = stride(e.index, self.lanes.var)
        if s == 0:
            with self.scalar_view():
                return self.load(e)
        vt, zero = self.ty(dt, n, mem=True), ir.Constant(self.ty(dt, n, mem=True), None)
        mask = None if self.guard is None else self.splat(self.guard, n)
        if s == 1:
            with self.scalar_view():
                p = self.gep(ptr, self.index(e.index), dt, inbounds=mask is None)
            v = (bd.load(p, typ=vt, align=align) if mask is None
                 else self.masked("load", [p, mask, zero], vt, align))
        elif s is not None and 1 < s <= MAX_SHUFFLED_STRIDE:
            v = self.strided_load(ptr, e.index, s, dt, mask)
        else:
            idx = self.splat(self.index(e.index), n)
            ptrs = self.gep(self.splat(ptr, n), idx, dt, inbounds=mask is None)
            mask = self.const(True, "bool", n) if mask is None else mask
            v = self.masked("gather", [ptrs, mask, zero], vt, align)
        return self.from_mem(v, dt)

    def strided_load(self, ptr: ir.Value, index: E.Expr, s: int, dt: str,
                     mask: ir.Value | None) -> ir.Value:
        """Lanes base, base+s, ..., base+(n-1)s of a load with a small constant stride `s`
        (a stride-2 conv's input row): s contiguous n-lane loads and one shuffle, where a
        gather costs a load per lane. Element j of the span is read only if it is lane
        j/s's and that lane's guard holds (masked loads never fault), so nothing is read
        that the gather would not have read."""
        n, bd = self.lanes.n, self.b
        vt, align = self.ty(dt, n, mem=True), elem_size(dt)
        with self.scalar_view():
            base = self.gep(ptr, self.index(index), dt, inbounds=mask is None)
        span = (n - 1) * s + 1
        off = self.const(False, "bool", n)
        parts = []
        for start in range(0, span, n):
            p = self.gep(base, ir.Constant(I64, start), dt, inbounds=mask is None)
            if mask is None and span - start >= n:
                parts.append(bd.load(p, typ=vt, align=align))
                continue
            lanes = [(start + i) // s if (start + i) % s == 0 and start + i < span else None
                     for i in range(n)]
            if mask is None:
                keep = ir.Constant(ir.VectorType(I1, n), [ir.Constant(I1, int(x is not None))
                                                         for x in lanes])
            else:
                keep = self.shuffle(mask, off, [n if x is None else x for x in lanes])
            parts.append(self.masked("load", [p, keep, ir.Constant(vt, None)], vt, align))
        while len(parts) > 1:  # concatenate pairwise: element j of the span is lane j
            if len(parts) % 2:
                parts.append(ir.Constant(parts[-1].type, None))
            parts = [self.shuffle(a, b, list(range(2 * lanes_of(a))))
                     for a, b in zip(parts[::2], parts[1::2])]
        whole = parts[0]
        return self.shuffle(whole, ir.Constant(whole.type, ir.Undefined), [i * s for i in range(n)])


_CMP = {E.LT: "<", E.LE: "<=", E.EQ: "==", E.NE: "!="}
