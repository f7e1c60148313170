"""Schedule primitives, lowering, and the errors bad schedules produce."""
import numpy as np
import pytest

import tlmir
from tlmir import te
from tlmir.errors import ArgumentError, LowerError, ScheduleError, ShapeError, TlmirError
from tlmir.schedule import replay, steps_from_json, steps_to_json


def matmul(M=64, N=48, K=32):
    A = te.placeholder((M, K), "float32", name="A")
    B = te.placeholder((K, N), "float32", name="B")
    k = te.reduce_axis(K, name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C


def run(s, args, arrays):
    f = tlmir.build(s, args)
    f(*arrays)
    return f


def mm_arrays(M, N, K, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((M, K)).astype("float32")
    b = rng.standard_normal((K, N)).astype("float32")
    return a, b, np.zeros((M, N), "float32")


def test_issue_example_schedule_matches_numpy():
    M = N = K = 128
    A, B, C = matmul(M, N, K)
    s = tlmir.create_schedule(C)
    io, ii = s[C].split(C.op.axis[0], factor=32)
    jo, ji = s[C].split(C.op.axis[1], factor=32)
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=4)
    s[C].reorder(io, jo, ko, ii, ki, ji)
    s[C].vectorize(ji)
    s[C].parallel(io)
    text = str(tlmir.lower(s, [A, B, C]))
    assert "for i.outer in range(4):  # parallel" in text
    assert "vectorized" in text
    a, b, c = mm_arrays(M, N, K)
    f = run(s, [A, B, C], (a, b, c))
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
    t = f.benchmark(a, b, c)
    assert 0 < t.min <= t.median


def test_non_divisible_split_gets_guard_and_is_correct():
    A, B, C = matmul(30, 50, 17)
    s = tlmir.create_schedule(C)
    io, ii = s[C].split(C.op.axis[0], factor=8)
    jo, ji = s[C].split(C.op.axis[1], factor=16)
    ko, ki = s[C].split(C.op.reduce_axis[0], nparts=3)
    s[C].reorder(io, jo, ko, ki, ii, ji)
    text = str(tlmir.lower(s, [A, B, C]))
    assert "if " in text
    a, b, c = mm_arrays(30, 50, 17)
    run(s, [A, B, C], (a, b, c))
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def test_divisible_split_has_no_guard():
    A, B, C = matmul(64, 64, 64)
    s = tlmir.create_schedule(C)
    s[C].split(C.op.axis[0], factor=16)
    assert "if " not in str(tlmir.lower(s, [A, B, C]))


def test_cache_write_compute_at_and_fuse():
    A, B, C = matmul(64, 96, 40)
    s = tlmir.create_schedule(C)
    CL = s.cache_write(C, "local")
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 8, 32)
    f = s[C].fuse(io, jo)
    s[C].parallel(f)
    s[C].vectorize(ji)
    s[CL].compute_at(s[C], f)
    i, j = CL.op.axis
    (k,) = CL.op.reduce_axis
    s[CL].reorder(k, i, j)
    s[CL].unroll(i)
    s[CL].vectorize(j)
    text = str(tlmir.lower(s, [A, B, C]))
    assert "C.local = allocate([8, 32], float32, local)" in text
    a, b, c = mm_arrays(64, 96, 40)
    run(s, [A, B, C], (a, b, c))
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def test_cache_read_packs_operand():
    A, B, C = matmul(32, 64, 24)
    s = tlmir.create_schedule(C)
    BB = s.cache_read(B, "global", [C])
    jo, ji = s[C].split(C.op.axis[1], factor=16)
    s[C].reorder(jo, C.op.axis[0], C.op.reduce_axis[0], ji)
    s[BB].compute_at(s[C], jo)
    s[C].vectorize(ji)
    text = str(tlmir.lower(s, [A, B, C]))
    assert "B.global = allocate([24, 16]" in text
    a, b, c = mm_arrays(32, 64, 24)
    run(s, [A, B, C], (a, b, c))
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def test_rfactor():
    A, B, C = matmul(8, 8, 100)
    s = tlmir.create_schedule(C)
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=16)
    CF = s.rfactor(C, ki)
    assert CF.shape == (16, 8, 8)
    a, b, c = mm_arrays(8, 8, 100)
    run(s, [A, B, C], (a, b, c))
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def test_inline_and_compute_at_chain():
    n = 64
    X = te.placeholder((n, n), name="X")
    Y = te.compute((n, n), lambda i, j: X[i, j] * 2.0, name="Y")
    Z = te.compute((n, n), lambda i, j: te.exp(Y[i, j]) + 1.0, name="Z")
    k = te.reduce_axis(3, name="k")
    W = te.compute((n, n - 2), lambda i, j: te.sum(Z[i, j + k], axis=k), name="W")
    s = tlmir.create_schedule(W)
    s[Y].compute_inline()
    jo, ji = s[W].split(W.op.axis[1], factor=8)
    s[Z].compute_at(s[W], jo)
    text = str(tlmir.lower(s, [X, W]))
    assert "Z = allocate([1, 10]" in text  # 8 outputs + 2 halo columns
    x = np.random.default_rng(1).standard_normal((n, n)).astype("float32")
    w = np.zeros((n, n - 2), "float32")
    run(s, [X, W], (x, w))
    z = np.exp(2 * x) + 1
    np.testing.assert_allclose(w, z[:, :-2] + z[:, 1:-1] + z[:, 2:], rtol=1e-5)


def test_printed_loops_named_like_an_enclosing_loop_get_a_suffix():
    """A producer computed at a consumer's loop has loops named like the consumer's (both
    stages split `i` alike): the printout names the inner one `i.outer_1`, uses included."""
    n = 32
    X = te.placeholder((n, n), name="X")
    Y = te.compute((n, n), lambda i, j: X[i, j] * 2.0, name="Y")
    Z = te.compute((n, n), lambda i, j: Y[i, j] + 1.0, name="Z")
    s = tlmir.create_schedule(Z)
    zo, _ = s[Z].split(Z.op.axis[0], factor=8)
    s[Y].split(Y.op.axis[0], factor=4)
    s[Y].compute_at(s[Z], zo)
    lines = [ln.strip() for ln in str(tlmir.lower(s, [X, Z])).splitlines()]
    assert "for i.outer in range(4):" in lines and "for i.outer_1 in range(2):" in lines
    assert ("Y[i.outer_1 * 128 + i.inner * 32 + j] = X[i.outer * 256 + i.outer_1 * 128 + i.inner * 32 + j] * 2.0"
            in lines)
    assert lines.count("for i.inner in range(4):") == 1 and lines.count("for i.inner in range(8):") == 1


def test_history_prints_serialises_and_replays():
    A, B, C = matmul()
    s = tlmir.create_schedule(C)
    CL = s.cache_write(C, "local")
    io, ii = s[C].split(C.op.axis[0], factor=16)
    s[C].parallel(io)
    s[CL].compute_at(s[C], io)
    s[CL].pragma(CL.op.axis[0], "auto_unroll_max_step", 16)
    text = steps_to_json(s.history)
    assert "s['C'].split('i', factor=16)" in [str(st) for st in s.history]
    assert "s['C'].split('i', factor=16)" in str(s.history).splitlines()  # print(s.history): Python
    A2, B2, C2 = matmul()
    s2 = tlmir.create_schedule(C2)
    replay(s2, steps_from_json(text))
    assert str(tlmir.lower(s, [A, B, C])) == str(tlmir.lower(s2, [A2, B2, C2]))


def test_printed_history_runs_as_python():
    """print(s.history) names stages and axes; the schedule takes the names, so the printout
    pasted onto a fresh schedule rebuilds the same program."""
    A, B, C = matmul()
    s = tlmir.create_schedule(C)
    BP = s.cache_read(B, "global", [C], layout=(1, 0))
    CL = s.cache_write(C, "local")
    io, ii = s[C].split(C.op.axis[0], factor=16)
    jo, ji = s[C].split(C.op.axis[1], factor=8)
    s[C].reorder(io, jo, ii, ji)
    s[C].parallel(s[C].fuse(io, jo))
    s[C].vectorize(ji)
    s[CL].compute_at(s[C], ii)
    s[CL].unroll(CL.op.axis[0])
    s[BP].compute_root()
    printed = str(s.history)
    assert "s.cache_read('B', 'global', ['C'], layout=[1, 0])" in printed.splitlines()
    A2, B2, C2 = matmul()
    s2 = tlmir.create_schedule(C2)
    exec(printed, {"s": s2})
    assert str(s2.history) == printed
    assert str(tlmir.lower(s, [A, B, C])) == str(tlmir.lower(s2, [A2, B2, C2]))


def test_axes_and_stages_by_name():
    A, B, C = matmul(8, 8, 8)
    s = tlmir.create_schedule(C)
    ko, ki = s["C"].split("k", factor=4)
    CF = s.rfactor("C", "k.inner")
    assert s[CF].name == "C.rf" and s["C.rf"] is s[CF]
    with pytest.raises(ScheduleError, match="no stage named 'D'"):
        s["D"]
    with pytest.raises(ScheduleError, match="has 0 axes named 'x'"):
        s["C.rf"].split("x", factor=2)
    s["C.rf"].split("i", factor=2)
    with pytest.raises(ScheduleError, match="axis 'i' is not a current loop.*split or fused"):
        s[CF].vectorize("i")


# ------------------------------------------------------------------ errors

def test_error_mismatched_shapes_in_definition():
    A = te.placeholder((4, 5), name="A")
    with pytest.raises(ShapeError, match="'A' has 2 dimensions"):
        te.compute((4,), lambda i: A[i], name="B")
    with pytest.raises(ShapeError, match="shape has 2 dimensions"):
        te.compute((4, 5), lambda i: A[i, 0], name="B")


def test_error_split_of_axis_that_no_longer_exists():
    A, B, C = matmul()
    s = tlmir.create_schedule(C)
    i = C.op.axis[0]
    s[C].split(i, factor=4)
    with pytest.raises(ScheduleError, match=r"axis 'i' is not a current loop.*split or fused"):
        s[C].split(i, factor=2)


def test_vectorize_with_loops_inside_vectorizes_across_them_as_tvm_does():
    """A conv-like habit: the vectorized spatial loop sits outside the reduction; the body is
    vectorized across the inner loops (the reduction accumulates vectors)."""
    import warnings
    from tlmir.errors import LoweringWarning
    A, B, C = matmul(32, 24, 16)
    s = tlmir.create_schedule(C)
    jo, ji = s[C].split(C.op.axis[1], factor=8)
    s[C].vectorize(ji)  # default order: i, j.outer, j.inner, k
    text = str(tlmir.lower(s, [A, B, C]))
    assert text.index("for k in") < text.rindex("for j.inner in range(8):  # vectorized")  # update nest
    f = tlmir.build(s, [A, B, C])
    a, b = np.random.rand(32, 16).astype("float32"), np.random.rand(16, 24).astype("float32")
    c = np.zeros((32, 24), "float32")
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)
    # a stage computed inside the vectorized loop: it cannot move, so it runs serially (warned)
    A, B, C = matmul(16, 16, 16)
    BB = tlmir.te.compute((16, 16), lambda k, j: B[k, j] * 2.0, name="BB")
    k = tlmir.te.reduce_axis(16, "k")
    D = tlmir.te.compute((16, 16), lambda i, j: tlmir.te.sum(A[i, k] * BB[k, j], axis=k), name="D")
    s = tlmir.create_schedule(D)
    s[BB].compute_at(s[D], D.op.axis[1])
    s[D].vectorize(D.op.axis[1])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        f = tlmir.build(s, [A, B, D])
    assert any(issubclass(w.category, LoweringWarning) and "lowered serially" in str(w.message) for w in caught)
    a, b = np.random.rand(16, 16).astype("float32"), np.random.rand(16, 16).astype("float32")
    d = np.zeros((16, 16), "float32")
    f(a, b, d)
    np.testing.assert_allclose(d, a @ (2 * b), rtol=1e-5)


def test_error_vectorize_reduction_and_parallel_reduction():
    A, B, C = matmul()
    s = tlmir.create_schedule(C)
    with pytest.raises(ScheduleError, match="reduction axis"):
        s[C].parallel(C.op.reduce_axis[0])


def test_error_compute_at_cycle():
    A, B, C = matmul()
    X = te.compute(C.shape, lambda i, j: C[i, j] + 1.0, name="X")
    s = tlmir.create_schedule(X)
    with pytest.raises(ScheduleError, match="cycle"):
        s[X].compute_at(s[C], C.op.axis[0])
    with pytest.raises(ScheduleError, match="itself"):
        s[C].compute_at(s[C], C.op.axis[0])


def test_error_wrong_array_at_call_time():
    A, B, C = matmul(8, 8, 8)
    f = tlmir.build(tlmir.create_schedule(C), [A, B, C])
    a, b, c = mm_arrays(8, 8, 8)
    with pytest.raises(ArgumentError, match="B"):
        f(a, b.astype("float64"), c)
    with pytest.raises(ArgumentError, match="C"):
        f(a, b, np.zeros((8, 4), "float32"))
    with pytest.raises(ArgumentError):
        f(a, b)


def test_error_missing_args_and_unknown_target():
    A, B, C = matmul()
    s = tlmir.create_schedule(C)
    with pytest.raises(LowerError, match="'B'"):
        tlmir.lower(s, [A, C])
    with pytest.raises(LowerError, match="output tensor 'C'"):
        tlmir.lower(s, [A, B])
    with pytest.raises(TlmirError, match="unknown target"):
        tlmir.build(s, [A, B, C], target="tpu")


def test_unrolling_past_the_limit_is_refused_with_the_loop_named():
    from tlmir.runtime.target import SearchParams
    n = SearchParams.max_unroll * 256
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] + 1.0, name="B")
    s = tlmir.create_schedule([B])
    s[B].unroll(s[B].op.axis[0])
    with pytest.raises(LowerError, match=r"unroll of B\.i: \d+ iterations, over the limit"):
        tlmir.lower(s, [A, B])
    with pytest.raises(ScheduleError, match="over the limit"):
        s[B].pragma(s[B].op.axis[0], "auto_unroll_max_step", n)
    s = tlmir.create_schedule([B])  # split first: the inner loop unrolls, the result is right
    _, inner = s[B].split(s[B].op.axis[0], factor=8)
    s[B].unroll(inner)
    f = tlmir.build(s, [A, B])
    a = np.random.rand(n).astype("float32")
    b = np.zeros(n, "float32")
    f(a, b)
    np.testing.assert_allclose(b, a + 1, rtol=1e-6)
