"""Evolutionary search with Ansor's tile-size mutation (move one factor between two
levels, the default) vs a uniform redraw of the whole tile.

    .venv/bin/python bench/mutation.py [--seeds 1,2] [--budget 64] [--workloads conv2d] [--json out.json]

For each workload of bench/search.py and each seed, both variants measure `--budget`
programs; then the best program of every run is rebuilt, checked and timed (median,
2 threads) in this process, with PyTorch timed beside it.
"""
from __future__ import annotations

import argparse
import json
import math
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from search import WORKLOADS  # noqa: E402  (bench/search.py, same directory)
from tlmir.evaluate import time_program  # noqa: E402
from tlmir.ops.baselines import baseline_times  # noqa: E402
from tlmir.runtime.target import SearchParams  # noqa: E402
from tlmir.runtime.task import Task  # noqa: E402
from tlmir.search.tune import tune  # noqa: E402

CONFIGS = {
    "redraw": SearchParams(tile_mutation="redraw"),
    "move": SearchParams(tile_mutation="move"),
}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--seeds", default="1,2")
    p.add_argument("--budget", type=int, default=64)
    p.add_argument("--workloads", help="comma-separated name prefixes (default: all six)")
    p.add_argument("--json")
    a = p.parse_args()
    seeds = [int(s) for s in a.seeds.split(",")]
    prefixes = a.workloads.split(",") if a.workloads else [""]
    out, ratios = {}, []
    for name, make in WORKLOADS.items():
        if not any(name.startswith(x) for x in prefixes):
            continue
        op = make()
        task = Task.from_op(op, name=name)
        row = {"torch_2t_s": baseline_times(op, task.random_inputs(0), 2).get("torch")}
        for label, sp in CONFIGS.items():
            for seed in seeds:
                res = tune(task, trials=a.budget, strategy="evolutionary", seed=seed, sp=sp, progress=False)
                row[f"{label}/{seed}"] = time_program(task, res.best_trace.to_json(), 2)
        out[name] = row
        cells = [f"{k} {op.flops / v / 1e9:6.1f}" for k, v in row.items() if v]
        geo = [row[f"redraw/{s}"] / row[f"move/{s}"] for s in seeds]  # time ratio = speedup of move
        ratios += geo
        print(f"{name:<32} " + "  ".join(cells) + f"   move/redraw {math.prod(geo) ** (1 / len(geo)):.2f}"
              "  (GFLOP/s, 2 threads)", flush=True)
    if ratios:
        print(f"geometric mean move/redraw over {len(ratios)} runs: {math.prod(ratios) ** (1 / len(ratios)):.2f}")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
