"""Random vs evolutionary search on six workloads, next to numpy and PyTorch.

    .venv/bin/python bench/search.py [--budgets 64,1000] [--strategies evolutionary,random]
                                     [--db-dir runs/bench] [--report-only] [--json out.json]
                                     [--workloads conv2d,matmul] [--seed 0] [--local-share 0.25] [--population 512]
                                     [--sketch-share 0.25] [--uniform-mutation]
                                     [--rounds 3] [--tries 6]

Tuning appends to one records DB per strategy under --db-dir, so an interrupted run
resumes where it stopped; budgets run in increasing order, so the 64-measurement
numbers exist long before the 1000-measurement ones. The report rebuilds the best
program after k measurements of each strategy and times it (the fastest of --tries
medians per round, as the baselines are timed) with 1 and 2 threads, next to numpy and
PyTorch timed in the same run (in a child process of their own: see
tlmir.ops.baselines.baseline_times_isolated). Tuning itself measures with
all cores. It also reports the throughput of the space: candidates sampled / lowered /
compiled per second.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # numpy is a single-thread baseline

from tlmir import ops  # noqa: E402
from tlmir.runtime.backend import compile_func  # noqa: E402
from tlmir.evaluate import program_timer  # noqa: E402
from tlmir.ops.baselines import baseline_times_isolated  # noqa: E402
from tlmir.runtime.records import RecordDB, best_of  # noqa: E402
from tlmir.runtime.target import SearchParams, host_hardware  # noqa: E402
from tlmir.runtime.task import Task  # noqa: E402
from tlmir.schedule.lower import lower  # noqa: E402
from tlmir.schedule.space import SearchSpace  # noqa: E402
from tlmir.search.tune import tune  # noqa: E402

WORKLOADS = {
    "matmul 1024^3": lambda: ops.matmul(1024, 1024, 1024),
    "conv2d 1x64x56x56 k64 3x3 p1": lambda: ops.conv2d_nchw(1, 64, 56, 56, 64, 3, 3, padding=1),
    "dense 128x768x3072 +bias+gelu": lambda: ops.dense(128, 3072, 768, bias=True, act="gelu"),
    "batch_matmul 12x128x128x64": lambda: ops.batch_matmul(12, 128, 128, 64),
    "softmax 1536x128": lambda: ops.softmax(12 * 128, 128),
    "layernorm 128x768": lambda: ops.layernorm(128, 768),
}

# SearchParams fields that have a command-line flag here (--local-share etc.): (field, type)
SEARCH_OVERRIDES = (("local_share", float), ("population", int), ("sketch_share", float), ("local_parents", int))


def tune_all(budgets, strategies, db_dir, workloads, seed: int = 0, sp: SearchParams | None = None) -> None:
    for k in budgets:
        for strategy in strategies:
            for name, make in workloads.items():
                t0 = time.time()
                res = tune(Task.from_op(make(), name=name), trials=k, strategy=strategy,
                           db=os.path.join(db_dir, f"{strategy}.db"), progress=False, seed=seed, sp=sp)
                print(f"[tune] {strategy:<12} {name:<32} {res.measurements:5d} meas  "
                      f"{res.gflops:8.1f} GFLOP/s  ({time.time() - t0:6.1f} s this call)", flush=True)


def best_after(db: RecordDB, task: Task, hw_key: str, k: int):
    """(trace of the best program after the first k records, or None; records counted):
    chosen as tune chooses it (tlmir.runtime.records.best_of)."""
    recs = db.records(task.key, hw_key)[:k]
    best = best_of(recs)
    return (best[0] if best else None), len(recs)


def space_throughput(op, seconds: float = 3.0) -> dict:
    space = SearchSpace(op.outputs)
    rng = random.Random(0)
    out = {}
    for stage in ("sampled", "lowered", "compiled"):
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            sch, _ = space.sample(rng)
            if stage != "sampled":
                func = lower(sch, op.args)
                if stage == "compiled":
                    compile_func(func)
            n += 1
        out[stage] = n / (time.perf_counter() - t0)
    return out


def report(budgets, strategies, db_dir, workloads, rounds: int = 3, tries: int = 6) -> list[dict]:
    """Each row's times are medians over `rounds` rounds; a round times the baselines (in
    a child process) and then every best program, so slow spells of the shared machine
    fall on both sides instead of on one number. Within a round a best program's time is
    the fastest of `tries` medians, the statistic the baselines get (the fastest of 3
    medians in each of 2 processes: a stall of the machine is not the code's speed); the
    first of those medians alone is kept as `..._first_s`, for comparison."""
    hw_key = host_hardware().key
    rows = []
    for name, make in workloads.items():
        op = make()
        task = Task.from_op(op, name=name)
        best = {}
        for strategy in strategies:
            path = os.path.join(db_dir, f"{strategy}.db")
            if os.path.exists(path):
                with RecordDB(path) as db:
                    for k in budgets:
                        trace, n = best_after(db, task, hw_key, k)
                        if trace is not None and n >= k:
                            best[f"{strategy}{k}"] = trace
        timers = {key: program_timer(task, trace) for key, trace in best.items()}
        samples: dict[str, list[float]] = {}
        for _ in range(rounds):
            for threads, times in baseline_times_isolated(op, (1, 2)).items():
                for fw, t in times.items():
                    samples.setdefault(f"{fw}_{threads}t_s", []).append(t)
            for key, seconds in timers.items():
                for threads in (1, 2):
                    medians = [seconds(threads) for _ in range(max(1, tries))]
                    samples.setdefault(f"{key}_{threads}t_s", []).append(min(medians))
                    samples.setdefault(f"{key}_{threads}t_first_s", []).append(medians[0])
        row = {"workload": name, "gflop": op.flops / 1e9}
        row.update({key: statistics.median(ts) for key, ts in samples.items()})
        rows.append(row)
        print(format_row(row, budgets, strategies), flush=True)
    return rows


def format_row(row: dict, budgets, strategies) -> str:
    g = row["gflop"]
    cells = [f"{row['workload']:<32}"]
    searched = [f"{s}{k}" for s in strategies for k in budgets]
    for threads in (1, 2):
        for key in searched + ["numpy", "torch", "onednn"]:
            t = row.get(f"{key}_{threads}t_s")
            if t:
                cells.append(f"{key}@{threads}t {g / t:7.1f}")
    firsts = [f"{key}@{threads}t {g / row[f'{key}_{threads}t_first_s']:7.1f}" for threads in (1, 2)
              for key in searched if f"{key}_{threads}t_first_s" in row]
    return "  ".join(cells) + "   (GFLOP/s)" + ("\n" + " " * 32 + "  first median per round: " + "  ".join(firsts)
                                                  if firsts else "")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--budgets", default="64,1000")
    p.add_argument("--strategies", default="evolutionary,random")
    p.add_argument("--db-dir", default="runs/bench")
    p.add_argument("--report-only", action="store_true")
    p.add_argument("--rounds", type=int, default=3, help="report: timing rounds per row (medians)")
    p.add_argument("--tries", type=int, default=6,
                   help="report: a program's time in a round is the fastest of this many medians")
    p.add_argument("--json")
    p.add_argument("--workloads", help="comma-separated name prefixes (default: all six)")
    p.add_argument("--seed", type=int, default=0, help="search seed (use a fresh --db-dir per seed)")
    for field, kind in SEARCH_OVERRIDES:
        p.add_argument("--" + field.replace("_", "-"), type=kind, help=f"SearchParams.{field} (default: its default)")
    p.add_argument("--uniform-mutation", action="store_true",
                   help="SearchParams.mutation_weights=(): mutate every question alike (no rule weights)")
    a = p.parse_args()
    prefixes = a.workloads.split(",") if a.workloads else [""]
    workloads = {n: f for n, f in WORKLOADS.items() if any(n.startswith(x) for x in prefixes)}
    budgets = [int(b) for b in a.budgets.split(",")]
    strategies = a.strategies.split(",")
    os.makedirs(a.db_dir, exist_ok=True)
    if not a.report_only:
        overrides = {k: getattr(a, k) for k, _ in SEARCH_OVERRIDES if getattr(a, k) is not None}
        if a.uniform_mutation:
            overrides["mutation_weights"] = ()
        sp = SearchParams(**overrides) if overrides else None
        tune_all(budgets, strategies, a.db_dir, workloads, a.seed, sp)
    rows = report(budgets, strategies, a.db_dir, workloads, a.rounds, a.tries)
    thr = space_throughput(ops.matmul(1024, 1024, 1024))
    print("space throughput (matmul 1024^3, per second): " +
          ", ".join(f"{k} {v:.1f}" for k, v in thr.items()))
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"rows": rows, "space_throughput": thr}, fh, indent=1)


if __name__ == "__main__":
    main()
