"""GPU schedules lower to the programs a GPU runs, and the interpreter (blocks and threads
as loops, barrier-separated phases, shared and local buffers) computes what numpy does."""
import random

import numpy as np
import pytest

import tlmir
from tlmir import ops, te
from tlmir.errors import LowerError
from tlmir.ir.stmt import Allocate, Barrier, For, walk_stmt
from tlmir.runtime.interpreter import interpreter_source, run_interpreted
from tlmir.runtime.target import GPU_CLASSES
from tlmir.runtime.task import Task
from tlmir.schedule.space import SearchSpace
from tlmir.search.tune import TuneResult

from gpuutil import gpu_matmul, row_reduce


def _allocs(func) -> dict:
    return {s.buffer.name: (s.buffer.scope, s.buffer.shape) for s in walk_stmt(func.body) if isinstance(s, Allocate)}


def test_shared_tiles_span_the_block_and_local_tiles_one_thread():
    s, args = gpu_matmul()
    func = tlmir.lower(s, args)
    # block tile 8x8 (2 vthreads x 2 thread rows x 2 rows; 8 thread columns), k tile 4
    assert _allocs(func) == {"C.local": ("local", (2, 2, 1)), "A.shared": ("shared", (8, 4)),
                             "B.shared": ("shared", (4, 8))}
    tags = [s.thread_tag for s in walk_stmt(func.body) if isinstance(s, For) and s.thread_tag]
    assert "vthread" not in tags and tags.count("blockIdx.x") == 1 and tags.count("threadIdx.x") == 3
    a, b = np.random.rand(16, 8).astype("float32"), np.random.rand(8, 16).astype("float32")
    c = np.zeros((16, 16), "float32")
    run_interpreted(func, a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)
    assert "_run_threads" in interpreter_source(func)  # threads really ran phase by phase


def test_the_block_waits_before_reading_shared_memory_and_before_refilling_it():
    s, args = gpu_matmul()
    func = tlmir.lower(s, args)
    ko = next(x for x in walk_stmt(func.body) if isinstance(x, For) and isinstance(x.body, Allocate)
              and x.body.buffer.scope == "shared")
    body = ko.body.body.body.stmts  # under the two shared allocations
    kinds = [type(x).__name__ for x in body]
    assert kinds == ["For", "For", "Barrier", "For", "Barrier"]
    assert sum(isinstance(x, Barrier) for x in walk_stmt(func.body)) == 2


@pytest.mark.parametrize("ti,tj,tk,vec", [((1, 2, 4, 2), (2, 2, 2, 2), (4, 1, 2), 1),
                                          ((2, 1, 8, 1), (1, 4, 2, 2), (1, 2, 4), 4),
                                          ((4, 1, 2, 2), (2, 1, 4, 2), (8, 1, 1), 2)])
def test_other_tilings_compute_the_same(ti, tj, tk, vec):
    s, args = gpu_matmul(ti=ti, tj=tj, tk=tk, vec=vec)
    a, b = np.random.rand(16, 8).astype("float32"), np.random.rand(8, 16).astype("float32")
    c = np.zeros((16, 16), "float32")
    run_interpreted(tlmir.lower(s, args), a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)


@pytest.mark.parametrize("cols,threads,combiner", [(37, 8, "max"), (37, 5, "sum"), (4, 16, "sum"), (64, 32, "max")])
def test_a_reduction_bound_to_threads_reduces_across_them(cols, threads, combiner):
    s, args = row_reduce(3, cols, threads, combiner)
    func = tlmir.lower(s, args)
    assert _allocs(func)["B.red"] == ("shared", (min(threads, cols),))
    a = np.random.rand(3, cols).astype("float32")
    b = np.zeros(3, "float32")
    run_interpreted(func, a, b)
    np.testing.assert_allclose(b, a.max(1) if combiner == "max" else a.sum(1), rtol=1e-5)


def test_a_cross_thread_reduction_refuses_thread_bound_rows():
    s, (A, B) = row_reduce(4, 16, 8)
    s[B].bind(B.op.axis[0], "threadIdx.y")
    with pytest.raises(LowerError, match="spatial loop 'i' cannot be bound to threadIdx.y"):
        tlmir.lower(s, [A, B])


def test_a_thread_loop_inside_one_of_the_same_index_is_that_thread():
    """As on a GPU: B computed inside C's thread loop with its own loop bound to threadIdx.x
    covers one element, which only thread 0 of the eight computes (the others read B
    unwritten), so the interpreter shows the schedule wrong, as the GPU would run it."""
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: A[i] * 2.0, name="B")
    C = te.compute((8,), lambda i: B[i] + 1.0, name="C")
    s = tlmir.create_schedule(C)
    s[C].bind(C.op.axis[0], "threadIdx.x")
    s[B].compute_at(s[C], C.op.axis[0])
    s[B].bind(B.op.axis[0], "threadIdx.x")
    a, c = np.arange(1, 9, dtype="float32"), np.zeros(8, "float32")
    run_interpreted(tlmir.lower(s, [A, C]), a, c)
    np.testing.assert_array_equal(c, [3.0] + [1.0] * 7)  # not 2a + 1: threads 1-7 read B unwritten


def test_a_tuned_gpu_program_builds_for_its_target():
    task = Task.from_op(ops.matmul(16, 16, 16))
    space = SearchSpace(task.outputs, GPU_CLASSES["sm_80"])
    res = TuneResult(task, best_trace=space.sample(random.Random(0))[1], space=space)
    assert ".target sm_80" in res.build().ptx
