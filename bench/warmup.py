"""Evolutionary search's first 64 measurements: warm-up rounds vs one round vs random.

    .venv/bin/python bench/warmup.py [--seeds 1,2] [--json out.json]

For each workload of bench/search.py and each seed: random search, evolutionary search
measuring its first 64 in one round (Ansor's way: `warmup_rounds=1`), and evolutionary
search in 4 warm-up rounds of 16 (the default), 64 measurements each; then the best
program of every run is rebuilt, checked and timed (median, 2 threads) in this process.
"""
from __future__ import annotations

import argparse
import json
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from search import WORKLOADS  # noqa: E402  (bench/search.py, same directory)
from tlmir.evaluate import time_program  # noqa: E402
from tlmir.runtime.target import SearchParams  # noqa: E402
from tlmir.runtime.task import Task  # noqa: E402
from tlmir.search.tune import tune  # noqa: E402

CONFIGS = {
    "random-64": ("random", SearchParams()),
    "evolutionary-64, one round": ("evolutionary", SearchParams(warmup_rounds=1)),
    "evolutionary-64, 4 warm-up rounds": ("evolutionary", SearchParams()),
}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--seeds", default="1,2")
    p.add_argument("--budget", type=int, default=64)
    p.add_argument("--json")
    a = p.parse_args()
    seeds = [int(s) for s in a.seeds.split(",")]
    out = {}
    for name, make in WORKLOADS.items():
        task = Task.from_op(make(), name=name)
        row = {}
        for label, (strategy, sp) in CONFIGS.items():
            row[label] = []
            for seed in seeds:
                res = tune(task, trials=a.budget, strategy=strategy, sp=sp, seed=seed, progress=False)
                row[label].append(task.flops / time_program(task, res.best_trace.to_json(), 2) / 1e9)
        out[name] = row
        print(name, {k: [round(g, 1) for g in v] for k, v in row.items()}, flush=True)
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
