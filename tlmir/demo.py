"""`make demo`: define a matmul in te, schedule it by hand, show the loop nest, compile it
through LLVM, check it against numpy and time both."""
from __future__ import annotations

import time

import numpy as np

import tlmir
from tlmir import te


def schedule_matmul(A, B, C):
    """8x32 register tile accumulated over a packed 1024x32 panel of B; panels in parallel."""
    s = tlmir.create_schedule(C)
    CC = s.cache_write(C, "local")
    BB = s.cache_read(B, "global", [CC])
    i, j = C.op.axis
    jo, ji = s[C].split(j, factor=32)
    io, ii = s[C].split(i, factor=8)
    s[C].reorder(jo, io, ii, ji)
    s[C].parallel(jo)
    s[C].vectorize(ji)
    s[BB].compute_at(s[C], jo)
    s[BB].vectorize(BB.op.axis[1])
    s[CC].compute_at(s[C], io)
    ci, cj = CC.op.axis
    (k,) = CC.op.reduce_axis
    s[CC].reorder(k, ci, cj)
    s[CC].unroll(ci)
    s[CC].vectorize(cj)
    return s


def main(n: int = 1024) -> None:
    A = te.placeholder((n, n), "float32", name="A")
    B = te.placeholder((n, n), "float32", name="B")
    k = te.reduce_axis(n, name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = schedule_matmul(A, B, C)
    print("# schedule\n" + "\n".join(map(str, s.history)))
    print("\n# lowered loop program\n" + str(tlmir.lower(s, [A, B, C])))
    t0 = time.perf_counter()
    f = tlmir.build(s, [A, B, C], target="cpu")
    print(f"\ncompiled in {time.perf_counter() - t0:.2f} s; FMA instructions in the kernel: "
          f"{f.assembly.count('vfmadd')}")
    rng = np.random.default_rng(0)
    a = rng.random((n, n), dtype=np.float32)
    b = rng.random((n, n), dtype=np.float32)
    c = np.empty((n, n), "float32")
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4)
    print("result matches numpy")
    gflop = 2 * n ** 3 / 1e9
    for threads in (1, 2):
        f.num_threads = threads
        t = f.benchmark(a, b, c)
        print(f"tlmir  {threads} thread(s): median {t.median * 1e3:7.2f} ms  {gflop / t.median:6.1f} GFLOP/s")
    t_np = min(_time(lambda: a @ b) for _ in range(5))
    print(f"numpy (its own threads): {t_np * 1e3:7.2f} ms  {gflop / t_np:6.1f} GFLOP/s")


def _time(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


if __name__ == "__main__":
    main()
