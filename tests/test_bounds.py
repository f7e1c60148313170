"""Every read of a definition stays inside its tensor (ir/bounds.py), and a built kernel
refuses an output that shares memory with another argument unless built in place."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tlmir
from tlmir import te
from tlmir.errors import ArgumentError, BuildError, DefinitionError


def _shifted(n, m, di, dj, guard):
    A = te.placeholder((n, m), name="A")

    def body(i, j):
        read = A[i + di, j + dj]
        if not guard:
            return read
        return te.if_then_else(te.all(i + di >= 0, i + di < n, j + dj >= 0, j + dj < m), read, 0.0)
    return A, body


@settings(max_examples=25, deadline=None)
@given(n=st.integers(2, 9), m=st.integers(2, 9), di=st.integers(-3, 3), dj=st.integers(-3, 3),
       guard=st.booleans())
def test_random_offsets_never_reach_codegen_out_of_bounds(n, m, di, dj, guard):
    A, body = _shifted(n, m, di, dj, guard)
    if not guard and (di, dj) != (0, 0):
        with pytest.raises(DefinitionError, match=r"the read A\[.*\] can leave A: axis [01] index"):
            te.compute((n, m), body, name="B")
        return
    B = te.compute((n, m), body, name="B")
    f = tlmir.build(tlmir.create_schedule([B]), [A, B])
    a = np.random.default_rng(0).random((n, m), dtype=np.float32)
    out = np.zeros((n, m), np.float32)
    f(a, out)
    want = np.zeros((n, m), np.float32)
    for i in range(n):
        for j in range(m):
            if 0 <= i + di < n and 0 <= j + dj < m:
                want[i, j] = a[i + di, j + dj]
    np.testing.assert_array_equal(out, want)


def test_the_error_names_stage_tensor_axis_and_range():
    A = te.placeholder((8, 4), name="A")
    with pytest.raises(DefinitionError, match=r"compute 'B': the read A\[9, j\] can leave A: axis 0 index 9 "
                                              r"ranges over \[9, 9\], A has 8 there"):
        te.compute((8, 4), lambda i, j: A[9, j], name="B")
    k = te.reduce_axis(5, "k")
    with pytest.raises(DefinitionError, match=r"axis 1 index k ranges over \[0, 4\], A has 4"):
        te.compute((8,), lambda i: te.sum(A[i, k], axis=k), name="S")
    # a guard that does not cover the read is no guard
    with pytest.raises(DefinitionError, match=r"index i - 1 ranges over \[-1, 6\]"):
        te.compute((8, 4), lambda i, j: te.if_then_else(i >= 0, A[i - 1, j], 0.0), name="B")


def test_guards_and_where_clauses_that_cover_the_read_pass():
    A = te.placeholder((8, 4), name="A")
    k = te.reduce_axis(6, "k")
    S = te.compute((8,), lambda i: te.sum(A[i, k], axis=k, where=k < 4), name="S")
    P = te.compute((10, 4), lambda i, j: te.if_then_else(te.all(i >= 1, i < 9), A[i - 1, j], 0.0), name="P")
    f = tlmir.build(tlmir.create_schedule([S]), [A, S])
    a = np.random.default_rng(1).random((8, 4), dtype=np.float32)
    s = np.zeros(8, np.float32)
    f(a, s)
    np.testing.assert_allclose(s, a.sum(1), rtol=1e-5)
    assert P.shape == (10, 4)


def test_an_output_sharing_memory_with_an_input_is_refused():
    A = te.placeholder((16,), name="A")
    B = te.compute((16,), lambda i: A[i] * 2.0, name="B")
    f = tlmir.build(tlmir.create_schedule([B]), [A, B])
    a = np.ones(16, np.float32)
    with pytest.raises(ArgumentError, match=r"argument 1 \(B\) is written and shares memory with argument 0 "
                                            r"\(A\); pass separate arrays, or build with inplace=\{1: 0\}"):
        f(a, a)
    buf = np.ones(32, np.float32)
    with pytest.raises(ArgumentError, match="shares memory"):
        f(buf[:16], buf[8:24])
    out = np.zeros(16, np.float32)
    f(a, out)
    np.testing.assert_array_equal(out, 2 * a)


@pytest.mark.parametrize("backend", ["cpu", "interp"])
def test_an_element_wise_output_built_in_place_overwrites_its_input(backend):
    A = te.placeholder((4, 32), name="A")
    b = te.placeholder((32,), name="b")
    B = te.compute((4, 32), lambda i, j: A[i, j] * 2.0 + b[j], name="B")
    s = tlmir.create_schedule([B])
    jo, ji = s[B].split(B.op.axis[1], factor=8)
    s[B].vectorize(ji)
    s[B].parallel(B.op.axis[0])
    f = tlmir.build(s, [A, b, B], inplace={2: 0}, backend=backend)
    rng = np.random.default_rng(0)
    a, bias = rng.random((4, 32), dtype=np.float32), rng.random(32, dtype=np.float32)
    want = a * 2.0 + bias
    f(a, bias, a)
    np.testing.assert_allclose(a, want, rtol=1e-6)
    with pytest.raises(ArgumentError, match=r"argument 2 \(B\) is built in place of argument 0 \(A\): "
                                            r"pass the same array for both"):
        f(a, bias, np.zeros_like(a))
    with pytest.raises(ArgumentError, match=r"argument 2 \(B\) is written and shares memory with argument 1"):
        f(a, a[0], a)


def test_in_place_is_refused_where_an_element_is_read_after_it_is_overwritten():
    A = te.placeholder((8, 8), name="A")
    k = te.reduce_axis(8, name="k")
    cases = {
        "A is read at other elements": te.compute((8, 8), lambda i, j: A[j, i], name="T"),
        "written by 2 statements": te.compute((8, 8), lambda i, j: te.sum(A[i, k], axis=k), name="R"),
    }
    for why, out in cases.items():
        with pytest.raises(BuildError, match=f"{out.op.name} cannot overwrite A in place: .*{why}"):
            tlmir.build(tlmir.create_schedule([out]), [A, out], inplace={1: 0})
    C = te.compute((8, 4), lambda i, j: A[i, j], name="C")
    with pytest.raises(BuildError, match=r"C is float32\[8, 4\], A is float32\[8, 8\]"):
        tlmir.build(tlmir.create_schedule([C]), [A, C], inplace={1: 0})
    with pytest.raises(BuildError, match=r"argument 0 \(A\) must be an output"):
        tlmir.build(tlmir.create_schedule([C]), [A, C], inplace={0: 1})
