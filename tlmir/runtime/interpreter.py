"""Reference interpreter: runs any lowered PrimFunc on numpy arrays (small shapes only).

The PrimFunc is translated into Python source (see `interpreter_source`) that loops over
flat `array.array` copies of the buffers, then outputs are copied back into the numpy
arrays. It shares nothing with the LLVM backend, so it is an independent oracle.

Semantics:
* every For kind (serial, parallel, vectorized, unrolled, vthread, blockIdx) is a plain loop;
* float math runs in Python floats (double); stores to float32 buffers round to float32
  (float16 buffers are held as float32); exp/log/sqrt/rsqrt/divide follow IEEE instead of
  raising (exp overflow -> inf, log(0) -> -inf, x/0 -> +-inf or nan);
* Select evaluates only the chosen side, so padded reads like `A[i - 1]` under `i >= 1` are
  safe; any other load or store outside its buffer raises OutOfBoundsError (check_bounds);
* Allocate gives a fresh zero-filled buffer each time it runs;
* GPU style programs: a threadIdx-bound loop nest whose body contains Barriers runs as one
  Python generator per thread (a Barrier is a `yield`); all threads of the block advance
  phase by phase, so barriers may sit anywhere (inside serial loops, between stages), and
  per-thread locals stay per-thread. Shared-scope Allocates inside the nest are made once
  per block. A loop bound to the thread index of a loop around it is that thread (the
  nest runs as threads too). Other thread-bound loops without barriers are plain loops;
  a Barrier outside any thread loop is a no-op (sequential execution already orders it).
"""
from __future__ import annotations

import array
import itertools
import linecache
import math
import re
import struct
import types
from typing import Callable

import numpy as np

from ..errors import ArgumentError, BuildError, TlmirError
from ..ir import expr as E
from ..ir import stmt as S

__all__ = ["run_interpreted", "compile_interpreted", "interpreter_source", "OutOfBoundsError",
           "BarrierDivergenceError"]

MAX_BLOCK_DEPTH = 14  # nested for/if per generated function before outlining (Python caps: 20/100)


class OutOfBoundsError(TlmirError, IndexError):
    """A load or store of the interpreted program fell outside its buffer."""


class BarrierDivergenceError(TlmirError, RuntimeError):
    """Threads of one block reached different numbers of barriers."""


_INT_CODE = "i" if array.array("i").itemsize == 4 else "l"
# dtype -> (array typecode, numpy storage dtype)
_STORAGE = {"float32": ("f", "float32"), "float16": ("f", "float32"), "float64": ("d", "float64"),
            "int8": ("b", "int8"), "int32": (_INT_CODE, "int32"), "int64": ("q", "int64"),
            "bool": ("B", "uint8")}

# ------------------------------------------------------------------ runtime helpers

_inf, _nan = math.inf, math.nan


def _exp(x: float) -> float:
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


def _log(x: float) -> float:
    if x > 0:
        return math.log(x) if x != math.inf else math.inf
    return -math.inf if x == 0 else math.nan


def _sqrt(x: float) -> float:
    return math.sqrt(x) if x >= 0 else math.nan


def _rsqrt(x: float) -> float:
    if x > 0:
        return 1.0 / math.sqrt(x)
    return math.copysign(math.inf, x) if x == 0 else math.nan


def _sigmoid(x: float) -> float:
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = _exp(x)
    return e / (1.0 + e)


def _fdiv(a, b):
    try:
        return a / b
    except ZeroDivisionError:
        if a != a or a == 0:
            return math.nan
        return math.copysign(math.inf, a) * math.copysign(1.0, b)


def _f32(x: float) -> float:
    try:
        return struct.unpack("f", struct.pack("f", x))[0]
    except OverflowError:
        return math.copysign(math.inf, x)


def _f16(x: float) -> float:
    try:
        return struct.unpack("e", struct.pack("e", x))[0]
    except OverflowError:
        return math.copysign(math.inf, x)


def _alloc(code: str, n: int) -> array.array:
    return array.array(code, bytes(array.array(code).itemsize * n))


def _oob(name: str, index: int, size: int):
    raise OutOfBoundsError(f"interpreter: access {name}[{index}] is outside buffer {name!r} "
                           f"of {size} elements")


def _run_threads(fn: Callable, extents: tuple, args: tuple) -> None:
    """Run one block: a generator per thread, all advanced barrier phase by barrier phase."""
    gens = [fn(*t, *args) for t in itertools.product(*(range(e) for e in extents))]
    gens = [g for g in gens if isinstance(g, types.GeneratorType)]
    phase = 0
    while gens:
        alive = []
        for g in gens:
            try:
                next(g)
                alive.append(g)
            except StopIteration:
                pass
        if alive and len(alive) != len(gens):
            raise BarrierDivergenceError(
                f"interpreter: after barrier phase {phase}, {len(alive)} of {len(gens)} threads "
                f"wait at a barrier while the others have finished")
        gens, phase = alive, phase + 1


_HELPERS = dict(_inf=_inf, _nan=_nan, _min=min, _max=max, _tanh=math.tanh, _erf=math.erf,
                _exp=_exp, _log=_log, _sqrt=_sqrt, _rsqrt=_rsqrt, _sigmoid=_sigmoid,
                _fdiv=_fdiv, _f32=_f32, _f16=_f16, _alloc=_alloc, _oob=_oob,
                _run_threads=_run_threads)

# ------------------------------------------------------------------ code generation

_SYMBOL = {E.Add: "+", E.Sub: "-", E.Mul: "*", E.FloorDiv: "//", E.FloorMod: "%", E.LT: "<",
           E.LE: "<=", E.EQ: "==", E.NE: "!=", E.And: "and", E.Or: "or"}
_CALLS = {"exp": "_exp", "log": "_log", "sqrt": "_sqrt", "rsqrt": "_rsqrt", "tanh": "_tanh",
          "erf": "_erf", "sigmoid": "_sigmoid", "abs": "abs"}


def _is_thread_loop(s: S.Stmt) -> bool:
    return isinstance(s, S.For) and bool(s.thread_tag) and s.thread_tag.startswith("threadIdx")


def _nests_own_index(s: S.For) -> bool:
    """Does a loop bound to the same thread index sit inside `s`? On a GPU it is the same
    thread (a stage computed inside a thread, fetching its part), so the block runs as
    threads, as with barriers, not as nested loops."""
    return any(_is_thread_loop(x) and x.thread_tag == s.thread_tag for x in S.walk_stmt(s.body))


class _ThreadCtx:
    def __init__(self, params: dict, extents: dict, hoisted: set):
        self.params, self.extents, self.hoisted = params, extents, hoisted


class _Codegen:
    def __init__(self, func: S.PrimFunc, check_bounds: bool):
        self.func, self.check = func, check_bounds
        self.names: dict[int, str] = {}
        self.keep: list = []              # keeps named objects alive so ids stay unique
        self.taken: set[str] = set()
        self.bound: set[int] = set()      # Vars / Buffers visible at the current point
        self.funcs: list[list[str]] = []
        self.barrier: set[int] = set()    # ids of statements whose subtree has a Barrier
        self._mark_barriers(func.body)

    def _mark_barriers(self, s: S.Stmt) -> bool:
        found = isinstance(s, S.Barrier)
        for c in s.children():
            found = self._mark_barriers(c) or found
        if found:
            self.barrier.add(id(s))
        return found

    def ident(self, obj, base: str, prefix: str) -> str:
        key = id(obj)
        if key not in self.names:
            clean = re.sub(r"\W", "_", base)
            name, n = f"{prefix}{clean}", 1
            while name in self.taken:
                name, n = f"{prefix}{clean}_{n}", n + 1
            self.taken.add(name)
            self.names[key] = name
            self.keep.append(obj)
        return self.names[key]

    def buf(self, b: S.Buffer) -> str:
        if id(b) not in self.bound:
            raise BuildError(f"interpreter: buffer {b.name!r} is used outside its allocation "
                             f"and is not an argument of {self.func.name!r}")
        return self.ident(b, b.name, "b_")

    # ---------------------------------------------------------------- expressions
    def expr(self, e: E.Expr) -> str:
        if isinstance(e, E.Const):
            if e.dtype == "bool":
                return "True" if e.value else "False"
            if isinstance(e.value, float) and not math.isfinite(e.value):
                return "_nan" if e.value != e.value else ("_inf" if e.value > 0 else "(-_inf)")
            return repr(e.value)
        if isinstance(e, E.Var):
            if id(e) not in self.bound:
                raise BuildError(f"interpreter: variable {e.name!r} is used outside any loop "
                                 f"that defines it in {self.func.name!r}")
            return self.ident(e, e.name, "v_")
        if isinstance(e, E.Div):
            return f"_fdiv({self.expr(e.a)}, {self.expr(e.b)})"
        if isinstance(e, (E.Min, E.Max)):
            fn = "_min" if isinstance(e, E.Min) else "_max"
            return f"{fn}({self.expr(e.a)}, {self.expr(e.b)})"
        if type(e) in _SYMBOL:
            return f"({self.expr(e.a)} {_SYMBOL[type(e)]} {self.expr(e.b)})"
        if isinstance(e, E.Not):
            return f"(not {self.expr(e.a)})"
        if isinstance(e, E.Select):
            return f"({self.expr(e.t)} if {self.expr(e.cond)} else {self.expr(e.f)})"
        if isinstance(e, E.Cast):
            return self.cast(e)
        if isinstance(e, E.Call):
            return f"{_CALLS[e.op]}({', '.join(self.expr(a) for a in e.args)})"
        if isinstance(e, E.Load):
            b, idx, n = self.buf(e.buffer), self.expr(e.index), e.buffer.size
            if not self.check:
                return f"{b}[{idx}]"
            return f"({b}[_i] if 0 <= (_i := {idx}) < {n} else _oob({e.buffer.name!r}, _i, {n}))"
        raise BuildError(f"interpreter: cannot execute {type(e).__name__} node {e} "
                         f"(tensor-level nodes must be lowered first)")

    def cast(self, e: E.Cast) -> str:
        v, src, dst = self.expr(e.value), e.value.dtype, e.dtype
        if dst == "bool":
            return f"bool({v})"
        if not E.is_float(dst):
            return f"int({v})"
        if dst == "float16" and src != "float16":
            return f"_f16(float({v}))"
        if dst == "float32" and src == "float64":
            return f"_f32({v})"
        return f"float({v})"

    # ---------------------------------------------------------------- statements
    def stmt(self, s: S.Stmt, out: list, ind: int, depth: int, ctx) -> None:
        pad = "    " * ind
        if isinstance(s, S.Seq):
            if not s.stmts:
                out.append(pad + "pass")
            for c in s.stmts:
                self.stmt(c, out, ind, depth, ctx)
        elif isinstance(s, S.Store):
            b, n = self.buf(s.buffer), s.buffer.size
            idx, val = self.expr(s.index), self.expr(s.value)
            if self.check:
                out.append(f"{pad}_s = {idx}")
                out.append(f"{pad}if not 0 <= _s < {n}: _oob({s.buffer.name!r}, _s, {n})")
                out.append(f"{pad}{b}[_s] = {val}")
            else:
                out.append(f"{pad}{b}[{idx}] = {val}")
        elif isinstance(s, S.Allocate):
            if ctx is None or id(s.buffer) not in ctx.hoisted:
                self.allocate(s.buffer, out, pad)
            self.stmt(s.body, out, ind, depth, ctx)
            if ctx is None or id(s.buffer) not in ctx.hoisted:
                self.bound.discard(id(s.buffer))
        elif isinstance(s, S.IfThenElse):
            if depth >= MAX_BLOCK_DEPTH:
                return self.outline(s, out, pad, ctx)
            out.append(f"{pad}if {self.expr(s.cond)}:")
            self.stmt(s.then, out, ind + 1, depth + 1, ctx)
            if s.orelse is not None:
                out.append(f"{pad}else:")
                self.stmt(s.orelse, out, ind + 1, depth + 1, ctx)
        elif isinstance(s, S.Barrier):
            out.append(pad + ("yield  # barrier" if ctx is not None else "pass  # barrier"))
        elif isinstance(s, S.For):
            self.loop(s, out, ind, depth, ctx)
        elif isinstance(s, S.Prefetch):
            out.append(pad + "pass  # prefetch")
        else:
            raise BuildError(f"interpreter: unknown statement {type(s).__name__}")

    def allocate(self, b: S.Buffer, out: list, pad: str) -> None:
        if b.dtype not in _STORAGE:
            raise BuildError(f"interpreter: buffer {b.name!r} has unsupported dtype {b.dtype}")
        self.bound.add(id(b))
        out.append(f"{pad}{self.buf(b)} = _alloc({_STORAGE[b.dtype][0]!r}, {b.size})"
                   f"  # {b.scope} {list(b.shape)}")

    def loop(self, s: S.For, out: list, ind: int, depth: int, ctx) -> None:
        pad = "    " * ind
        if _is_thread_loop(s) and ctx is not None:      # one thread's view of the loop
            p, full = ctx.params[s.thread_tag], ctx.extents[s.thread_tag]
            ext = s.extent.value
            if ext < full:
                out.append(f"{pad}if {p} < {ext}:")
                ind, depth, pad = ind + 1, depth + 1, pad + "    "
            self.bound.add(id(s.var))
            lo = s.min
            start = p if isinstance(lo, E.Const) and lo.value == 0 else f"{p} + {self.expr(lo)}"
            out.append(f"{pad}{self.ident(s.var, s.var.name, 'v_')} = {start}")
            self.stmt(s.body, out, ind, depth, ctx)
            self.bound.discard(id(s.var))
            return
        if _is_thread_loop(s) and (id(s) in self.barrier or _nests_own_index(s)):
            return self.launch(s, out, pad)
        if depth >= MAX_BLOCK_DEPTH:
            return self.outline(s, out, pad, ctx)
        lo, ext = s.min, self.expr(s.extent)
        rng = ext if isinstance(lo, E.Const) and lo.value == 0 else \
            f"{self.expr(lo)}, {self.expr(lo)} + {ext}"
        self.bound.add(id(s.var))
        tag = f"  # {s.thread_tag or s.kind}" if s.kind != "serial" else ""
        out.append(f"{pad}for {self.ident(s.var, s.var.name, 'v_')} in range({rng}):{tag}")
        self.stmt(s.body, out, ind + 1, depth + 1, ctx)
        self.bound.discard(id(s.var))

    def free_names(self, s: S.Stmt, ctx) -> list[str]:
        """Names a statement reads from its surroundings (parameters of an outlined def)."""
        used: dict[int, object] = {}
        local: set[int] = set()
        for st in S.walk_stmt(s):
            if isinstance(st, S.For):
                local.add(id(st.var))
            elif isinstance(st, S.Allocate) and (ctx is None or id(st.buffer) not in ctx.hoisted):
                local.add(id(st.buffer))
            elif isinstance(st, S.Store):
                used[id(st.buffer)] = st.buffer
            for e in S.stmt_exprs(st):
                for n in E.walk(e):
                    if isinstance(n, E.Var):
                        used[id(n)] = n
                    elif isinstance(n, E.Load):
                        used[id(n.buffer)] = n.buffer
        names = []
        for k, obj in used.items():
            if k in local:
                continue
            names.append(self.expr(obj) if isinstance(obj, E.Var) else self.buf(obj))
        if ctx is not None:
            names.extend(ctx.params.values())
        return sorted(set(names))

    def new_func(self, stem: str) -> tuple[str, list]:
        name = f"_{stem}{len(self.funcs)}"
        lines: list[str] = []
        self.funcs.append(lines)
        return name, lines

    def outline(self, s: S.Stmt, out: list, pad: str, ctx) -> None:
        """Move a deep statement into its own module-level function (Python nesting caps)."""
        params = self.free_names(s, ctx)
        name, lines = self.new_func("nest")
        lines.append(f"def {name}({', '.join(params)}):")
        self.stmt(s, lines, 1, 0, ctx)
        call = f"{name}({', '.join(params)})"
        out.append(pad + (f"yield from {call}" if ctx is not None and id(s) in self.barrier
                          else call))

    def launch(self, s: S.For, out: list, pad: str) -> None:
        """A thread-bound nest with barriers: one generator per thread of the block."""
        extents: dict[str, int] = {}
        hoisted: set[int] = set()
        for st in S.walk_stmt(s):
            if _is_thread_loop(st):
                if not isinstance(st.extent, E.Const):
                    raise BuildError(f"interpreter: thread loop {st.var.name} ({st.thread_tag}) "
                                     f"needs a constant extent, got {st.extent}")
                extents[st.thread_tag] = max(extents.get(st.thread_tag, 0), st.extent.value)
            elif isinstance(st, S.Allocate) and st.buffer.scope == "shared":
                self.allocate(st.buffer, out, pad)
                hoisted.add(id(st.buffer))
        tags = sorted(extents)
        params = {t: "_t_" + t.replace(".", "_") for t in tags}
        ctx = _ThreadCtx(params, extents, hoisted)
        free = self.free_names(s, _ThreadCtx({}, {}, hoisted))
        name, lines = self.new_func("threads")
        lines.append(f"def {name}({', '.join([params[t] for t in tags] + free)}):")
        self.stmt(s, lines, 1, 0, ctx)
        free_tuple = f"({', '.join(free)},)" if free else "()"
        out.append(f"{pad}_run_threads({name}, ({', '.join(str(extents[t]) for t in tags)},), "
                   f"{free_tuple})  # {', '.join(f'{t}={extents[t]}' for t in tags)}")
        for h in hoisted:
            self.bound.discard(h)

    def source(self) -> str:
        for b in self.func.args:
            self.bound.add(id(b))
        args = [self.buf(b) for b in self.func.args]
        main = [f"def _kernel({', '.join(args)}):"]
        self.stmt(self.func.body, main, 1, 0, None)
        return "\n\n".join("\n".join(f) for f in self.funcs + [main]) + "\n"


def interpreter_source(func: S.PrimFunc, check_bounds: bool = True) -> str:
    """The Python source the interpreter runs for `func` (entry point `_kernel`)."""
    return _Codegen(func, check_bounds).source()


def compile_interpreted(func: S.PrimFunc, check_bounds: bool = True) -> Callable[..., None]:
    """Translate once; the returned callable runs `func` on numpy arrays (outputs in place)."""
    src = interpreter_source(func, check_bounds)
    filename = f"<tlmir-interpreter {func.name}>"
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    namespace = dict(_HELPERS)
    exec(compile(src, filename, "exec"), namespace)
    kernel = namespace["_kernel"]
    written = {id(st.buffer) for st in S.walk_stmt(func.body) if isinstance(st, S.Store)}
    bufs = list(func.args)

    def run(*arrays: np.ndarray) -> None:
        if len(arrays) != len(bufs):
            raise ArgumentError(f"{func.name}: expected {len(bufs)} arrays "
                                f"({', '.join(b.name for b in bufs)}), got {len(arrays)}")
        flat = []
        for b, a in zip(bufs, arrays):
            if not isinstance(a, np.ndarray):
                raise ArgumentError(f"{func.name}: argument {b.name!r} must be a numpy array, "
                                    f"got {type(a).__name__}")
            if a.dtype != np.dtype(b.dtype):
                raise ArgumentError(f"{func.name}: argument {b.name!r} must be {b.dtype}, "
                                    f"got {a.dtype}")
            if a.size != b.size:
                raise ArgumentError(f"{func.name}: argument {b.name!r} must have {b.size} "
                                    f"elements {list(b.shape)}, got shape {list(a.shape)}")
            code, storage = _STORAGE[b.dtype]
            arr = array.array(code)
            arr.frombytes(np.ascontiguousarray(a, dtype=storage).tobytes())
            flat.append(arr)
        kernel(*flat)
        for b, a, arr in zip(bufs, arrays, flat):
            if id(b) in written:
                a[...] = np.frombuffer(arr, dtype=_STORAGE[b.dtype][1]).reshape(a.shape)

    run.source = src  # type: ignore[attr-defined]
    return run


def run_interpreted(func: S.PrimFunc, *arrays: np.ndarray, check_bounds: bool = True) -> None:
    """Execute `func` on `arrays` (in func.args order); written arguments are updated in place."""
    compile_interpreted(func, check_bounds)(*arrays)
