"""Loop IR -> LLVM IR text for the CPU backend.

Generated entry point: `void <name>(ptr noalias arg0, ..., i32 num_threads)`, one pointer
per PrimFunc argument buffer (row-major, element-aligned).

Loop kinds: serial -> an i64 counted loop; unrolled -> the body once per iteration with the
variable constant; vectorized -> the body once over `<L x T>` vectors (see exprs.py), or a
serial loop when the body has no vector form; parallel -> the body outlined into a function
run by libgomp's GOMP_parallel over static contiguous chunks (serial when nested in another
parallel body or when OpenMP is unavailable). thread_binding / Barrier are GPU-only.

Small local buffers become entry-block allocas (so SROA can promote register tiles, and
each parallel body gets its own); large ones are heap-allocated around their scope.
"""
from __future__ import annotations

from typing import Callable

from llvmlite import ir

from ..errors import BuildError
from ..ir import expr as E
from ..ir import stmt as S
from ..ir.analysis import can_vectorize, captures, is_reduce_update, match_reduce_loop, stride
from .reduction import emit_reduce_loop
from .transpose import TransposeNest, emit_transpose_nest, match_transpose_nest
from .exprs import I32, I64, PTR, VOID, ExprEmitter, Lanes, ModuleContext, elem_size, mem_type

ALLOCA_LIMIT = 256 * 1024  # bytes; larger local buffers go to the heap, not the stack
HEAP_ALIGN = 64
PREFETCH_LOCALITY = 2  # llvm.prefetch locality 2: prefetcht1, into L2
                       # (docs/history.md, "a prefetch of the next panel")
MAX_VECTOR_CHUNKS = 4  # vectorized extents above this many hint-wide vectors are strip-mined


class FuncEmitter(ExprEmitter):
    """Statement codegen for one LLVM function (the entry or an outlined parallel body)."""

    def __init__(self, mod: ModuleContext, fn: ir.Function, fname: str, in_parallel: bool,
                 num_threads: ir.Value | None = None):
        entry = fn.append_basic_block("entry")
        self.entry_b = ir.IRBuilder(entry)
        # allocas go before the entry block's branch, so they are emitted once per call
        self.entry_b.position_before(self.entry_b.branch(fn.append_basic_block("body")))
        super().__init__(mod, ir.IRBuilder(fn.blocks[-1]), fname)
        self.fn, self.in_parallel, self.num_threads = fn, in_parallel, num_threads
        self._allocas: dict[int, ir.Value] = {}

    def finish(self) -> None:
        self.b.ret_void()

    # ------------------------------------------------------------ statements

    def stmt(self, s: S.Stmt) -> None:
        if isinstance(s, S.Seq):
            for c in s.stmts:
                self.stmt(c)
        elif isinstance(s, S.For):
            self._for(s)
        elif isinstance(s, S.Store):
            self._store(s)
        elif isinstance(s, S.Allocate):
            self._allocate(s)
        elif isinstance(s, S.IfThenElse):
            self._if(s)
        elif isinstance(s, S.Barrier):
            raise BuildError(f"{self.fname}: barrier({s.scope}) synchronises GPU threads; "
                             "the CPU backend cannot run it")
        elif isinstance(s, S.Prefetch):
            self._prefetch(s)
        else:
            raise BuildError(f"{self.fname}: cannot generate code for statement {type(s).__name__}")

    def _store(self, s: S.Store) -> None:
        buf, dt = s.buffer, s.buffer.dtype
        if s.value.dtype != dt:
            raise BuildError(f"{self.fname}: storing a {s.value.dtype} value into {dt} buffer "
                             f"'{buf.name}' (`{buf.name}[{s.index}] = {s.value}`)")
        ptr, align, bd = self.buffer(buf), elem_size(dt), self.b
        value = self.reduce_value if is_reduce_update(s) else self.expr
        if self.lanes is None:
            val = self.to_mem(value(s.value), dt)
            bd.store(val, self.gep(ptr, self.index(s.index), dt), align=align)
            return
        n = self.lanes.n
        st = stride(s.index, self.lanes.var)
        if st == 0:  # can_vectorize made sure the value is lane-invariant too
            with self.scalar_view():
                self._store(s)
            return
        val = self.to_mem(self.splat(value(s.value), n), dt)
        if st == 1:
            with self.scalar_view():
                p = self.gep(ptr, self.index(s.index), dt)
            bd.store(val, p, align=align)
        else:
            ptrs = self.gep(self.splat(ptr, n), self.splat(self.index(s.index), n), dt)
            self.masked("scatter", [val, ptrs, self.const(True, "bool", n)], VOID, align)

    def _prefetch(self, s: S.Prefetch) -> None:
        """llvm.prefetch (read, into L2): the address is not `inbounds`, it may lie past the end."""
        if self.lanes is not None:  # inside a vector body: lane 0's line
            with self.scalar_view():
                return self._prefetch(s)
        p = self.gep(self.buffer(s.buffer), self.index(s.index), s.buffer.dtype, inbounds=False)
        fn = self.mod.declare("llvm.prefetch.p0", VOID, [PTR, I32, I32, I32])
        self.b.call(fn, [p, ir.Constant(I32, 0), ir.Constant(I32, PREFETCH_LOCALITY), ir.Constant(I32, 1)])

    def _if(self, s: S.IfThenElse) -> None:
        cond = self.to_bool(s.cond)  # lane-invariant inside vector bodies (can_vectorize)
        if s.orelse is None:
            with self.b.if_then(cond):
                self.stmt(s.then)
            return
        with self.b.if_else(cond) as (then, otherwise):
            with then:
                self.stmt(s.then)
            with otherwise:
                self.stmt(s.orelse)

    def _allocate(self, s: S.Allocate) -> None:
        buf = s.buffer
        nbytes = buf.size * elem_size(buf.dtype)
        if nbytes <= ALLOCA_LIMIT:
            ptr = self._allocas.get(id(buf))
            if ptr is None:
                ptr = self.entry_alloca(ir.ArrayType(mem_type(buf.dtype), buf.size), buf.name)
                self._allocas[id(buf)] = ptr
            self._with_buffer(buf, ptr, s.body)
            return
        size = -(-nbytes // HEAP_ALIGN) * HEAP_ALIGN  # aligned_alloc wants a multiple of the alignment
        alloc = self.mod.declare("aligned_alloc", PTR, [I64, I64])
        ptr = self.b.call(alloc, [ir.Constant(I64, HEAP_ALIGN), ir.Constant(I64, size)], name=buf.name)
        self._with_buffer(buf, ptr, s.body)
        self.b.call(self.mod.declare("free", VOID, [PTR]), [ptr])

    def entry_alloca(self, ty: ir.Type, name: str) -> ir.Value:
        """A 64-byte aligned stack slot in the entry block, typed as an opaque `ptr`."""
        a = self.entry_b.alloca(ty, name=name)
        a.align = 64
        a.type = PTR  # llvmlite would print a typed pointer (`[16 x float]*`)
        return a

    def _with_buffer(self, buf: S.Buffer, ptr: ir.Value, body: S.Stmt) -> None:
        old = self.bufs.get(buf)
        self.bufs[buf] = ptr
        self.stmt(body)
        if old is None:
            del self.bufs[buf]
        else:
            self.bufs[buf] = old

    # ------------------------------------------------------------ loops

    def _for(self, s: S.For) -> None:
        if s.kind == "thread_binding":
            raise BuildError(f"{self.fname}: loop '{s.var.name}' is bound to {s.thread_tag}; "
                             "the CPU backend cannot run GPU thread bindings")
        n = s.extent.value if isinstance(s.extent, E.Const) else None
        outlined = s.kind == "parallel" and self.mod.openmp and not self.in_parallel
        red = match_reduce_loop(s) if self.lanes is None else None
        tr = match_transpose_nest(s, self.mod.lanes_hint) if self.lanes is None else None
        if tr is not None and not outlined:
            emit_transpose_nest(self, tr)
        elif red is not None:
            emit_reduce_loop(self, s, red)
        elif s.kind == "unrolled" and n is not None:
            lo = self.index(s.min)
            for k in range(n):
                self.stmt_with(s.var, self.b.add(lo, ir.Constant(I64, k), flags=("nsw",)), s.body)
        elif s.kind == "vectorized" and n is not None and n > 1 and can_vectorize(s.body, s.var):
            self._vectorize(s, n)
        elif outlined:
            self._parallel(s, tr)
        else:
            lo = self.index(s.min)
            hi = self.b.add(lo, self.index(s.extent), flags=("nsw",))
            self.loop(lo, hi, lambda i: self.stmt_with(s.var, i, s.body), s.var.name)

    def stmt_with(self, var: E.Var, value: ir.Value, body: S.Stmt) -> None:
        """Emit `body` with `var` bound to `value` (loop bodies; the transposes reuse it)."""
        old = self.env.get(var)
        self.env[var] = value
        self.stmt(body)
        if old is None:
            del self.env[var]
        else:
            self.env[var] = old

    def loop(self, lo: ir.Value, hi: ir.Value, body: Callable[[ir.Value], None], name: str) -> None:
        """for (i = lo; i < hi; ++i) body(i), with an i64 induction variable."""
        bd = self.b
        pre = bd.block
        head = bd.append_basic_block(f"{name}.head")
        loop_bb = bd.append_basic_block(f"{name}.body")
        done = bd.append_basic_block(f"{name}.done")
        bd.branch(head)
        bd.position_at_end(head)
        i = bd.phi(I64, name=name)
        i.add_incoming(lo, pre)
        bd.cbranch(bd.icmp_signed("<", i, hi), loop_bb, done)
        bd.position_at_end(loop_bb)
        body(i)
        i.add_incoming(bd.add(i, ir.Constant(I64, 1), flags=("nsw",)), bd.block)
        bd.branch(head)
        bd.position_at_end(done)

    def _vectorize(self, s: S.For, n: int) -> None:
        """One vector body of n lanes when n is below the hint width, or a power of two of at
        most MAX_VECTOR_CHUNKS hint-wide vectors; otherwise hint-wide vectors (unrolled, or in
        a loop when there are more than MAX_VECTOR_CHUNKS) and a tail vector of n % hint
        lanes. LLVM legalizes a wide non-power-of-two vector such as <48 x float> into scalar
        code, 25x slower than three <16 x float> (docs/architecture.md, "Vector widths")."""
        lo, w = self.index(s.min), self.mod.lanes_hint
        if (n < w or n & (n - 1) == 0) and n <= MAX_VECTOR_CHUNKS * w:
            self._vector_body(s, lo, n)
            return
        chunks = n // w

        def chunk(c: ir.Value) -> None:
            self._vector_body(s, self.b.add(lo, self.b.mul(c, ir.Constant(I64, w)), flags=("nsw",)), w)

        if chunks > MAX_VECTOR_CHUNKS:
            self.loop(ir.Constant(I64, 0), ir.Constant(I64, chunks), chunk, s.var.name + ".vec")
        else:
            for c in range(chunks):
                chunk(ir.Constant(I64, c))
        if n % w:
            self._vector_body(s, self.b.add(lo, ir.Constant(I64, chunks * w), flags=("nsw",)), n % w)

    def _vector_body(self, s: S.For, base: ir.Value, n: int) -> None:
        shadowed = self.env.pop(s.var, None)
        self.lanes = Lanes(s.var, base, n)
        self.stmt(s.body)
        self.lanes = None
        if shadowed is not None:
            self.env[s.var] = shadowed

    def _parallel(self, s: S.For, tr: TransposeNest | None = None) -> None:
        """Outline the loop into `void body(ptr data)` and run it on every OpenMP thread.

        body unpacks the captured values and calls an internal `impl` that takes buffers as
        noalias parameters; inlining impl turns those into alias scopes, so the parallel
        body optimises as well as the serial one (plain loads of pointers would not)."""
        vars_, bufs = captures(s, self.env, self.bufs)
        slots = ([self.index(s.min), self.index(s.extent)] + [self.env[v] for v in vars_]
                 + [self.bufs[b] for b in bufs])
        nscalar = 2 + len(vars_)
        name = self.mod.unique(f"{self.fname}.parallel.{s.var.name}")
        impl = ir.Function(self.mod.module, ir.FunctionType(VOID, [x.type for x in slots]), name + ".impl")
        impl.linkage = "internal"
        impl.attributes.add("nounwind")
        for a in impl.args[nscalar:]:
            a.add_attribute("noalias")
        self._emit_chunk(impl, s, vars_, bufs, tr)

        body = ir.Function(self.mod.module, ir.FunctionType(VOID, [PTR]), name)
        body.linkage = "internal"
        body.attributes.add("nounwind")
        struct = ir.LiteralStructType([x.type for x in slots])
        bb = ir.IRBuilder(body.append_basic_block("entry"))
        args = [bb.load(self._field(bb, body.args[0], struct, k), typ=x.type) for k, x in enumerate(slots)]
        bb.call(impl, args)
        bb.ret_void()

        data = self.entry_alloca(struct, "parallel.data")
        for k, x in enumerate(slots):
            self.b.store(x, self._field(self.b, data, struct, k))
        gomp = self.mod.declare("GOMP_parallel", VOID, [PTR, PTR, I32, I32])
        # one thread: call the body directly (no team start-up; safe in a forked child,
        # where libgomp's thread pool is unusable)
        with self.b.if_else(self.b.icmp_signed("==", self.num_threads, ir.Constant(I32, 1))) as (one, many):
            with one:
                self.b.call(body, [data])
            with many:
                self.b.call(gomp, [body, data, self.num_threads, ir.Constant(I32, 0)])

    @staticmethod
    def _field(bd: ir.IRBuilder, ptr: ir.Value, struct: ir.Type, k: int) -> ir.Value:
        return bd.gep(ptr, [ir.Constant(I32, 0), ir.Constant(I32, k)], inbounds=True, source_etype=struct)

    def _emit_chunk(self, impl: ir.Function, s: S.For, vars_: list, bufs: list,
                    tr: TransposeNest | None) -> None:
        """impl(lo, extent, vars..., bufs...): this thread's contiguous share of the range;
        `tr`: the loop as a transposing copy, blocked within the share."""
        child = FuncEmitter(self.mod, impl, self.fname, in_parallel=True)
        lo, ext = impl.args[0], impl.args[1]
        child.env = dict(zip(vars_, impl.args[2:]))
        child.bufs = dict(zip(bufs, impl.args[2 + len(vars_):]))
        bd = child.b
        tid, nt = (bd.sext(bd.call(self.mod.declare(f, I32, []), []), I64)
                   for f in ("omp_get_thread_num", "omp_get_num_threads"))
        size = bd.sdiv(bd.add(ext, bd.sub(nt, ir.Constant(I64, 1))), nt)
        begin = bd.mul(tid, size)
        end = bd.add(begin, size)
        end = bd.select(bd.icmp_signed("<", end, ext), end, ext)
        if tr is not None:  # the thread's rows of a transposing copy, blocked
            emit_transpose_nest(child, tr, bd.add(lo, begin, flags=("nsw",)), bd.sub(end, begin))
        else:
            child.loop(begin, end, lambda i: child.stmt_with(s.var, bd.add(lo, i, flags=("nsw",)), s.body),
                       s.var.name)
        child.finish()


def emit_module(func: S.PrimFunc, vector_lanes_hint: int = 16, openmp: bool = True) -> str:
    """LLVM IR text for `func`. `vector_lanes_hint` is the vector width used to strip-mine
    long vectorized loops; `openmp=False` runs parallel loops serially."""
    seen: set[int] = set()
    for b in func.args:
        if id(b) in seen:
            raise BuildError(f"{func.name}: buffer '{b.name}' appears twice in the argument list")
        seen.add(id(b))
        mem_type(b.dtype)  # rejects dtypes without a CPU type, naming the dtype
    mod = ModuleContext(func.name, openmp, vector_lanes_hint)
    fn = ir.Function(mod.module, ir.FunctionType(VOID, [PTR] * len(func.args) + [I32]), func.name)
    fn.attributes.add("nounwind")
    for a in fn.args[:-1]:
        a.add_attribute("noalias")
    em = FuncEmitter(mod, fn, func.name, in_parallel=False, num_threads=fn.args[-1])
    em.bufs = dict(zip(func.args, fn.args))
    em.stmt(func.body)
    em.finish()
    return str(mod.module)
