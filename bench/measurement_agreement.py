"""How well a measurement ranks against itself: the ceiling of an evaluator's offline metrics.

    .venv/bin/python bench/measurement_agreement.py data/eval-spr/evolutionary.jsonl.xz [--json out.json]

An evaluator is scored (tlmir.search.world_train.ranking_metrics) against each program's
recorded latency, itself a noisy measurement: among an evolutionary search's near-optimal
mutants many differ by less than the noise. Each record keeps its repeats (`seconds`);
this ranks every task's programs by the best of the odd-numbered repeats and scores that
ranking, with the evaluator's own `ranking_metrics`, against the best of the
even-numbered ones: pairwise accuracy over pairs of distinct latency, top-1 / top-10
recall of the measured best, Kendall's tau. Repeats of one measurement run back to back in one process, so the
agreement here is an upper bound: two measurements hours apart agree less.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from collections import defaultdict

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from tlmir.runtime.records import read_records  # noqa: E402
from tlmir.search.world_train import Program, ranking_metrics  # noqa: E402


def agreement(task: str, hw: str, a: np.ndarray, b: np.ndarray) -> dict:
    """The evaluator's ranking metrics (`ranking_metrics`) of latencies `b` as scores
    against latencies `a`, the programs of one task."""
    programs = [Program(task, "", float(t), hw_key=hw) for t in a]
    metrics = ranking_metrics(programs, 1.0 / b)
    return {k: metrics[k] for k in ("pairwise_accuracy", "kendall_tau", "top1_recall", "top10_recall")}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("records", nargs="+", help="records files (jsonl[.xz]) or DBs")
    p.add_argument("--min-programs", type=int, default=32, help="tasks with fewer measured programs are left out")
    p.add_argument("--json", help="write the per-task and mean metrics here")
    a = p.parse_args()
    by_task: dict[tuple, list[list[float]]] = defaultdict(list)
    for r in read_records(a.records):
        if r.error is None and r.seconds and len(r.seconds) >= 2:
            by_task[(r.task_name, r.hw_key)].append(list(r.seconds))
    rows = []
    for (task, hw), runs in sorted(by_task.items()):
        if len(runs) < a.min_programs:
            continue
        even = np.array([min(s[0::2]) for s in runs])
        odd = np.array([min(s[1::2]) for s in runs])
        rows.append({"task": task, "hw": hw, "programs": len(runs), **agreement(task, hw, even, odd)})
        print(f"{task[:48]:48s} {len(runs):5d} programs  pairwise {rows[-1]['pairwise_accuracy']:.3f}  "
              f"top-10 {rows[-1]['top10_recall']:.0f}")
    keys = ("pairwise_accuracy", "top1_recall", "top10_recall", "kendall_tau")
    mean = {k: float(np.mean([r[k] for r in rows])) for k in keys}
    print(f"{len(rows)} tasks: " + ", ".join(f"{k} {v:.3f}" for k, v in mean.items()))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"records": a.records, "mean": mean, "tasks": rows}, f, indent=1)


if __name__ == "__main__":
    main()
