"""tlmir tuned for this machine's GPU against PyTorch (cuBLAS / cuDNN, fp32, TF32 off).

    .venv/bin/python bench/gpu_tune.py [--trials 256] [--minutes-per-task 3.5] [--tasks matmul1024,...]
        [--db-dir runs/gpu] [--json out.json]

Needs a CUDA GPU (and, for the PyTorch column, a CUDA build of torch); where there is no
GPU it says so and exits with status 2. Per task: evolutionary search for target `cuda`
(this GPU: its architecture and limits, records keyed `cuda-sm_XX-...`) into a records DB
of its own (a rerun resumes), measured in an isolated worker as every search is (a
faulting kernel costs one trial); then its best program, rebuilt and checked against the
numpy reference, is timed with CUDA events on device-resident arrays beside PyTorch's
call timed the same way in the same process, with TF32 off for matmul and convolution.
A task's search stops at --trials or after --minutes-per-task, whichever comes first, so
a machine lent for half an hour reaches every task; --json is rewritten after each task.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

TASKS = {
    "matmul1024": ("matmul 1024^3", lambda ops: ops.matmul(1024, 1024, 1024)),
    "matmul4096": ("matmul 4096^3", lambda ops: ops.matmul(4096, 4096, 4096)),
    "conv3x3": ("conv2d ResNet-50 3x3 (1x64x56x56, 64 filters, pad 1)",
                lambda ops: ops.conv2d_nchw(1, 64, 56, 56, 64, 3, 3, padding=1)),
    "dense_gelu": ("dense 128x3072x768 + bias + GELU", lambda ops: ops.dense(128, 3072, 768, bias=True, act="gelu")),
    "softmax": ("softmax 128x1024", lambda ops: ops.softmax(128, 1024)),
    "layernorm": ("layernorm 128x768", lambda ops: ops.layernorm(128, 768)),
}


def torch_seconds(op, inputs, repeat: int = 50) -> float | None:
    """PyTorch's call of `op` on the GPU (CUDA events, median of `repeat` calls), or None
    without a CUDA build of torch."""
    import statistics

    import torch
    from tlmir.ops.baselines import baselines
    if not torch.cuda.is_available():
        return None
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    fn = baselines(op)["torch"]
    args = [torch.from_numpy(x).cuda() for x in inputs]
    for _ in range(3):
        fn(*args)
    times = []
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(*args)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", default=",".join(TASKS), help=f"comma-separated subset of {', '.join(TASKS)}")
    p.add_argument("--trials", type=int, default=256, help="evolutionary search measurements per task")
    p.add_argument("--minutes-per-task", type=float, default=3.5,
                   help="start no search round of a task after this long (0: one round)")
    p.add_argument("--db-dir", default="runs/gpu")
    p.add_argument("--json")
    a = p.parse_args()
    import numpy as np

    import tlmir
    from tlmir import ops
    from tlmir.errors import NoDeviceError
    from tlmir.runtime import gpu
    from tlmir.runtime.target import parse_target
    from tlmir.runtime.task import Task
    from tlmir.search.tune import tune
    try:
        gpu.driver()
    except NoDeviceError as e:
        print(f"bench/gpu_tune.py tunes on this machine's GPU and {e}; bench/cuda_compile.py compiles "
              f"and checks GPU spaces without one", file=sys.stderr)
        sys.exit(2)
    hw = parse_target("cuda")
    print(f"GPU: {hw.key}")
    os.makedirs(a.db_dir, exist_ok=True)
    rows = []
    for name in a.tasks.split(","):
        desc, make = TASKS[name]
        op = make(ops)
        task = Task.from_op(op, name=name)
        r = tune(task, hw=hw, trials=a.trials, strategy="evolutionary",
                 db=os.path.join(a.db_dir, f"{name}.db"), progress=True, max_seconds=60 * a.minutes_per_task)
        if r.best_trace is None:
            print(f"{name}: no program of the search ran correctly")
            continue
        kernel = tlmir.build(r.best_schedule(), task.args, target="cuda", name=name)
        inputs = op.random_inputs(0)
        outs = op.empty_outputs()
        kernel(*inputs, *outs)
        for got, want in zip(outs, op.run_reference(*inputs)):
            np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3)
        tlmir_s = kernel.benchmark(*inputs, *outs, repeat=20).median
        torch_s = torch_seconds(op, inputs)
        row = {"task": name, "desc": desc, "gflop": task.flops / 1e9, "measurements": r.measurements,
               "tlmir_ms": tlmir_s * 1e3, "torch_ms": torch_s * 1e3 if torch_s else None,
               "x_torch": torch_s / tlmir_s if torch_s else None, "kernels": kernel.describe()}
        rows.append(row)
        vs = f"{row['x_torch']:.2f}x PyTorch ({row['torch_ms']:.4f} ms)" if torch_s else \
            "PyTorch not timed: torch has no CUDA here (install the CUDA build of torch==2.13.0)"
        print(f"{desc}: {row['tlmir_ms']:.4f} ms, {task.flops / tlmir_s / 1e9:.0f} GFLOP/s, {vs}", flush=True)
        if a.json:  # after every task: a run cut off by the machine's time limit keeps what it did
            with open(a.json, "w") as fh:
                json.dump({"hardware": hw.key, "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
