"""Hand-written GPU schedules (TVM's style: blocks, virtual threads, threads, shared-memory
tiles fetched cooperatively, register accumulators) used by the GPU tests."""
from __future__ import annotations

import tlmir
from tlmir import te
from tlmir.errors import DeviceError
from tlmir.runtime import gpu


def has_gpu() -> bool:
    """Whether the CUDA driver finds a GPU here (tests that need one, or its absence, skip)."""
    try:
        gpu.driver()
        return True
    except DeviceError:
        return False


def matmul_tensors(M: int, N: int, K: int):
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    k = te.reduce_axis(K, "k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C


def gpu_matmul(M=16, N=16, K=8, ti=(2, 2, 2, 2), tj=(2, 1, 8, 1), tk=(2, 2, 2), vec=2):
    """C = A @ B: each of `ti` / `tj` splits an output axis into (blocks, virtual threads,
    threads, per-thread tile); `tk` splits k into (shared-memory tiles, steps, inner)."""
    A, B, C = matmul_tensors(M, N, K)
    s = tlmir.create_schedule(C)
    CL = s.cache_write(C, "local")
    AS = s.cache_read(A, "shared", [CL])
    BS = s.cache_read(B, "shared", [CL])
    i, j = C.op.axis
    ii = _split(s[C], i, ti)
    jj = _split(s[C], j, tj)
    s[C].reorder(*[x for pair in zip(ii, jj) for x in pair])
    s[C].bind(s[C].fuse(ii[0], jj[0]), "blockIdx.x")
    s[C].bind(s[C].fuse(ii[1], jj[1]), "vthread")
    t = s[C].fuse(ii[2], jj[2])
    s[C].bind(t, "threadIdx.x")
    s[CL].compute_at(s[C], t)
    ci, cj = s[CL].op.axis
    ko, km, kin = _split(s[CL], s[CL].op.reduce_axis[0], tk)
    s[CL].reorder(ko, km, ci, kin, cj)
    for S in (AS, BS):
        cooperative_fetch(s[S], s[CL], ko, t.extent, vec)
    return s, [A, B, C]


def cooperative_fetch(stage, consumer, at, threads: int, vec: int) -> None:
    """`stage` (a shared-memory copy) computed at `consumer`'s loop `at`, its loops fused
    and split over the block's threads, `vec` elements per thread vectorized."""
    stage.compute_at(consumer, at)
    f = stage.fuse(*stage.op.axis) if len(stage.op.axis) > 1 else stage.op.axis[0]
    o, v = stage.split(f, factor=vec)
    o, tx = stage.split(o, factor=threads)
    stage.bind(tx, "threadIdx.x")
    if vec > 1:
        stage.vectorize(v)


def _split(stage, iv, factors):
    """`iv` split into len(factors) loops of these extents (the first is what is left)."""
    out, cur = [], iv
    for f in factors[:0:-1]:
        cur, inner = stage.split(cur, factor=f)
        out.insert(0, inner)
    return [cur] + out


def row_reduce(rows: int, cols: int, threads: int, combiner: str = "max"):
    """B[i] = combiner(A[i, :]) with one block per row and the row split over `threads`
    threads (a cross-thread reduction)."""
    A = te.placeholder((rows, cols), name="A")
    k = te.reduce_axis(cols, "k")
    fn = te.max if combiner == "max" else te.sum
    B = te.compute((rows,), lambda i: fn(A[i, k], axis=k), name="B")
    s = tlmir.create_schedule(B)
    _, ki = s[B].split(k, factor=threads)
    s[B].bind(B.op.axis[0], "blockIdx.x")
    s[B].bind(ki, "threadIdx.x")
    return s, [A, B]
