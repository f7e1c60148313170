"""The reference interpreter on hand-built loop programs (independent of lowering)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from tlmir.errors import ArgumentError, BuildError
from tlmir.ir import expr as E
from tlmir.ir import stmt as S
from tlmir.runtime.interpreter import (BarrierDivergenceError, OutOfBoundsError,
                                       compile_interpreted, interpreter_source, run_interpreted)


def V(name: str) -> E.Var:
    return E.Var(name)


def loop(v: E.Var, n: int, body: S.Stmt, kind: str = "serial", tag: str | None = None) -> S.For:
    return S.For(v, E.const(0), E.const(n), kind, body, tag)


def tloop(v: E.Var, n: int, tag: str, body: S.Stmt) -> S.For:
    return loop(v, n, body, "thread_binding", tag)


def ld(buf: S.Buffer, idx) -> E.Load:
    return E.Load(buf, E.const(idx))


def st(buf: S.Buffer, idx, value) -> S.Store:
    return S.Store(buf, E.const(idx), E.const(value, buf.dtype))


def rand(*shape, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype("float32")


def test_matmul_nest_all_loop_kinds():
    M, N, K = 5, 6, 7
    A, B, C = (S.Buffer("A", (M, K), "float32"), S.Buffer("B", (K, N), "float32"),
               S.Buffer("C", (M, N), "float32"))
    i, j, k = V("i"), V("j"), V("k")
    c = i * N + j
    body = loop(i, M, loop(j, N, S.seq(
        st(C, c, 0.0),
        loop(k, K, st(C, c, ld(C, c) + ld(A, i * K + k) * ld(B, k * N + j)), "unrolled"),
    ), "vectorized"), "parallel")
    f = S.PrimFunc("matmul", [A, B, C], body)
    a, b = rand(M, K), rand(K, N, seed=1)
    out = np.full((M, N), np.nan, "float32")
    run_interpreted(f, a, b, out)
    np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-6)
    assert "def _kernel(b_A, b_B, b_C):" in interpreter_source(f)


def test_reduction_with_local_allocate_is_fresh_each_time():
    M, N = 4, 9
    A, out, out2 = (S.Buffer("A", (M, N), "float32"), S.Buffer("out", (M,), "float32"),
                    S.Buffer("out2", (M,), "float32"))
    acc = S.Buffer("acc", (1,), "float32", "local")
    i, k, k2 = V("i"), V("k"), V("k")  # two distinct vars named k
    body = loop(i, M, S.Allocate(acc, S.seq(
        # no explicit init: the allocation itself must be zero for every i
        loop(k, N, st(acc, 0, ld(acc, 0) + ld(A, i * N + k))),
        st(out, i, ld(acc, 0)),
        loop(k2, N, st(acc, 0, E.Max(ld(acc, 0), ld(A, i * N + k2)))),
        st(out2, i, ld(acc, 0)),
    )))
    f = S.PrimFunc("rowsum", [A, out, out2], body)
    a = rand(M, N)
    o, o2 = np.zeros(M, "float32"), np.zeros(M, "float32")
    run_interpreted(f, a, o, o2)
    np.testing.assert_allclose(o, a.sum(1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(o2, np.maximum(a.max(1), a.sum(1)), rtol=1e-5, atol=1e-6)


def test_padded_select_never_reads_out_of_bounds():
    N = 6
    A, out = S.Buffer("A", (N,), "float32"), S.Buffer("out", (N + 2,), "float32")
    i = V("i")
    shifted = E.Select(E.And(i >= 1, i < N + 1), ld(A, i - 1), E.const(0.0))
    f = S.PrimFunc("pad", [A, out], loop(i, N + 2, st(out, i, shifted)))
    a, o = rand(N), np.full(N + 2, 7.0, "float32")
    run_interpreted(f, a, o)  # i = 0 would read A[-1]: must not happen
    np.testing.assert_array_equal(o, np.concatenate([[0.0], a, [0.0]]).astype("float32"))


def test_out_of_bounds_access_raises():
    A, out = S.Buffer("A", (4,), "float32"), S.Buffer("out", (4,), "float32")
    i = V("i")
    f = S.PrimFunc("bad", [A, out], loop(i, 4, st(out, i, ld(A, i - 1))))
    with pytest.raises(OutOfBoundsError, match=r"A\[-1\]"):
        run_interpreted(f, rand(4), np.zeros(4, "float32"))
    g = S.PrimFunc("bad_store", [A, out], loop(i, 5, st(out, i, ld(A, 0))))
    with pytest.raises(OutOfBoundsError, match=r"out\[4\]"):
        run_interpreted(g, rand(4), np.zeros(4, "float32"))


def _reverse_blocks(with_barrier: bool, shared_inside: bool) -> S.PrimFunc:
    blocks, T = 3, 8
    A, out = S.Buffer("A", (blocks * T,), "float32"), S.Buffer("out", (blocks * T,), "float32")
    sh = S.Buffer("S", (T,), "float32", "shared")
    bx, tx = V("bx"), V("tx")
    phases = [st(sh, tx, ld(A, bx * T + tx)), S.Barrier() if with_barrier else None,
              st(out, bx * T + tx, ld(sh, T - 1 - tx))]
    if shared_inside:  # lowering may put the shared Allocate under the thread loop
        body = tloop(tx, T, "threadIdx.x", S.Allocate(sh, S.seq(*phases)))
    else:
        body = S.Allocate(sh, tloop(tx, T, "threadIdx.x", S.seq(*phases)))
    return S.PrimFunc("rev", [A, out], tloop(bx, blocks, "blockIdx.x", body))


@pytest.mark.parametrize("shared_inside", [False, True])
def test_barrier_shared_memory_copy_then_use(shared_inside):
    a = rand(24)
    expect = a.reshape(3, 8)[:, ::-1].reshape(-1)
    out = np.zeros(24, "float32")
    run_interpreted(_reverse_blocks(True, shared_inside), a, out)
    np.testing.assert_array_equal(out, expect)
    # without the barrier the sequential threads read shared memory not yet written
    out2 = np.zeros(24, "float32")
    run_interpreted(_reverse_blocks(False, shared_inside), a, out2)
    assert not np.array_equal(out2, expect)


def test_gpu_tiled_matmul_barriers_inside_serial_loop():
    T, M, N, K = 4, 8, 8, 12
    A, B, C = (S.Buffer("A", (M, K), "float32"), S.Buffer("B", (K, N), "float32"),
               S.Buffer("C", (M, N), "float32"))
    As, Bs = S.Buffer("As", (T, T), "float32", "shared"), S.Buffer("Bs", (T, T), "float32", "shared")
    acc = S.Buffer("acc", (1,), "float32", "local")
    by, bx, ty, tx, ko, ki = (V(n) for n in ("by", "bx", "ty", "tx", "ko", "ki"))
    tile = S.seq(
        st(As, ty * T + tx, ld(A, (by * T + ty) * K + ko * T + tx)),
        st(Bs, ty * T + tx, ld(B, (ko * T + ty) * N + bx * T + tx)),
        S.Barrier(),
        loop(ki, T, st(acc, 0, ld(acc, 0) + ld(As, ty * T + ki) * ld(Bs, ki * T + tx))),
        S.Barrier())
    per_thread = S.Allocate(acc, S.seq(
        st(acc, 0, 0.0), loop(ko, K // T, tile), st(C, (by * T + ty) * N + bx * T + tx, ld(acc, 0))))
    body = tloop(by, M // T, "blockIdx.y", tloop(bx, N // T, "blockIdx.x", S.Allocate(As, S.Allocate(
        Bs, tloop(ty, T, "threadIdx.y", tloop(tx, T, "threadIdx.x", per_thread))))))
    f = S.PrimFunc("mm_gpu", [A, B, C], body)
    a, b = rand(M, K), rand(K, N, seed=2)
    c = np.zeros((M, N), "float32")
    run_interpreted(f, a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-6)
    assert "_run_threads" in interpreter_source(f)


def test_divergent_barrier_is_reported():
    out = S.Buffer("out", (4,), "float32")
    tx = V("tx")
    body = tloop(tx, 4, "threadIdx.x", S.seq(
        S.IfThenElse(tx < 2, S.Barrier()), st(out, tx, 1.0)))
    with pytest.raises(BarrierDivergenceError):
        run_interpreted(S.PrimFunc("div", [out], body), np.zeros(4, "float32"))


def test_deep_nests_are_outlined():
    out = S.Buffer("out", (8,), "float32")
    vs = [V(f"l{d}") for d in range(30)]
    ext = [2 if d in (3, 17, 28) else 1 for d in range(30)]
    idx = vs[3] * 4 + vs[17] * 2 + vs[28]
    body: S.Stmt = st(out, idx, ld(out, idx) + 1.0)
    for v, n in reversed(list(zip(vs, ext))):
        body = loop(v, n, body)
    o = np.zeros(8, "float32")
    run_interpreted(S.PrimFunc("deep", [out], body), o)
    np.testing.assert_array_equal(o, np.ones(8))

    # the same with a barrier deep inside a thread block (outlined generator)
    sh = S.Buffer("sh", (4,), "float32", "shared")
    tx = V("tx")
    inner: S.Stmt = S.seq(st(sh, tx, tx * 1.0), S.Barrier(), st(out, tx, ld(sh, 3 - tx)))
    for v in reversed(vs[:20]):
        inner = loop(v, 1, inner)
    o = np.zeros(8, "float32")
    run_interpreted(S.PrimFunc("deep_gpu", [out], S.Allocate(sh, tloop(tx, 4, "threadIdx.x", inner))), o)
    np.testing.assert_array_equal(o[:4], [3, 2, 1, 0])


def test_math_casts_and_integer_semantics():
    n = 8
    x = np.linspace(-2.0, 2.0, n).astype("float32")
    X = S.Buffer("X", (n,), "float32")
    fns = {
        "exp": (lambda e: E.Call("exp", [e], "float32"), np.exp),
        "tanh": (lambda e: E.Call("tanh", [e], "float32"), np.tanh),
        "erf": (lambda e: E.Call("erf", [e], "float32"), np.vectorize(math.erf)),
        "sigmoid": (lambda e: E.Call("sigmoid", [e], "float32"), lambda v: 1 / (1 + np.exp(-v))),
        "abs": (lambda e: E.Call("abs", [e], "float32"), np.abs),
        "log": (lambda e: E.Call("log", [E.Call("abs", [e], "float32") + 0.5], "float32"),
                lambda v: np.log(np.abs(v) + 0.5)),
        "rsqrt": (lambda e: E.Call("rsqrt", [e * e + 1.0], "float32"), lambda v: 1 / np.sqrt(v * v + 1)),
        "sqrt": (lambda e: E.Call("sqrt", [e * e], "float32"), np.abs),
        "div": (lambda e: E.Div(e, E.const(4.0)), lambda v: v / 4),
        "min": (lambda e: E.Min(e, E.const(0.5)), lambda v: np.minimum(v, 0.5)),
    }
    outs = {k: S.Buffer(k, (n,), "float32") for k in fns}
    I = S.Buffer("I", (n,), "int32")
    i = V("i")
    xi = ld(X, i)
    stores = [st(outs[k], i, f(xi)) for k, (f, _) in fns.items()]
    # float -> int truncates toward zero; // and % floor (Python / TE semantics)
    stores.append(st(I, i, E.Cast("int32", xi * 3.0) * 100 + (i - 4) // 3 * 10 + (i - 4) % 3))
    f = S.PrimFunc("math", [X] + list(outs.values()) + [I], loop(i, n, S.seq(*stores)))
    arrays = {k: np.zeros(n, "float32") for k in fns}
    iv = np.zeros(n, "int32")
    run_interpreted(f, x, *arrays.values(), iv)
    for k, (_, ref) in fns.items():
        np.testing.assert_allclose(arrays[k], ref(x.astype(np.float64)), rtol=1e-6, atol=1e-6,
                                   err_msg=k)
    ii = np.arange(n) - 4
    np.testing.assert_array_equal(iv, np.trunc(x * 3.0).astype(int) * 100 + ii // 3 * 10 + ii % 3)


def test_ieee_edge_cases_do_not_raise():
    X, out = S.Buffer("X", (3,), "float32"), S.Buffer("out", (4, 3), "float32")
    i = V("i")
    xi = ld(X, i)
    f = S.PrimFunc("edge", [X, out], loop(i, 3, S.seq(
        st(out, i, E.Call("exp", [xi * 1000.0], "float32")),
        st(out, i + 3, E.Call("log", [xi], "float32")),
        st(out, i + 6, E.Div(E.const(1.0), xi)),
        st(out, i + 9, E.Call("sigmoid", [xi * -1000.0], "float32")))))
    o = np.zeros((4, 3), "float32")
    with np.errstate(all="ignore"):
        x = np.array([1.0, 0.0, -1.0], "float32")
        run_interpreted(f, x, o)
        np.testing.assert_array_equal(o[0], [np.inf, 1.0, 0.0])
        np.testing.assert_array_equal(o[1][:2], [0.0, -np.inf])
        assert np.isnan(o[1][2])
        np.testing.assert_array_equal(o[2], [1.0, np.inf, -1.0])
        np.testing.assert_array_equal(o[3], [0.0, 0.5, 1.0])


def test_if_then_else_stmt_and_noncontiguous_output():
    n = 6
    X = S.Buffer("X", (n,), "float32")
    out = S.Buffer("out", (2, 3), "float32")
    i = V("i")
    f = S.PrimFunc("ite", [X, out], loop(i, n, S.IfThenElse(
        ld(X, i) < 0.0, st(out, i, 0.0 - ld(X, i)), st(out, i, ld(X, i) * 2.0))))
    x = rand(n)
    o = np.zeros((3, 2), "float32").T  # a Fortran-ordered view: written back correctly
    run = compile_interpreted(f)
    run(x, o)
    np.testing.assert_allclose(o.reshape(-1), np.where(x < 0, -x, 2 * x), rtol=1e-6)


def test_argument_and_ir_errors():
    X = S.Buffer("X", (4,), "float32")
    i, j = V("i"), V("j")
    f = S.PrimFunc("f", [X], loop(i, 4, st(X, i, ld(X, i) + 1.0)))
    with pytest.raises(ArgumentError, match="expected 1 arrays"):
        run_interpreted(f)
    with pytest.raises(ArgumentError, match="float32"):
        run_interpreted(f, np.zeros(4))
    with pytest.raises(ArgumentError, match="4 elements"):
        run_interpreted(f, np.zeros(5, "float32"))
    with pytest.raises(BuildError, match="'j'"):
        interpreter_source(S.PrimFunc("g", [X], loop(i, 4, st(X, j, 1.0))))
    tmp = S.Buffer("tmp", (4,), "float32", "local")
    with pytest.raises(BuildError, match="tmp"):
        interpreter_source(S.PrimFunc("h", [X], loop(i, 4, st(tmp, i, 1.0))))
