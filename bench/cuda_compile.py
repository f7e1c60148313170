"""NVRTC compile time and the resource checks of GPU spaces, on a machine without a GPU.

    .venv/bin/python bench/cuda_compile.py [--archs sm_80,sm_90] [--candidates 32]
        [--tasks matmul,conv3x3,dense_gelu,softmax,layernorm] [--json out.json]

Per task and architecture: `--candidates` distinct programs drawn at random from the GPU
space (search.dry_run, as `tlmir tune --dry-run` does), each lowered, rendered as CUDA C
and compiled by NVRTC to a cubin; reported: wall time per program (render + NVRTC +
ptxas; median, mean and slowest: deep unrolling makes a heavy tail), kernels compiled
per second, the share the resource checks refuse (threads,
shared memory, registers per block) and the share whose kernels spill registers.
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics


TASKS = {
    "matmul": ("matmul 1024^3", lambda ops: ops.matmul(1024, 1024, 1024)),
    "conv3x3": ("conv2d ResNet-50 3x3 (1x64x56x56, 64 filters)",
                lambda ops: ops.conv2d_nchw(1, 64, 56, 56, 64, 3, 3, padding=1)),
    "dense_gelu": ("dense 128x3072x768 + bias + GELU", lambda ops: ops.dense(128, 3072, 768, bias=True, act="gelu")),
    "softmax": ("softmax 128x1024", lambda ops: ops.softmax(128, 1024)),
    "layernorm": ("layernorm 128x768", lambda ops: ops.layernorm(128, 768)),
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--archs", default="sm_80,sm_90")
    p.add_argument("--tasks", default=",".join(TASKS), help=f"comma-separated subset of {', '.join(TASKS)}")
    p.add_argument("--candidates", type=int, default=32, help="programs compiled per task and architecture")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json")
    a = p.parse_args()
    from tlmir import ops
    from tlmir.codegen_cuda.nvrtc import version
    from tlmir.runtime.target import cpu_model_name, parse_target
    from tlmir.runtime.task import Task
    from tlmir.search.dry_run import dry_run
    import os
    print(f"NVRTC {'.'.join(map(str, version()))} on {cpu_model_name(platform.machine())} ({os.cpu_count()} CPUs)")
    print(f"| task | arch | sketches | programs | kernels | s / program: median, mean, max | kernels/s | "
          f"refused by the resource checks | spilling |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    rows = []
    for name in a.tasks.split(","):
        desc, make = TASKS[name]
        task = Task.from_op(make(ops), name=name)
        for arch in a.archs.split(","):
            rep = dry_run(task, parse_target(f"cuda:{arch}"), a.candidates, a.seed)
            secs = rep.seconds or [float("nan")]
            med, mean, top = statistics.median(secs), statistics.mean(secs), max(secs)
            row = {"task": name, "desc": desc, "arch": arch, "sketches": len(rep.sketches),
                   "candidates": rep.candidates, "compiled": rep.compiled, "kernels": rep.kernels,
                   "seconds": rep.seconds, "kernels_per_s": rep.kernels_per_second,
                   "rejected": dict(rep.rejected), "rejected_fraction": rep.rejected_fraction,
                   "failed": len(rep.failed), "spilled": rep.spilled}
            rows.append(row)
            print(f"| {desc} | {arch} | {row['sketches']} | {rep.candidates} | {rep.kernels} | "
                  f"{med:.2f}, {mean:.2f}, {top:.1f} | "
                  f"{rep.kernels_per_second:.1f} | {rep.rejected_fraction:.0%} | "
                  f"{rep.spilled / max(rep.compiled, 1):.0%} |", flush=True)
            for _, msg in rep.failed[:2]:
                print(f"  failed: {msg.splitlines()[0][:200]}")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
