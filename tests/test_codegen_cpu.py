"""CPU backend: hand-built loop programs compiled to native code and checked against numpy."""
from __future__ import annotations

import math
import os
import re
import signal

import numpy as np
import pytest

from tlmir.codegen_cpu import Kernel, Timing, compile_func, have_openmp
from tlmir.codegen_cpu.llvm_ir import emit_module
from tlmir.errors import ArgumentError, BuildError
from tlmir.ir.expr import (EQ, Call, Cast, Const, FloorDiv, FloorMod, Load, Max, Min, Not,
                           Select, Var)
from tlmir.ir.stmt import Allocate, Barrier, Buffer, For, IfThenElse, PrimFunc, Store, seq

RNG = np.random.default_rng(0)


def c(v: int) -> Const:
    return Const(v, "int64")


def loop(var: Var, n: int, kind: str, body, lo: int = 0) -> For:
    return For(var, c(lo), c(n), kind, body)


def elementwise(kind: str, n: int, fn, dtype: str = "float32", out_dtype: str | None = None,
                name: str = "ew") -> PrimFunc:
    """out[i] = fn(i, A) over a 1-D loop of the given kind."""
    A, O = Buffer("A", (n,), dtype), Buffer("O", (n,), out_dtype or dtype)
    i = Var("i")
    return PrimFunc(f"{name}_{kind}", [A, O], loop(i, n, kind, Store(O, i, fn(i, A))))


# ---------------------------------------------------------------- elementwise

@pytest.mark.parametrize("kind", ["serial", "vectorized", "unrolled", "parallel"])
def test_elementwise_add(kind):
    n = 16
    A, B, C = (Buffer(x, (n,), "float32") for x in "ABC")
    i = Var("i")
    body = Store(C, i, Load(A, i) + Load(B, i))
    k = compile_func(PrimFunc(f"add_{kind}", [A, B, C], loop(i, n, kind, body)))
    a, b = RNG.random(n, dtype=np.float32), RNG.random(n, dtype=np.float32)
    out = np.zeros(n, np.float32)
    k(a, b, out)
    np.testing.assert_array_equal(out, a + b)
    if kind == "vectorized":
        assert "<16 x float>" in k.llvm_ir


def test_long_vectorized_loop_is_strip_mined_with_tail():
    n = 100  # 6 vectors of 16 in a loop plus a 4-lane tail
    f = elementwise("vectorized", n, lambda i, A: Load(A, i) * Const(2.0, "float32") + Cast("float32", i))
    a = RNG.random(n, dtype=np.float32)
    out = np.zeros(n, np.float32)
    compile_func(f)(a, out)
    np.testing.assert_allclose(out, a * 2 + np.arange(n), rtol=1e-6)
    assert "<4 x float>" in emit_module(f)


@pytest.mark.parametrize("n, widths", [(48, {16}), (24, {16, 8}), (40, {16, 8}), (12, {12}),
                                       (32, {32}), (64, {64})])
def test_vector_widths_are_narrow_or_powers_of_two(n, widths):
    """A vectorized extent of at least the hint width that is not a power of two is emitted as
    hint-wide vectors plus a tail: LLVM turns <48 x float> into scalar code (25x slower)."""
    f = elementwise("vectorized", n, lambda i, A: Load(A, i) * Const(3.0, "float32") + Cast("float32", i),
                    name=f"w{n}")
    ir_text = emit_module(f)
    assert {int(w) for w in re.findall(r"<(\d+) x float>", ir_text)} == widths
    a = RNG.random(n, dtype=np.float32)
    out = np.zeros(n, np.float32)
    compile_func(f)(a, out)
    np.testing.assert_allclose(out, a * 3 + np.arange(n), rtol=1e-6)


def test_strided_gather_scatter_and_broadcast_load():
    n = 16
    A, O = Buffer("A", (5 * n,), "float64"), Buffer("O", (2 * n,), "float64")
    i = Var("i")
    body = seq(Store(O, i * 2, Load(A, i * 5 + 1) + Load(A, c(0))),  # gather, broadcast
               Store(O, i * 2 + 1, Cast("float64", i)))               # scatter
    f = PrimFunc("strided", [A, O], loop(i, n, "vectorized", body))
    assert "masked.gather" in emit_module(f) and "masked.scatter" in emit_module(f)
    a = RNG.random(5 * n)
    out = np.zeros(2 * n)
    compile_func(f)(a, out)
    np.testing.assert_allclose(out[0::2], a[1::5] + a[0])
    np.testing.assert_array_equal(out[1::2], np.arange(n))


def fenced(count: int, dtype: str, side: str) -> np.ndarray:
    """A `count`-element array that ends (side "end") or starts ("start") at a page that
    cannot be read: a load outside it faults instead of passing unnoticed."""
    import ctypes
    import mmap
    page, nbytes = mmap.PAGESIZE, count * np.dtype(dtype).itemsize
    pages = -(-nbytes // page)
    mem = mmap.mmap(-1, (pages + 1) * page)
    base = ctypes.addressof(ctypes.c_char.from_buffer(mem))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    fence = base + pages * page if side == "end" else base
    assert libc.mprotect(fence, page, 0) == 0
    start = (pages * page - nbytes) if side == "end" else page
    return np.frombuffer(mem, dtype, count, start)  # the array keeps the mapping alive


@pytest.mark.parametrize("s", [2, 3, 4])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_small_constant_strides_are_contiguous_loads_and_a_shuffle(s, dtype):
    """A stride-2 conv's input row: s vector loads and a shuffle, never a read past the
    last lane's element (the array ends at an unreadable page)."""
    n = 16 if dtype == "float32" else 8
    size = s * (n - 1) + 2
    A, O = Buffer("A", (size,), dtype), Buffer("O", (n,), dtype)
    i = Var("i")
    f = PrimFunc(f"stride{s}_{dtype}", [A, O], loop(i, n, "vectorized", Store(O, i, Load(A, i * s + 1))))
    text = emit_module(f)
    assert "masked.gather" not in text and "shufflevector" in text
    a = fenced(size, dtype, "end")
    a[:] = RNG.random(size)
    out = np.zeros(n, dtype)
    compile_func(f)(a, out)
    np.testing.assert_array_equal(out, a[1::s])


def test_guarded_strided_load_reads_only_the_lanes_it_keeps():
    """A padded stride-2 read (lane 0 would read A[-1]): the guard masks the loads, the
    array starts right after an unreadable page."""
    n, size = 16, 31
    A, O = Buffer("A", (size,), "float32"), Buffer("O", (n,), "float32")
    i = Var("i")
    val = Select(i >= 1, Load(A, i * 2 - 1), Const(0.0, "float32"))
    f = PrimFunc("pad_stride2", [A, O], loop(i, n, "vectorized", Store(O, i, val)))
    assert "masked.gather" not in emit_module(f)
    a = fenced(size, "float32", "start")
    a[:] = RNG.random(size, dtype=np.float32)
    out = np.full(n, 7.0, np.float32)
    compile_func(f)(a, out)
    np.testing.assert_array_equal(out, np.concatenate([[0.0], a[1::2]]).astype(np.float32))


@pytest.mark.parametrize("kind", ["serial", "vectorized"])
def test_int8_bool_and_min_max(kind):
    n = 32
    def pick(i, A):
        return Cast("int8", (Load(A, i) < Const(0, "int8")) | EQ(Load(A, i), Const(5, "int8")))

    f = elementwise(kind, n, pick, dtype="int8", name="cmp")
    a = RNG.integers(-10, 10, n).astype(np.int8)
    out = np.zeros(n, np.int8)
    compile_func(f)(a, out)
    np.testing.assert_array_equal(out, ((a < 0) | (a == 5)).astype(np.int8))

    g = elementwise(kind, n, lambda i, A: Not(Load(A, i)), dtype="bool", name="not")
    bits = RNG.random(n) < 0.5
    res = np.zeros(n, bool)
    compile_func(g)(bits, res)
    np.testing.assert_array_equal(res, ~bits)

    h = elementwise(kind, n, lambda i, A: Max(Min(Load(A, i), Const(0.5, "float32")), Const(0.25, "float32")),
                    name="clip")
    x = RNG.random(n, dtype=np.float32)
    y = np.zeros(n, np.float32)
    compile_func(h)(x, y)
    np.testing.assert_array_equal(y, np.clip(x, 0.25, 0.5))


# ---------------------------------------------------------------- matmul, local buffers, threads

N_MM = 64


def matmul(kind_i: str = "parallel") -> PrimFunc:
    """C = A @ B as i (parallel), zero-init, jo, k, ji (vectorized 16)."""
    n, w = N_MM, 16
    A, B, C = (Buffer(x, (n, n), "float32") for x in "ABC")
    i, jo, ji, k, j = Var("i"), Var("jo"), Var("ji"), Var("k"), Var("j")
    cidx = i * n + jo * w + ji
    update = Store(C, cidx, Load(C, cidx) + Load(A, i * n + k) * Load(B, k * n + jo * w + ji))
    body = seq(loop(j, n, "vectorized", Store(C, i * n + j, Const(0.0, "float32"))),
               loop(jo, n // w, "serial", loop(k, n, "serial", loop(ji, w, "vectorized", update))))
    return PrimFunc("matmul", [A, B, C], loop(i, n, kind_i, body))


def test_matmul_vectorized_fma_and_threads():
    k = compile_func(matmul())
    a, b = RNG.random((N_MM, N_MM), dtype=np.float32), RNG.random((N_MM, N_MM), dtype=np.float32)
    out = np.full((N_MM, N_MM), np.nan, np.float32)
    k(a, b, out)
    np.testing.assert_allclose(out, a @ b, rtol=1e-5)
    assert "vfmadd" in k.assembly
    assert "zmm" in k.assembly or "ymm" in k.assembly
    k.num_threads = 2
    out2 = np.zeros_like(out)
    k(a, b, out2)
    np.testing.assert_array_equal(out2, out)
    if have_openmp():
        assert "GOMP_parallel" in k.llvm_ir
    assert "GOMP_parallel" not in emit_module(matmul(), openmp=False)


def test_nested_parallel_runs_inner_loop_serially():
    n = 8
    A, O = Buffer("A", (n, n), "float32"), Buffer("O", (n, n), "float32")
    i, j = Var("i"), Var("j")
    f = PrimFunc("nested", [A, O], loop(i, n, "parallel", loop(j, n, "parallel",
                                                                Store(O, i * n + j, Load(A, j * n + i)))))
    if have_openmp():
        assert emit_module(f).count("call void @\"GOMP_parallel\"") == 1
    a = RNG.random((n, n), dtype=np.float32)
    out = np.zeros_like(a)
    compile_func(f)(a, out)
    np.testing.assert_array_equal(out, a.T)


@pytest.mark.parametrize("size", [8, 100_000])  # stack alloca / heap (aligned_alloc)
def test_reduction_into_local_buffer(size):
    """Row sums through a local accumulator, one per parallel row, inside the parallel body."""
    rows, cols = 4, 32
    A, O = Buffer("A", (rows, cols), "float32"), Buffer("O", (rows,), "float32")
    acc = Buffer("acc", (size,), "float32", "local")
    i, k = Var("i"), Var("k")
    add = Store(acc, c(0), Load(acc, c(0)) + Load(A, i * cols + k))
    body = Allocate(acc, seq(Store(acc, c(0), Const(0.0, "float32")), loop(k, cols, "serial", add),
                             Store(O, i, Load(acc, c(0)))))
    f = PrimFunc(f"rowsum{size}", [A, O], loop(i, rows, "parallel", body))
    assert ("aligned_alloc" in emit_module(f)) == (size > 1000)
    a = RNG.random((rows, cols), dtype=np.float32)
    out = np.zeros(rows, np.float32)
    compile_func(f)(a, out)
    np.testing.assert_allclose(out, a.sum(axis=1), rtol=1e-5)


def test_register_tile_is_promoted_out_of_memory():
    """A fully unrolled local tile must end up in registers (no alloca after O3)."""
    n, t = 16, 4
    A, O = Buffer("A", (n, t), "float32"), Buffer("O", (t,), "float32")
    acc = Buffer("acc", (t,), "float32", "local")
    k, u, v, w = Var("k"), Var("u"), Var("v"), Var("w")
    add = Store(acc, v, Load(acc, v) + Load(A, k * t + v))
    body = Allocate(acc, seq(loop(u, t, "unrolled", Store(acc, u, Const(0.0, "float32"))),
                             loop(k, n, "serial", loop(v, t, "unrolled", add)),
                             loop(w, t, "unrolled", Store(O, w, Load(acc, w)))))
    kern = compile_func(PrimFunc("tile", [A, O], body))
    assert "alloca" not in kern.llvm_ir
    a = RNG.random((n, t), dtype=np.float32)
    out = np.zeros(t, np.float32)
    kern(a, out)
    np.testing.assert_allclose(out, a.sum(axis=0), rtol=1e-5)


# ---------------------------------------------------------------- guarded (padded) reads

@pytest.mark.parametrize("kind", ["serial", "vectorized", "unrolled"])
def test_select_padded_read(kind):
    n = 16
    f = elementwise(kind, n, lambda i, A: Select(i >= 1, Load(A, i - 1), Const(0.0, "float32")), name="pad")
    a = RNG.random(n, dtype=np.float32)
    out = np.full(n, np.nan, np.float32)
    compile_func(f)(a, out)
    np.testing.assert_array_equal(out, np.concatenate([[0], a[:-1]]))


@pytest.mark.parametrize("kind", ["serial", "vectorized"])
@pytest.mark.parametrize("index", ["contiguous", "strided", "invariant"])
def test_select_never_touches_unmapped_memory(kind, index):
    """The untaken side reads terabytes out of bounds: executing it would crash."""
    far = 1 << 40
    idx = {"contiguous": lambda i: i + far, "strided": lambda i: i * 3 + far,
           "invariant": lambda i: c(far)}[index]
    f = elementwise(kind, 32, lambda i, A: Select(i < 0, Load(A, idx(i)), Load(A, i)), name=f"far_{index}")
    a = RNG.random(32, dtype=np.float32)
    out = np.zeros(32, np.float32)
    compile_func(f)(a, out)
    np.testing.assert_array_equal(out, a)


@pytest.mark.parametrize("kind", ["serial", "vectorized"])
def test_and_or_guard_their_second_operand(kind):
    far = 1 << 40
    zero = Const(0.0, "float32")

    def fn(i, A):
        bad = Load(A, i + far) > zero  # read only when the first operand does not decide
        return Select((i < 0) & bad, zero, Select((i >= 0) | bad, Load(A, i), zero))

    f = elementwise(kind, 16, fn, name="andor")
    a = RNG.random(16, dtype=np.float32)
    out = np.zeros(16, np.float32)
    compile_func(f)(a, out)
    np.testing.assert_array_equal(out, a)


# ---------------------------------------------------------------- math and integer semantics

MATH = {"exp": np.exp, "log": np.log, "sqrt": np.sqrt, "tanh": np.tanh, "abs": np.abs,
        "erf": np.vectorize(math.erf), "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
        "rsqrt": lambda x: 1 / np.sqrt(x)}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("kind", ["serial", "vectorized"])
def test_math_functions(kind, dtype):
    n = 16
    x = RNG.uniform(0.05, 3.0, n).astype(dtype)
    for op, ref in MATH.items():
        f = elementwise(kind, n, lambda i, A: Call(op, [Load(A, i)], dtype), dtype=dtype, name=op)
        out = np.zeros(n, dtype)
        compile_func(f)(x, out)
        np.testing.assert_allclose(out, ref(x.astype(np.float64)), rtol=1e-5, err_msg=op)


@pytest.mark.parametrize("dtype", ["int32", "int64"])
@pytest.mark.parametrize("kind", ["serial", "vectorized"])
def test_floor_div_mod_negative(kind, dtype):
    n = 32
    a = RNG.integers(-50, 50, n).astype(dtype)
    d = RNG.choice([-7, -3, -1, 1, 2, 5], n).astype(dtype)
    A, D = Buffer("A", (n,), dtype), Buffer("D", (n,), dtype)
    outs = [Buffer(f"O{k}", (n,), dtype) for k in range(6)]
    i = Var("i")
    x, y = Load(A, i), Load(D, i)
    vals = [FloorDiv(x, y), FloorMod(x, y), FloorDiv(x, Const(4, dtype)), FloorMod(x, Const(4, dtype)),
            FloorDiv(x, Const(-3, dtype)), FloorMod(x, Const(3, dtype))]
    body = seq(*[Store(o, i, v) for o, v in zip(outs, vals)])
    k = compile_func(PrimFunc(f"divmod_{kind}", [A, D, *outs], loop(i, n, kind, body)))
    res = [np.zeros(n, dtype) for _ in outs]
    k(a, d, *res)
    for got, want in zip(res, [a // d, a % d, a // 4, a % 4, a // -3, a % 3]):
        np.testing.assert_array_equal(got, want)


def test_if_then_else_and_lane_dependent_if_falls_back():
    n = 16
    A, O = Buffer("A", (n,), "float32"), Buffer("O", (n,), "float32")
    i = Var("i")
    body = IfThenElse(FloorMod(i, c(2)) < c(1), Store(O, i, Load(A, i)), Store(O, i, -Load(A, i)))
    f = PrimFunc("ite", [A, O], loop(i, n, "vectorized", body))
    a = RNG.random(n, dtype=np.float32)
    out = np.zeros(n, np.float32)
    compile_func(f)(a, out)
    np.testing.assert_array_equal(out, np.where(np.arange(n) % 2 == 0, a, -a))


# ---------------------------------------------------------------- errors

def test_gpu_constructs_raise_build_error():
    n = 8
    A = Buffer("A", (n,), "float32")
    t = Var("tx")
    bound = For(t, c(0), c(n), "thread_binding", Store(A, t, Const(1.0, "float32")), "threadIdx.x")
    with pytest.raises(BuildError, match="'tx'.*threadIdx.x"):
        compile_func(PrimFunc("gpu", [A], bound))
    with pytest.raises(BuildError, match="barrier"):
        compile_func(PrimFunc("bar", [A], Barrier()))


def test_argument_errors():
    k = compile_func(matmul("serial"))
    good = [np.zeros((N_MM, N_MM), np.float32) for _ in range(3)]
    k(*good)
    with pytest.raises(ArgumentError, match="expected 3 arrays"):
        k(*good[:2])
    with pytest.raises(ArgumentError, match=r"argument 1 \(B\): expected dtype float32, got float64"):
        k(good[0], good[1].astype(np.float64), good[2])
    with pytest.raises(ArgumentError, match=r"argument 2 \(C\): expected shape \(64, 64\), got \(64, 32\)"):
        k(good[0], good[1], good[2][:, :32].copy())
    with pytest.raises(ArgumentError, match=r"argument 0 \(A\): array is not C-contiguous"):
        k(np.asfortranarray(good[0]), good[1], good[2])
    with pytest.raises(ArgumentError, match="numpy.ndarray"):
        k(good[0].tolist(), good[1], good[2])
    ro = good[2].copy()
    ro.flags.writeable = False
    with pytest.raises(ArgumentError, match=r"argument 2 \(C\).*read-only"):
        k(good[0], good[1], ro)
    good[0].flags.writeable = False  # inputs may be read-only
    k(*good)


def test_num_threads_env(monkeypatch):
    k = compile_func(matmul())
    arrays = [np.zeros((N_MM, N_MM), np.float32) for _ in range(3)]
    monkeypatch.setenv("TLMIR_NUM_THREADS", "bad")
    with pytest.raises(ArgumentError, match="TLMIR_NUM_THREADS"):
        k(*arrays)
    monkeypatch.setenv("TLMIR_NUM_THREADS", "0")
    with pytest.raises(ArgumentError, match="TLMIR_NUM_THREADS"):
        k(*arrays)
    monkeypatch.setenv("TLMIR_NUM_THREADS", "2")
    k(*arrays)


def test_benchmark_returns_timing():
    k = compile_func(matmul())
    assert isinstance(k, Kernel)
    arrays = [RNG.random((N_MM, N_MM), dtype=np.float32) for _ in range(3)]
    t = k.benchmark(*arrays, repeat=3)
    assert isinstance(t, Timing) and len(t.times) == 3
    assert 0 < t.min <= t.median < 1.0


def test_kernel_name_clashing_with_runtime_function():
    f = elementwise("serial", 4, lambda i, A: Call("tanh", [Load(A, i)], "float64"), dtype="float64")
    f.name = "tanh"
    with pytest.raises(BuildError, match="tanh"):
        compile_func(f)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_parallel_kernel_in_forked_child():
    """libgomp's pool does not survive fork(): a child must fall back to one thread, not hang."""
    k = compile_func(matmul())
    k.num_threads = 2
    a, b = RNG.random((N_MM, N_MM), dtype=np.float32), RNG.random((N_MM, N_MM), dtype=np.float32)
    out = np.zeros((N_MM, N_MM), np.float32)
    k(a, b, out)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child process
        signal.alarm(20)  # a hang kills the child, failing the test instead of the run
        got = np.zeros_like(out)
        k(a, b, got)
        os._exit(0 if np.array_equal(got, out) else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


# ---------------------------------------------------------------- reduction loops as SIMD

@pytest.mark.parametrize("combine", ["sum", "max", "min"])
@pytest.mark.parametrize("cols", [3, 16, 50, 64, 128, 200, 768])  # scalar / one body / partials + tail
@pytest.mark.parametrize("kind", ["serial", "unrolled", "vectorized"])
def test_row_reduction_loop_is_vectorized(combine, cols, kind):
    """`for k: acc = acc op f(k)` with f contiguous: vector partials + a shuffle tree, the
    accumulator's initial value kept (it is combined once at the end)."""
    rows = 3
    A, O = Buffer("A", (rows, cols), "float32"), Buffer("O", (rows,), "float32")
    i, k = Var("i"), Var("k")
    x = Load(A, i * cols + k) * Const(2.0, "float32")  # an expression, not only a load
    acc = Load(O, i)
    new = {"sum": acc + x, "max": Max(acc, x), "min": Min(x, acc)}[combine]
    f = PrimFunc(f"red_{combine}_{cols}_{kind}", [A, O],
                 loop(i, rows, "serial", loop(k, cols, kind, Store(O, i, new))))
    if cols >= 4:
        assert "shufflevector" in emit_module(f)
    a = RNG.standard_normal((rows, cols)).astype(np.float32)
    out = np.full(rows, 0.5, np.float32)
    compile_func(f)(a, out)
    ref = {"sum": lambda: 0.5 + (2 * a.astype(np.float64)).sum(1),
           "max": lambda: np.maximum(0.5, 2 * a.max(1)),
           "min": lambda: np.minimum(0.5, 2 * a.min(1))}[combine]()
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


def test_reduction_loop_with_strided_source_stays_scalar():
    """A column sum (stride 8 in k) would need gathers: left to the serial loop."""
    A, O = Buffer("A", (8, 8), "float32"), Buffer("O", (8,), "float32")
    j, k = Var("j"), Var("k")
    f = PrimFunc("colsum", [A, O], loop(j, 8, "serial", loop(k, 8, "serial",
                 Store(O, j, Load(O, j) + Load(A, k * 8 + j)))))
    assert "shufflevector" not in emit_module(f)
    a = RNG.random((8, 8), dtype=np.float32)
    out = np.zeros(8, np.float32)
    compile_func(f)(a, out)
    np.testing.assert_allclose(out, a.sum(0), rtol=1e-5)


def test_division_by_lane_invariant_value_is_a_reciprocal_multiply():
    """x / s[i] in a vector loop: one scalar division per vector, no vector divide."""
    n = 64
    A, S_, O = Buffer("A", (4, n), "float32"), Buffer("S", (4,), "float32"), Buffer("O", (4, n), "float32")
    i, j = Var("i"), Var("j")
    body = Store(O, i * n + j, Load(A, i * n + j) / Load(S_, i))
    k = compile_func(PrimFunc("divrow", [A, S_, O], loop(i, 4, "serial", loop(j, n, "vectorized", body))))
    assert "vdivps" not in k.assembly
    a = RNG.random((4, n), dtype=np.float32)
    s = RNG.random(4, dtype=np.float32) + 0.5
    out = np.zeros((4, n), np.float32)
    k(a, s, out)
    np.testing.assert_allclose(out, a / s[:, None], rtol=1e-6)


def _openmp_run(code: str, policy: str | None) -> tuple[str, list[str]]:
    """`code` run in a fresh interpreter under OMP_WAIT_POLICY=`policy` (unset: None) with
    OMP_DISPLAY_ENV=verbose: its stdout and the GOMP_SPINCOUNT line of each libgomp that
    loaded, in load order."""
    import subprocess
    import sys
    env = dict(os.environ, OMP_DISPLAY_ENV="verbose")
    env.pop("OMP_WAIT_POLICY", None)
    if policy:
        env["OMP_WAIT_POLICY"] = policy
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout, [line for line in (out.stdout + out.stderr).splitlines() if "GOMP_SPINCOUNT" in line]


@pytest.mark.skipif(not have_openmp(), reason="libgomp not available")
def test_kernels_openmp_ignores_a_passive_wait_policy():
    """`tlmir tune | eval | iterate` set OMP_WAIT_POLICY=PASSIVE for torch; tlmir's libgomp
    loads without it (its threads may spin before sleeping: GOMP_SPINCOUNT stays at its
    default, where PASSIVE makes it 0 and every kernel call waits for threads to wake)."""
    stdout, spin = _openmp_run("import os; from tlmir.codegen_cpu import have_openmp; have_openmp(); "
                               "print('policy', os.environ['OMP_WAIT_POLICY'])", "PASSIVE")
    assert "policy PASSIVE" in stdout          # the process's own setting is restored
    assert spin and "'0'" not in spin[0], spin


@pytest.mark.skipif(not have_openmp(), reason="libgomp not available")
@pytest.mark.parametrize("policy", ["PASSIVE", None])
def test_kernels_openmp_beside_torchs_libgomp(policy):
    """torch's wheel ships a libgomp that the loader hands back by name: loaded first under
    PASSIVE (as `make demo` and `tlmir tune` load it), kernels get a private copy with the
    default spin count (at 2 threads ResNet's 1024x14x14 add+ReLU timed 106 us on the
    sleeping pool, 20 us as measured); with no policy set they share torch's pool."""
    stdout, spin = _openmp_run("import torch; torch.ones(4).sum(); "
                               "from tlmir.codegen_cpu import have_openmp; print('openmp', have_openmp())",
                               policy)
    assert "openmp True" in stdout
    if policy:
        assert len(spin) == 2 and "'0'" in spin[0] and "'0'" not in spin[1], spin
    else:
        assert len(spin) == 1 and "'0'" not in spin[0], spin
