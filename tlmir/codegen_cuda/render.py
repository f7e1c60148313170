"""CUDA C from the loop IR: one `extern "C" __global__` kernel per root-level nest.

A GPU program (lowered with its loops bound to blockIdx / threadIdx) is a sequence of
root-level nests, one per stage computed at root; each becomes a kernel launched in turn.
The global buffers allocated at root (intermediate results) are device buffers the host
allocates (the unit's `workspace`) and passes to the kernels that use them. Inside a
kernel a loop bound to a thread index is that index (`int t = threadIdx.x;`), guarded when
it covers fewer threads than the launch; shared buffers are `__shared__` arrays of the
block, local buffers arrays of the thread; barriers are `__syncthreads()`. Launch
dimensions are the widest extents bound to each index. Vectorized float copies become
float2 / float4 accesses where aligned (codegen_cuda.vector); other vectorized loops
and unrolled loops are unrolled by the compiler.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from ..errors import BuildError
from ..ir import arith
from ..ir import expr as E
from ..ir.stmt import (Allocate, Barrier, Buffer, For, IfThenElse, Prefetch, PrimFunc, Seq, Stmt, Store, stmt_exprs,
                       walk_stmt)
from .vector import vector_copy

C_TYPES = {"float32": "float", "float64": "double", "int8": "signed char", "int32": "int",
           "int64": "long long", "bool": "bool"}
SIZES = {"float32": 4, "float64": 8, "int8": 1, "int32": 4, "int64": 8, "bool": 1}
LAUNCH_TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z", "threadIdx.x", "threadIdx.y", "threadIdx.z")
_SHORT = {t: ("b" if t.startswith("block") else "t") + t[-1] for t in LAUNCH_TAGS}  # blockIdx.x -> bx
MAX_ELEMENTS = (1 << 31) - 1  # indices are 32-bit ints
_C_WORDS = {"int", "float", "double", "char", "bool", "long", "short", "void", "if", "else", "for", "while",
            "do", "return", "const", "static", "auto", "case", "switch", "default", "break", "continue",
            "signed", "unsigned", "struct", "union", "goto", "new", "delete", "this", "true", "false",
            "min", "max", "threadIdx", "blockIdx", "blockDim", "gridDim"}
_MATH32 = {"exp": "expf", "log": "logf", "sqrt": "sqrtf", "rsqrt": "rsqrtf", "tanh": "tanhf", "erf": "erff",
           "abs": "fabsf"}
_MATH64 = {"exp": "exp", "log": "log", "sqrt": "sqrt", "rsqrt": "rsqrt", "tanh": "tanh", "erf": "erf",
           "abs": "fabs"}
# C precedence, least binding first: ?: 0, || 1, && 2, == != 3, < <= 4, + - 5, * / % 6, unary 7
MUL, UNARY, ATOM = 6, 7, 8
_SYMBOL = {E.Or: ("||", 1), E.And: ("&&", 2), E.EQ: ("==", 3), E.NE: ("!=", 3), E.LT: ("<", 4),
           E.LE: ("<=", 4), E.Add: ("+", 5), E.Sub: ("-", 5), E.Mul: ("*", 6), E.Div: ("/", 6)}
HELPERS = {
    "tl_floordiv": "template <typename T> __device__ __forceinline__ T tl_floordiv(T a, T b) {\n"
                   "  T q = a / b;\n  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;\n}",
    "tl_floormod": "template <typename T> __device__ __forceinline__ T tl_floormod(T a, T b) {\n"
                   "  T r = a % b;\n  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;\n}",
}


@dataclass
class KernelSource:
    """One kernel: its CUDA C, the buffers it takes (in order) and its launch shape."""
    name: str
    text: str
    params: list
    written: set
    grid: tuple
    block: tuple
    shared_bytes: int

    @property
    def threads(self) -> int:
        return math.prod(self.block)


@dataclass
class CudaUnit:
    """A GPU program as one CUDA C translation unit: kernels launched in order, and the
    intermediate buffers (`workspace`) the host allocates for them."""
    name: str
    source: str
    kernels: list
    workspace: list = field(default_factory=list)


def c_name(name: str) -> str:
    """A buffer or loop name as a C identifier (`A.shared` -> `A_shared`)."""
    out = re.sub(r"\W", "_", name)
    if not out or out[0].isdigit() or out in _C_WORDS:
        out = "v_" + out
    return out


def render(func: PrimFunc) -> CudaUnit:
    """`func` as CUDA C; BuildError naming what a GPU cannot run."""
    body, workspace = func.body, []
    while isinstance(body, Allocate):
        if body.buffer.scope != "global":
            raise BuildError(f"{func.name}: buffer {body.buffer.name!r} ({body.buffer.scope}) is computed at root; "
                             f"a {body.buffer.scope} buffer lives in one kernel: compute_at it inside its reader")
        workspace.append(body.buffer)
        body = body.body
    for b in list(func.args) + workspace:
        if b.size > MAX_ELEMENTS:
            raise BuildError(f"{func.name}: buffer {b.name!r} has {b.size} elements; the CUDA backend indexes "
                             f"with 32-bit ints (at most {MAX_ELEMENTS})")
    nests = body.stmts if isinstance(body, Seq) else [body]
    buffers = list(func.args) + workspace
    kernels = [_Kernel(func, f"{c_name(func.name)}_kernel{k}", nest, buffers).source()
               for k, nest in enumerate(nests)]
    helpers = sorted({h for k in kernels for h in HELPERS if f"{h}(" in k.text})
    head = (f"// tlmir: {func.name}, {len(kernels)} kernel{'s' * (len(kernels) > 1)} launched in order"
            + (f"; workspace {', '.join(b.name for b in workspace)}" if workspace else ""))
    text = "\n\n".join([head] + [HELPERS[h] for h in helpers] + [k.text for k in kernels]) + "\n"
    return CudaUnit(func.name, text, kernels, workspace)


class _Kernel:
    def __init__(self, func: PrimFunc, name: str, nest: Stmt, buffers: list):
        self.func, self.name, self.nest = func, name, nest
        self.buffers = {id(b): b for b in buffers}
        self.names: dict[int, str] = {}
        self.taken: set[str] = set()
        self.indices: dict[str, str] = {}  # launch tag -> its C name (`bx`, `tx`)
        self.ranges: dict = {}
        self.declared: list[set] = [set()]
        self.lines: list[str] = []
        self.launch = self._launch_extents()

    def _launch_extents(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for s in walk_stmt(self.nest):
            if isinstance(s, For) and s.thread_tag in LAUNCH_TAGS:
                if not isinstance(s.extent, E.Const):
                    raise BuildError(f"{self.func.name}: loop {s.var.name!r} bound to {s.thread_tag} needs a "
                                     f"constant extent, got {s.extent}")
                out[s.thread_tag] = max(out.get(s.thread_tag, 0), s.extent.value)
        if not out:
            stores = [s.buffer.name for s in walk_stmt(self.nest) if isinstance(s, Store)]
            raise BuildError(f"{self.func.name}: the nest computing {stores[0] if stores else 'nothing'!r} runs on "
                             f"no GPU thread; bind its loops to blockIdx / threadIdx")
        return out

    def fresh(self, base: str) -> str:
        """A C name not yet taken in this kernel, made from `base`."""
        name, k = c_name(base), 1
        while name in self.taken:
            name, k = f"{c_name(base)}_{k}", k + 1
        self.taken.add(name)
        return name

    def ident(self, obj, base: str) -> str:
        """The C name of a buffer or variable (`obj`, alive while the kernel is rendered)."""
        if id(obj) not in self.names:
            self.names[id(obj)] = self.fresh(base)
        return self.names[id(obj)]

    def emit(self, line: str) -> None:
        self.lines.append("  " * len(self.declared) + line)

    def block(self, s: Stmt) -> None:
        self.declared.append(set())
        self.stmt(s)
        self.declared.pop()

    # ----------------------------------------------------------------- kernel
    def source(self) -> KernelSource:
        allocs = [s.buffer for s in walk_stmt(self.nest) if isinstance(s, Allocate)]
        shared = [b for b in allocs if b.scope == "shared"]
        for b in allocs:
            if b.scope == "global":
                raise BuildError(f"{self.func.name}: buffer {b.name!r} (global) is computed inside a kernel; "
                                 f"give it shared or local scope (cache_read / cache_write) or compute it at root")
            _ctype(b.dtype, b.name)
        used = self._used_buffers()
        params = [b for b in self.buffers.values() if id(b) in used]
        written = {id(s.buffer) for s in walk_stmt(self.nest) if isinstance(s, Store)}
        for b in shared:
            self.emit(f"__shared__ __align__(16) {_ctype(b.dtype, b.name)} {self.ident(b, b.name)}[{b.size}];")
        for tag in LAUNCH_TAGS:
            if tag in self.launch:
                self.indices[tag] = self.fresh(_SHORT[tag])
                self.emit(f"const int {self.indices[tag]} = {tag};")
        self.stmt(self.nest)
        sig = ", ".join(f"{'' if id(b) in written else 'const '}{_ctype(b.dtype, b.name)}* __restrict__ "
                        f"{self.ident(b, b.name)}" for b in params)
        grid = tuple(self.launch.get(f"blockIdx.{d}", 1) for d in "xyz")
        block = tuple(self.launch.get(f"threadIdx.{d}", 1) for d in "xyz")
        head = (f"// grid {'x'.join(map(str, grid))}, block {'x'.join(map(str, block))}\n"
                f"extern \"C\" __global__ void __launch_bounds__({math.prod(block)}) {self.name}({sig}) {{")
        text = "\n".join([head] + self.lines + ["}"])
        return KernelSource(self.name, text, params, {i for i in written if i in used}, grid, block,
                            sum(b.size * SIZES[b.dtype] for b in shared))

    def _used_buffers(self) -> set[int]:
        used = set()
        for s in walk_stmt(self.nest):
            if isinstance(s, Store):
                used.add(id(s.buffer))
            for e in stmt_exprs(s):
                used.update(id(n.buffer) for n in E.walk(e) if isinstance(n, E.Load))
        return {i for i in used if i in self.buffers}

    # ------------------------------------------------------------- statements
    def stmt(self, s: Stmt) -> None:
        if isinstance(s, Seq):
            for c in s.stmts:
                self.stmt(c)
        elif isinstance(s, Store):
            self.emit(f"{self.buf(s.buffer)}[{self.expr(s.index)}] = {self.expr(s.value)};")
        elif isinstance(s, Allocate):
            if s.buffer.scope == "local":
                b = s.buffer
                self.emit(f"{_ctype(b.dtype, b.name)} {self.ident(b, b.name)}[{b.size}];")
            self.stmt(s.body)
        elif isinstance(s, IfThenElse):
            self.emit(f"if ({self.expr(s.cond)}) {{")
            self.block(s.then)
            if s.orelse is not None:
                self.emit("} else {")
                self.block(s.orelse)
            self.emit("}")
        elif isinstance(s, Barrier):
            self.emit("__syncthreads();")
        elif isinstance(s, Prefetch):
            pass  # a CPU cache hint; the GPU's caches are not steered this way
        elif isinstance(s, For):
            self.loop(s)
        else:
            raise BuildError(f"{self.func.name}: the CUDA backend cannot emit a {type(s).__name__}")

    def loop(self, s: For) -> None:
        if s.thread_tag in LAUNCH_TAGS:
            return self.thread_loop(s)
        lo = s.min.value if isinstance(s.min, E.Const) else None
        ext = s.extent.value if isinstance(s.extent, E.Const) else None
        if lo is not None and ext is not None:
            self.ranges[s.var] = (lo, lo + ext - 1)
        if s.kind == "vectorized" and self.vector(s):
            return
        name = self.ident(s.var, s.var.name)
        if s.kind in ("unrolled", "vectorized"):
            self.emit("#pragma unroll")
        end = E.const(lo + ext) if lo is not None and ext is not None else s.min + s.extent
        self.emit(f"for (int {name} = {self.expr(s.min)}; {name} < {self.expr(end)}; ++{name}) {{")
        self.block(s.body)
        self.emit("}")

    def thread_loop(self, s: For) -> None:
        """A loop bound to a block or thread index is that index (`bx`, `tx`, declared at
        the kernel's top), every loop bound to it alike; guarded where it covers fewer
        blocks or threads than the launch."""
        ext, full, index = s.extent.value, self.launch[s.thread_tag], self.indices[s.thread_tag]
        if isinstance(s.min, E.Const) and s.min.value == 0:
            self.names[id(s.var)] = index
        elif not any(id(s.var) in d for d in self.declared):
            self.emit(f"int {self.ident(s.var, s.var.name)} = {index} + {self.expr(s.min)};")
            self.declared[-1].add(id(s.var))
        self.ranges[s.var] = (0, ext - 1)
        if ext < full:
            self.emit(f"if ({index} < {ext}) {{")
            self.block(s.body)
            self.emit("}")
        else:
            self.stmt(s.body)

    def vector(self, s: For) -> bool:
        """Emit a vectorized loop as one float2 / float4 copy; False if it is not one."""
        vc = vector_copy(s)
        if vc is None:
            return False
        t = f"float{vc.n}"
        line = (f"*reinterpret_cast<{t}*>(&{self.buf(vc.dst.buffer)}[{self.expr(vc.dst_base)}]) = "
                f"*reinterpret_cast<const {t}*>(&{self.buf(vc.src.buffer)}[{self.expr(vc.src_base)}]);")
        if vc.cond is not None:
            self.emit(f"if ({self.expr(vc.cond)}) {{")
            self.declared.append(set())
            self.emit(line)
            self.declared.pop()
            self.emit("}")
        else:
            self.emit(line)
        return True

    # ------------------------------------------------------------ expressions
    def buf(self, b: Buffer) -> str:
        return self.ident(b, b.name)

    def expr(self, e: E.Expr, prec: int = 0) -> str:
        """`e` as C, parenthesised only where C's precedence needs it (`prec`: the least
        binding the context takes; 0 for a whole index, value or condition)."""
        text, own = self._expr(e)
        return f"({text})" if own < prec else text

    def _expr(self, e: E.Expr) -> tuple[str, int]:
        if isinstance(e, E.Const):
            text = _const(e)
            return text, (ATOM if text[0] != "-" else UNARY)
        if isinstance(e, E.Var):
            if id(e) not in self.names:
                raise BuildError(f"{self.func.name}: variable {e.name!r} is used outside any loop that defines it")
            return self.names[id(e)], ATOM
        if isinstance(e, E.Load):
            return f"{self.buf(e.buffer)}[{self.expr(e.index)}]", ATOM
        if isinstance(e, (E.FloorDiv, E.FloorMod)):
            return self.floor(e)
        if isinstance(e, (E.Min, E.Max)):
            fn = "min" if isinstance(e, E.Min) else "max"
            if e.dtype == "float32":
                fn = f"f{fn}f"
            elif e.dtype == "float64":
                fn = f"f{fn}"
            return f"{fn}({self.expr(e.a)}, {self.expr(e.b)})", ATOM
        if type(e) in _SYMBOL:
            sym, p = _SYMBOL[type(e)]
            return f"{self.expr(e.a, p)} {sym} {self.expr(e.b, p + 1)}", p
        if isinstance(e, E.Not):
            return f"!{self.expr(e.a, UNARY)}", UNARY
        if isinstance(e, E.Select):
            return f"{self.expr(e.cond, 1)} ? {self.expr(e.t)} : {self.expr(e.f)}", 0
        if isinstance(e, E.Cast):
            return f"({_ctype(e.dtype, str(e))}){self.expr(e.value, UNARY)}", UNARY
        if isinstance(e, E.Call):
            return self.call(e), ATOM
        raise BuildError(f"{self.func.name}: the CUDA backend cannot emit {type(e).__name__} node {e}")

    def floor(self, e: E.Expr) -> tuple[str, int]:
        """Floor division / modulo: C's truncating `/` and `%` where the operands are
        provably non-negative, else the helpers."""
        op, helper = ("/", "tl_floordiv") if isinstance(e, E.FloorDiv) else ("%", "tl_floormod")
        known = all(v in self.ranges for v in E.free_vars(e))
        if known and arith.const_bound(e.a, self.ranges)[0] >= 0 and arith.const_bound(e.b, self.ranges)[0] > 0:
            return f"{self.expr(e.a, MUL)} {op} {self.expr(e.b, MUL + 1)}", MUL
        return f"{helper}({self.expr(e.a)}, {self.expr(e.b)})", ATOM

    def call(self, e: E.Call) -> str:
        args = [self.expr(a) for a in e.args]
        if e.dtype not in ("float32", "float64"):
            if e.op == "abs":
                return f"abs({args[0]})"
            raise BuildError(f"{self.func.name}: {e.op} of {e.dtype} has no CUDA form")
        table = _MATH32 if e.dtype == "float32" else _MATH64
        if e.op == "sigmoid":
            one, exp = ("1.0f", "expf") if e.dtype == "float32" else ("1.0", "exp")
            return f"{one} / ({one} + {exp}(-{self.expr(e.args[0], UNARY)}))"
        if e.op not in table:
            raise BuildError(f"{self.func.name}: no CUDA function for {e.op}")
        return f"{table[e.op]}({', '.join(args)})"


def _ctype(dtype: str, what: str) -> str:
    if dtype not in C_TYPES:
        raise BuildError(f"{what}: the CUDA backend has no type for {dtype} (supported: {', '.join(C_TYPES)})")
    return C_TYPES[dtype]


def _const(c: E.Const) -> str:
    if c.dtype == "bool":
        return "true" if c.value else "false"
    if c.dtype in ("float32", "float64"):
        v, f32 = c.value, c.dtype == "float32"
        if math.isnan(v):
            return "__uint_as_float(0x7fc00000u)" if f32 else "__longlong_as_double(0x7ff8000000000000LL)"
        if math.isinf(v):
            inf = "__uint_as_float(0x7f800000u)" if f32 else "__longlong_as_double(0x7ff0000000000000LL)"
            return inf if v > 0 else f"(-{inf})"
        text = repr(float(v))
        return f"{text}f" if f32 else text
    v = int(c.value)
    return f"{v}LL" if abs(v) > MAX_ELEMENTS else str(v)
