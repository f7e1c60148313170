"""tlmir tuned for `cpu:avx2` on this host against PyTorch held to AVX2.

    .venv/bin/python bench/avx2_target.py [--trials 300] [--tasks matmul,dense_gelu]
        [--db-dir runs/avx2] [--threads N] [--rounds 5] [--json out.json]

Per task: evolutionary search for the `cpu:avx2` target (256-bit vectors, AVX-512 features
off in LLVM; records keyed `cpu-avx2-...`) into a records DB of its own (a rerun resumes);
then its best program, rebuilt for AVX2 and checked against numpy, is timed (median of
--rounds rounds of 15 calls) beside PyTorch timed in child processes with
ONEDNN_MAX_CPU_ISA=AVX2 and MKL_ENABLE_INSTRUCTIONS=AVX2, so oneDNN's and MKL's kernels
are held to the same instruction set. The ratio is against PyTorch's fastest path (its
default call or its oneDNN linear).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics

from tlmir.lm.registry import passive_openmp

TASKS = {
    "matmul": ("matmul 1024^3", lambda ops: ops.matmul(1024, 1024, 1024)),
    "dense_gelu": ("dense 128x3072x768 + bias + GELU (BERT-base)",
                   lambda ops: ops.dense(128, 3072, 768, bias=True, act="gelu")),
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", default=",".join(TASKS), help=f"comma-separated subset of {', '.join(TASKS)}")
    p.add_argument("--trials", type=int, default=300, help="evolutionary search measurements per task")
    p.add_argument("--db-dir", default="runs/avx2")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--json")
    a = p.parse_args()
    passive_openmp()
    os.environ["ONEDNN_MAX_CPU_ISA"] = "AVX2"        # inherited by the baselines' child processes
    os.environ["MKL_ENABLE_INSTRUCTIONS"] = "AVX2"
    from tlmir import ops
    from tlmir.evaluate import how_fast, program_timer
    from tlmir.ops.baselines import baselines_isolated
    from tlmir.runtime.target import parse_target
    from tlmir.runtime.task import Task
    from tlmir.search.tune import tune
    hw = parse_target("cpu:avx2")
    os.makedirs(a.db_dir, exist_ok=True)
    rows = []
    for name in a.tasks.split(","):
        desc, make = TASKS[name]
        task = Task.from_op(make(ops), name=name)
        r = tune(task, "cpu:avx2", trials=a.trials, strategy="evolutionary",
                 db=os.path.join(a.db_dir, f"{name}.db"), progress=True)
        seconds = program_timer(task, r.best_trace.to_json(), hw=hw)
        tlmir_s = statistics.median(seconds(a.threads) for _ in range(a.rounds))
        base = baselines_isolated([task.op], [a.threads])[0][a.threads]
        torch_s = min(v for k, v in base.items() if k in ("torch", "onednn"))
        row = {"task": name, "desc": desc, "gflop": task.flops / 1e9, "measurements": r.measurements,
               "tlmir_avx2_s": tlmir_s, "pytorch_avx2_s": torch_s, "baselines": base,
               "ratio": torch_s / tlmir_s}
        rows.append(row)
        print(f"{desc}: tlmir (cpu:avx2, evolutionary-{r.measurements}) {tlmir_s * 1e3:.3f} ms "
              f"{task.flops / tlmir_s / 1e9:.1f} GFLOP/s; PyTorch held to AVX2 {torch_s * 1e3:.3f} ms: "
              f"{how_fast(torch_s / tlmir_s)}", flush=True)
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"threads": a.threads, "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
