"""Re-time the best program of records DBs next to PyTorch, with every statistic.

    .venv/bin/python bench/retime.py --workload dense runs/bench13-dense-s0/evolutionary.db ...
                                     [--trace 'JSON trace' ...] [--rounds 3] [--tries 6]

For each DB (its best record of the workload's task) and each --trace, per round: PyTorch
(and its oneDNN linear, for dense and matmul) in child processes
(tlmir.ops.baselines.baseline_times_isolated), then each program `tries` times (a median
of 15 calls each) at 1 and 2 threads. Prints, per program and thread count, the median
over rounds of: the fastest of the tries (the statistic the baselines get), their median,
and the first alone (what bench/search.py keeps as `..._first_s`), each with its ratio to
PyTorch (then to oneDNN: "torch/onednn").
"""
from __future__ import annotations

import argparse
import os
import statistics

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # numpy is a single-thread baseline

from search import WORKLOADS  # noqa: E402  (bench/search.py)
from tlmir.evaluate import program_timer  # noqa: E402
from tlmir.ops.baselines import baseline_times_isolated  # noqa: E402
from tlmir.runtime.records import RecordDB, best_of  # noqa: E402
from tlmir.runtime.target import host_hardware  # noqa: E402
from tlmir.runtime.task import Task  # noqa: E402


BASELINES = {"torch": "PyTorch", "onednn": "oneDNN"}  # framework -> name printed; ratios in this order


def best_trace(path: str, task: Task) -> str:
    """The trace of the best program of `task` on this machine in `path`, as tune chooses it."""
    with RecordDB(path) as db:
        best = best_of(db.records(task.key, host_hardware().key))
    if not best:
        raise SystemExit(f"{path}: no successful record of {task.name} on this machine")
    return best[0]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("dbs", nargs="*")
    p.add_argument("--workload", required=True, help="name prefix of a bench/search.py workload")
    p.add_argument("--trace", action="append", default=[], help="a trace as JSON (repeatable)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--tries", type=int, default=6)
    a = p.parse_args()
    name = next((n for n in WORKLOADS if n.startswith(a.workload)), None)
    if name is None:
        raise SystemExit(f"unknown workload {a.workload!r}; one of: {', '.join(WORKLOADS)}")
    op = WORKLOADS[name]()
    task = Task.from_op(op, name=name)
    programs = {path: best_trace(path, task) for path in a.dbs}
    programs.update({f"trace {k}": t for k, t in enumerate(a.trace)})
    timers = {k: program_timer(task, t) for k, t in programs.items()}
    samples: dict[tuple, list[float]] = {}
    for _ in range(a.rounds):
        for threads, times in baseline_times_isolated(op, (1, 2)).items():
            for fw in BASELINES:
                if fw in times:
                    samples.setdefault((fw, threads, ""), []).append(times[fw])
        for key, seconds in timers.items():
            for threads in (1, 2):
                meds = [seconds(threads) for _ in range(max(1, a.tries))]
                for stat, v in (("fastest", min(meds)), ("median", statistics.median(meds)),
                                ("first", meds[0])):
                    samples.setdefault((key, threads, stat), []).append(v)
    fws = [fw for fw in BASELINES if (fw, 1, "") in samples]  # onednn: dense and matmul only
    base = {(fw, t): statistics.median(samples[(fw, t, "")]) for fw in fws for t in (1, 2)}
    print(f"{name}: " + "; ".join(f"{BASELINES[fw]} {base[fw, 1] * 1e3:.3f} ms (1 thread), "
                                  f"{base[fw, 2] * 1e3:.3f} ms (2 threads)" for fw in fws))
    for key in timers:
        for threads in (1, 2):
            cells = []
            for stat in ("fastest", "median", "first"):
                t = statistics.median(samples[(key, threads, stat)])
                ratios = "/".join(f"{base[fw, threads] / t:.2f}" for fw in fws)
                cells.append(f"{stat} {t * 1e3:.3f} ms ({ratios})")
            print(f"  {key} @{threads}t: " + ", ".join(cells))


if __name__ == "__main__":
    main()
