"""A matmul register tile vectorized at several widths: what each width costs.

    .venv/bin/python bench/vector_widths.py [--n 192] [--rows 4] [--widths 16,32,48,64,12,24,8,6,3]

C = A @ B (n x n x n, float32), scheduled as `for i.outer, j.outer, k, i.inner (unrolled,
--rows), j.inner (vectorized, width w)`, one thread. Every kernel is checked against numpy
first; printed: the median of 15 timed calls per width, and the ratio to width 16 (one
AVX-512 register). Emitted as one vector, widths such as 48 and 24 ran 25x slower than
16 or 64 (LLVM legalizes `<48 x float>` into scalar code); the backend emits them as
16-wide vectors plus a tail (docs/architecture.md, "Vector widths").
"""
from __future__ import annotations

import argparse

import numpy as np

import tlmir
from tlmir import te


def kernel(n: int, rows: int, width: int):
    A = te.placeholder((n, n), "float32", "A")
    B = te.placeholder((n, n), "float32", "B")
    k = te.reduce_axis(n, "k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), "C")
    s = tlmir.create_schedule(C)
    i, j = s[C].op.axis
    jo, ji = s[C].split(j, factor=width)
    io, ii = s[C].split(i, factor=rows)
    s[C].reorder(io, jo, s[C].op.reduce_axis[0], ii, ji)
    s[C].unroll(ii)
    s[C].vectorize(ji)
    f = tlmir.build(s, [A, B, C], name=f"mm_w{width}")
    f.num_threads = 1
    return f


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=192)
    p.add_argument("--rows", type=int, default=4)
    p.add_argument("--widths", default="16,32,48,64,12,24,8,6,3")
    a = p.parse_args()
    rng = np.random.default_rng(0)
    x = rng.random((a.n, a.n), dtype=np.float32)
    y = rng.random((a.n, a.n), dtype=np.float32)
    times = {}
    for w in (int(v) for v in a.widths.split(",")):
        f = kernel(a.n, a.rows, w)
        out = np.zeros((a.n, a.n), np.float32)
        f(x, y, out)
        np.testing.assert_allclose(out, x @ y, rtol=1e-4, err_msg=f"width {w}")
        times[w] = f.benchmark(x, y, out, repeat=15).median
    base = times.get(16)
    for w, t in times.items():
        ratio = f"{t / base:6.2f}x width 16" if base else ""
        print(f"width {w:3d}: {t * 1e3:8.3f} ms  {ratio}")


if __name__ == "__main__":
    main()
