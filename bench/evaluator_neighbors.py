"""Does the evaluator rank a new task better after fine-tuning on its nearest training tasks?

    .venv/bin/python bench/evaluator_neighbors.py --cache runs/evprog.pkl \
        [--tests evo1000-zen5] [--neighbours 8] [--steps 100] [--lr 3e-4] [--json F]

The shipped evaluator is trained across all training tasks and ranks held-out programs at
~0.70 pairwise; trained on half of a held-out task's own programs it ranks the other half
at 0.83 (bench/evaluator_ceiling.py): what it lacks is data like the task's. The nearest
training tasks are the closest data there is. For each held-out task (on each CPU class
of a test set), a copy of the evaluator is fine-tuned on the measured programs of the
`--neighbours` training tasks nearest to it: the same `op_family`, the same category
first, then by `shape_distance` (transfer_sources.py), measured on a host of the same
vector width; each ranked within its own task and host. It then scores the task's
programs. Nothing of a held-out task is trained on.

Prints, per test set, pairwise accuracy and top-10 recall (world_train.ranking_metrics,
averaged over tasks) of the shipped evaluator and of the fine-tuned copies, and per task.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from evaluator_retrain import TEST, programs  # noqa: E402  (bench/evaluator_retrain.py)
from tlmir.search import world_train as wt  # noqa: E402
from tlmir.search.transfer_sources import (isa, op_family, shape_distance, shape_signature,  # noqa: E402
                                           source_category)
from tlmir.runtime.task import task_type  # noqa: E402


def neighbours(task, hw_key: str, train_groups: dict, tasks: dict, k: int) -> list[str]:
    """The `k` training groups (task@host) nearest to `task` on a host of `hw_key`'s width."""
    family, cat, shape = op_family(task_type(task)), source_category(task), shape_signature(task)
    scored = []
    for group, ix in train_groups.items():
        key, hw = group.split("@", 1)
        t = tasks.get(key)
        if t is None or isa(hw) != isa(hw_key) or op_family(task_type(t)) != family or len(ix) < 8:
            continue
        scored.append((source_category(t) != cat, shape_distance(shape, shape_signature(t)), hw != hw_key, group))
    return [g for *_, g in sorted(scored)[:k]]


def metrics(progs: list, scores: np.ndarray) -> dict:
    m = wt.ranking_metrics(progs, scores)
    return {"pairwise": round(m["pairwise_accuracy"], 3), "top10_recall": round(m["top10_recall"], 3)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cache", required=True, help="pickle of the programs (bench/evaluator_retrain.py)")
    p.add_argument("--evaluator", default="tlmir/lm/models/evaluator")
    p.add_argument("--tests", default="evo1000-zen5", help=f"comma-separated, of: {', '.join(TEST)}")
    p.add_argument("--neighbours", type=int, default=8)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--per-group", type=int, default=256, help="programs read per neighbouring task")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json")
    a = p.parse_args()
    from tlmir.workloads import split_tasks
    torch.set_num_threads(a.threads)
    data = programs(a.cache)
    train = [q for q in data["train"] if q.features is not None]
    train_groups = wt.group_indices(train)
    tasks = {t.key: t for t in split_tasks("train")}
    held = {t.key: t for t in split_tasks("held-out")}
    base = wt.Evaluator.load(a.evaluator)
    rng = np.random.default_rng(0)
    out = []
    for name in a.tests.split(","):
        progs = [q for q in data[name] if q.features is not None]
        rows, t0 = [], time.time()
        for group, ix in wt.group_indices(progs).items():
            key, hw = group.split("@", 1)
            mine = [progs[i] for i in ix]
            near = neighbours(held[key], hw, train_groups, tasks, a.neighbours)
            data_near = [train[i] for g in near
                         for i in rng.permutation(train_groups[g])[: a.per_group]]
            ev = base.copy()
            ev.fine_tune(data_near, steps=a.steps, lr=a.lr)
            row = {"task": held[key].name, "hw": hw, "programs": len(mine), "neighbours": len(near),
                   "base": metrics(mine, base.score_programs(mine)),
                   "tuned": metrics(mine, ev.score_programs(mine))}
            rows.append(row)
            print(json.dumps(row), flush=True)
        mean = {k: {m: round(float(np.mean([r[k][m] for r in rows])), 3) for m in ("pairwise", "top10_recall")}
                for k in ("base", "tuned")}
        summary = {"test": name, "tasks": len(rows), **mean, "seconds": round(time.time() - t0)}
        print(json.dumps(summary), flush=True)
        out.append({"summary": summary, "rows": rows})
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"args": vars(a), "results": out}, f, indent=1)


if __name__ == "__main__":
    main()
