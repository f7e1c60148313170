"""Transposing copies (`dst[a, b] = src[b, a]`) emitted as register-blocked transposes."""
import random

import numpy as np
import pytest

from tlmir import ops
from tlmir.codegen_cpu import compile_func
from tlmir.codegen_cpu.llvm_ir import emit_module
from tlmir.ir.expr import Const, Load, Var
from tlmir.ir.stmt import Buffer, For, PrimFunc, Store
from tlmir.runtime.target import HardwareParams
from tlmir.schedule.decider import RandomDecider
from tlmir.schedule.lower import lower
from tlmir.schedule.space import SearchSpace

RNG = np.random.default_rng(0)


def c(v: int) -> Const:
    return Const(v, "int64")


def transpose_func(rows: int, cols: int, dtype: str, kinds=("serial", "serial"), row_stride=None,
                   offset: int = 0) -> PrimFunc:
    """O[a * row_stride + b + offset] = A[b, a] for a < cols, b < rows (A: rows x cols)."""
    rs = rows if row_stride is None else row_stride
    A, O = Buffer("A", (rows, cols), dtype), Buffer("O", (cols * rs + offset + rows,), dtype)
    a, b = Var("a"), Var("b")
    body = Store(O, a * rs + b + offset, Load(A, b * cols + a))
    nest = For(a, c(0), c(cols), kinds[0], For(b, c(0), c(rows), kinds[1], body))
    return PrimFunc(f"tr_{rows}_{cols}_{dtype}_{'_'.join(kinds)}_{rs}_{offset}", [A, O], nest)


def run(f: PrimFunc, rows: int, cols: int, dtype: str, size: int) -> np.ndarray:
    a = (RNG.standard_normal((rows, cols)) * 100).astype(dtype)
    out = np.full(size, -7, dtype)
    compile_func(f)(a, out)
    return a, out


@pytest.mark.parametrize("rows, cols", [(16, 16), (32, 48), (37, 50), (17, 64), (64, 20), (15, 40)])
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32"])
def test_transposing_copy_matches_numpy(rows, cols, dtype):
    """Whole blocks, edge columns, edge rows and nests too small to block all copy right."""
    f = transpose_func(rows, cols, dtype)
    blocked = rows >= 16 and cols >= 16
    assert ("shufflevector" in emit_module(f)) == blocked
    a, out = run(f, rows, cols, dtype, f.args[1].shape[0])
    np.testing.assert_array_equal(out[:rows * cols].reshape(cols, rows), a.T)
    assert (out[rows * cols:] == -7).all()  # nothing written past the copy


@pytest.mark.parametrize("kinds", [("serial", "vectorized"), ("unrolled", "serial"), ("serial", "unrolled")])
def test_any_loop_kind_is_blocked(kinds):
    f = transpose_func(32, 32, "float32", kinds)
    ir = emit_module(f)
    assert "shufflevector" in ir and "gather" not in ir
    a, out = run(f, 32, 32, "float32", f.args[1].shape[0])
    np.testing.assert_array_equal(out[:1024].reshape(32, 32), a.T)


@pytest.mark.parametrize("lanes", [4, 8, 16])
def test_block_follows_the_vector_width(lanes):
    ir = emit_module(transpose_func(32, 32, "float32"), vector_lanes_hint=lanes)
    assert f"<{lanes} x float>" in ir and "shufflevector" in ir


@pytest.mark.parametrize("rows, cols", [(32, 32), (50, 37), (20, 70)])
@pytest.mark.parametrize("threads", [1, 2])
def test_parallel_outer_loop_blocks_each_threads_rows(rows, cols, threads):
    """A parallel copy (a pack computed at the root) is blocked inside each thread's share
    of the outer loop, whatever the share's length."""
    f = transpose_func(rows, cols, "float32", ("parallel", "serial"))
    assert "shufflevector" in emit_module(f)
    a = RNG.standard_normal((rows, cols)).astype(np.float32)
    out = np.full(f.args[1].shape[0], -7, np.float32)
    k = compile_func(f)
    k.num_threads = threads
    k(a, out)
    np.testing.assert_array_equal(out[:rows * cols].reshape(cols, rows), a.T)
    assert (out[rows * cols:] == -7).all()


def test_overlapping_rows_stay_in_program_order():
    """Rows of dst 4 apart but 16 long overlap: the last write must win, as in the serial
    nest, so the nest is not blocked."""
    f = transpose_func(16, 16, "float32", row_stride=4)
    assert "shufflevector" not in emit_module(f)
    a, out = run(f, 16, 16, "float32", f.args[1].shape[0])
    ref = np.full(out.shape, -7, np.float32)
    for i in range(16):
        for j in range(16):
            ref[i * 4 + j] = a[j, i]
    np.testing.assert_array_equal(out, ref)


def test_padded_rows_and_an_offset():
    f = transpose_func(20, 33, "float32", row_stride=24, offset=5)
    assert "shufflevector" in emit_module(f)
    a, out = run(f, 20, 33, "float32", f.args[1].shape[0])
    got = out[5:5 + 33 * 24].reshape(33, 24)
    np.testing.assert_array_equal(got[:, :20], a.T)
    assert (got[:, 20:] == -7).all() and (out[:5] == -7).all()


def test_dense_weight_pack_is_a_blocked_transpose():
    """The packed N x K weight of the dense sketches: no question splits the transposed copy
    (so its loops stay one nest), and computed at the root the copy is blocked shuffles."""
    op = ops.dense(32, 96, 64, bias=True, act="gelu")
    space = SearchSpace(op.outputs, HardwareParams(cores=2))
    packed = [i for i, s in enumerate(space.sketches) if any(r[1] == "pack" for r in s.rules)]
    rng = random.Random(0)
    found = 0
    for _ in range(200):
        sch, trace = space.apply(rng.choice(packed), RandomDecider(rng))
        answers = trace.answers()
        assert not any(q.startswith(("tile W.pack", "vec W.pack")) for q in answers)
        if answers["at W.pack"] != "root":
            continue
        func = lower(sch, op.args)
        assert "shufflevector" in emit_module(func)
        ins = op.random_inputs(0)
        outs = [np.zeros(t.shape, t.dtype) for t in op.outputs]
        compile_func(func)(*ins, *outs)
        np.testing.assert_allclose(outs[0], op.reference(*ins)[0], rtol=1e-4, atol=1e-4)
        found += 1
        if found == 3:
            break
    assert found == 3
