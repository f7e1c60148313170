"""Hand-written schedules vs numpy and PyTorch, measured in the same run.

    .venv/bin/python bench/manual_schedules.py [--repeat 20] [--json out.json]

Prints, for each workload, the median time of the tlmir kernel (verified against the
numpy reference first), numpy and PyTorch, and GFLOP/s ratios; matmul also with 2 threads.
"""
from __future__ import annotations

import argparse
import json
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # numpy is the single-thread baseline
import numpy as np  # noqa: E402
import torch  # noqa: E402

import tlmir  # noqa: E402
from tlmir import ops  # noqa: E402
from tlmir.ops.baselines import time_baseline  # noqa: E402
from tlmir.demo import schedule_matmul  # noqa: E402


def matmul_schedule(op):
    """The demo's schedule: an 8x32 register tile over a packed 1024x32 panel of B."""
    return schedule_matmul(*op.inputs, *op.outputs)


def conv2d_schedule(op):
    """NCHW conv: 3 output channels x one 56-wide output row (7 ymm vectors each) held in
    registers; 3 does not divide 64, the guard only touches the copy-out."""
    (out,) = op.outputs
    s = tlmir.create_schedule(out)
    pad = s.stage("pad")
    n, c, h, w = pad.op.axis
    pad.parallel(pad.fuse(n, c))
    pad.vectorize(w)
    CL = s.cache_write(out, "local")
    n, k, p, q = out.op.axis
    ko, ki = s[out].split(k, factor=3)
    s[out].reorder(n, ko, p, ki, q)
    fused = s[out].fuse(s[out].fuse(n, ko), p)
    s[out].parallel(fused)
    s[out].vectorize(q)
    s[CL].compute_at(s[out], fused)
    cn, ck, cp, cq = CL.op.axis
    rc, rr, rs = CL.op.reduce_axis
    qo, qi = s[CL].split(cq, factor=8)
    s[CL].reorder(cn, cp, rc, rr, rs, ck, qo, qi)
    s[CL].unroll(ck)
    s[CL].unroll(qo)
    s[CL].vectorize(qi)
    return s


def rowwise_schedule(op, reductions, lanes=16):
    """Softmax / layernorm: one parallel loop over rows; every other stage is computed per
    row inside it (`compute_at(out, i)`: the row stays in L1, one pass over memory). The
    reductions stay plain loops (`for k: acc += f(k)`), which the backend emits as vector
    partial sums plus a shuffle tree; element-wise stages are vectorized by `lanes`."""
    (out,) = op.outputs
    s = tlmir.create_schedule(out)
    o = s[out]
    i, j = o.op.axis
    o.vectorize(o.split(j, factor=lanes)[1])
    o.parallel(i)
    for st in s.stages:
        if st.is_placeholder or st is o:
            continue
        if st.name not in reductions:
            st.vectorize(st.split(st.op.axis[-1], factor=lanes)[1])
        st.compute_at(o, i)
    return s


WORKLOADS = [
    ("matmul 1024^3", lambda: ops.matmul(1024, 1024, 1024), matmul_schedule,
     lambda a, b: torch.matmul(a, b), lambda a, b: a @ b),
    ("conv2d resnet 1x64x56x56 -> 64 3x3 pad1", lambda: ops.conv2d_nchw(1, 64, 56, 56, 64, 3, 3, padding=1),
     conv2d_schedule, lambda x, w: torch.nn.functional.conv2d(x, w, padding=1), None),
    ("softmax 128x3072", lambda: ops.softmax(128, 3072), lambda op: rowwise_schedule(op, ["max", "sum"]),
     lambda x: torch.softmax(x, -1),
     lambda x: (lambda e: e / e.sum(-1, keepdims=True))(np.exp(x - x.max(-1, keepdims=True)))),
    ("softmax 1536x128", lambda: ops.softmax(1536, 128), lambda op: rowwise_schedule(op, ["max", "sum"]),
     lambda x: torch.softmax(x, -1),
     lambda x: (lambda e: e / e.sum(-1, keepdims=True))(np.exp(x - x.max(-1, keepdims=True)))),
    ("layernorm 128x768", lambda: ops.layernorm(128, 768), lambda op: rowwise_schedule(op, ["mean", "var"]),
     lambda x, g, b: torch.nn.functional.layer_norm(x, (768,), g, b),
     lambda x, g, b: (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5) * g + b),
]


def time_fn(fn, repeat: int) -> float:
    """Median seconds per call, samples of >= 2 ms (the baselines' timer, shared)."""
    return time_baseline(fn, (), repeat, min_sample_s=2e-3)


def time_kernel(f, arrays, repeat: int) -> float:
    """Median seconds per call of a tlmir kernel with its arguments checked once (as the
    search and `tlmir.evaluate.time_program` time it), samples of >= 2 ms."""
    return f.benchmark(*arrays, repeat=repeat, min_time=2e-3).median


def run(repeat: int) -> list[dict]:
    rows = []
    for name, make_op, schedule, torch_fn, np_fn in WORKLOADS:
        op = make_op()
        f = tlmir.build(schedule(op), op.args)
        ins = op.random_inputs(0)
        outs = op.empty_outputs()
        f(*ins, *outs)
        for got, want in zip(outs, op.run_reference(*ins)):
            np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-3)
        tins = [torch.from_numpy(x) for x in ins]
        for threads in (1, 2):
            torch.set_num_threads(threads)
            f.num_threads = threads
            row = {"workload": name, "threads": threads, "gflop": op.flops / 1e9,
                   "tlmir_s": time_kernel(f, [*ins, *outs], repeat),
                   "torch_s": time_fn(lambda: torch_fn(*tins), repeat)}
            if np_fn is not None and threads == 1:
                row["numpy_s"] = time_fn(lambda: np_fn(*ins), repeat)
            rows.append(row)
            print(_fmt(row), flush=True)
    return rows


def _fmt(r: dict) -> str:
    g = r["gflop"]
    s = (f"{r['workload']:<42} thr={r['threads']}  tlmir {r['tlmir_s'] * 1e3:8.3f} ms "
         f"({g / r['tlmir_s']:6.1f} GFLOP/s)  torch {r['torch_s'] * 1e3:8.3f} ms "
         f"(tlmir/torch throughput {r['torch_s'] / r['tlmir_s']:.2f})")
    if "numpy_s" in r:
        s += f"  numpy {r['numpy_s'] * 1e3:8.3f} ms (tlmir/numpy {r['numpy_s'] / r['tlmir_s']:.2f})"
    return s


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--repeat", type=int, default=20)
    p.add_argument("--json")
    a = p.parse_args()
    print(f"# numpy {np.__version__}, torch {torch.__version__}, cores {os.cpu_count()}")
    rows = run(a.repeat)
    mm = {r["threads"]: r["tlmir_s"] for r in rows if r["workload"].startswith("matmul")}
    print(f"matmul parallel speedup 2 threads / 1 thread: {mm[1] / mm[2]:.2f}x")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
