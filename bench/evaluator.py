"""Offline quality of the program evaluators, on held-out tasks' measurements.

    .venv/bin/python bench/evaluator.py --world world-feat=tlmir/lm/models/evaluator --static runs/evaluator/static

Test set: every held-out task with at least `--online` + 16 measured programs in the
evaluation archive (`data/eval/*.jsonl.xz`: the evolutionary baseline and the unranked
TLM runs of `tlmir eval`; the `@world` runs are left out, their programs were chosen by
an evaluator); the metrics are computed on each task's programs after its first
`--online` ones. Held-out tasks are never trained on. Rows:

- random: scores drawn uniformly;
- mlp cross-task: the search's MLP cost model (features.py + cost_model.py) trained on
  every training-split program of `--train` (the iterate archive);
- mlp online: the same MLP trained on the task's own first `--online` programs, as
  evolutionary search has it after that many measurements;
- world / static: the world-model evaluator with and without its latent transition
  (`tlmir train evaluator`, `--no-transition`); `--world` may be given several times
  (`NAME=DIR`) to compare variants;
- world online: the `--world` evaluator fine-tuned on the task's first `--online`
  programs, as `evolutionary@world` has it after that many measurements.

Then TLM-1 / TLM-10 with ranking: of each task's 64 recorded TLM programs (the
`tlm@none-64` run), the one (ten) the world model ranks first, against the greedy first
program and the first ten the TLM wrote: the best of those / the best of all 64.
"""
from __future__ import annotations

import argparse
import glob
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from tlmir.search.cost_model import CostModel  # noqa: E402
from tlmir.runtime.records import drop_tick_artefacts, read_records  # noqa: E402
from tlmir.search.world_train import Evaluator, Program, programs_from_records, ranking_metrics  # noqa: E402
from tlmir.workloads import split_tasks  # noqa: E402


def feature_rows(progs: list[Program]) -> np.ndarray:
    return np.stack([q.features for q in progs])


def throughput(progs: list[Program]) -> np.ndarray:
    return np.array([1.0 / q.seconds if q.seconds else 0.0 for q in progs])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--train", nargs="+", default=["data/iterate/records.jsonl.xz"])
    p.add_argument("--test", nargs="+",
                   default=sorted(f for f in glob.glob("data/eval/*.jsonl.xz") if "@world" not in f))
    p.add_argument("--world", nargs="+", default=[], help="world-model evaluator directories (NAME=DIR or DIR)")
    p.add_argument("--static", help="its no-transition ablation")
    p.add_argument("--online", type=int, default=64)
    p.add_argument("--finetune-steps", type=int, default=60, help="world online: fine-tuning steps")
    p.add_argument("--drop-tick-artefacts", action="store_true",
                   help="leave scheduler-tick artefacts (records.tick_artefact) out of every set")
    a = p.parse_args()
    clean = drop_tick_artefacts if a.drop_tick_artefacts else list
    held = {t.key: t for t in split_tasks("held-out")}
    train_tasks = {t.key: t for t in split_tasks("train")}
    test_recs = [r for r in clean(read_records(a.test)) if r.task_key in held]
    by_task: dict[str, list] = {}
    for r in test_recs:
        by_task.setdefault(r.task_key, []).append(r)
    first = {k: v[: a.online] for k, v in by_task.items() if len(v) >= a.online + 16}
    progs = programs_from_records([r for k in first for r in by_task[k][a.online:]], held)
    first_progs = {k: programs_from_records(recs, held) for k, recs in first.items()}
    print(f"test: {len(progs)} programs of {len(first)} held-out tasks (after each task's first {a.online})")
    rows = {"random": np.random.default_rng(0).random(len(progs))}
    rest_feat = feature_rows(progs)
    train = programs_from_records(clean(read_records(a.train)), train_tasks)
    mlp = CostModel()
    mlp.fit(feature_rows(train), throughput(train), np.array([q.group for q in train]))
    rows["mlp cross-task"] = mlp.predict(rest_feat)
    online = np.zeros(len(progs))
    for key, own in first_progs.items():
        m = CostModel()
        m.fit(feature_rows(own), throughput(own), np.zeros(len(own)))
        ix = [i for i, q in enumerate(progs) if q.task_key == key]
        online[ix] = m.predict(rest_feat[ix])
    rows["mlp online"] = online
    evaluators = {}
    for i, spec in enumerate(a.world):
        name, _, path = spec.rpartition("=")
        evaluators[name or ("world" if i == 0 else f"world {i + 1}")] = Evaluator.load(path)
    if a.static:
        evaluators["static"] = Evaluator.load(a.static)
    for name, ev in evaluators.items():
        rows[name] = ev.score_programs(progs)
    if a.world:
        name = next(iter(evaluators))
        rows[f"{name} online"] = world_online(evaluators[name], first_progs, progs, a.finetune_steps)
    print("| evaluator | pairwise accuracy | top-1 recall | top-10 recall | Kendall τ |")
    print("|---|---:|---:|---:|---:|")
    for name, scores in rows.items():
        m = ranking_metrics(progs, scores)
        print(f"| {name} | {m['pairwise_accuracy']:.3f} | {m['top1_recall']:.2f} | {m['top10_recall']:.2f} | "
              f"{m['kendall_tau']:.3f} |")
    tlm_ranking(evaluators, [path for path in a.test if "tlm@none-64" in path], held)


def world_online(ev: Evaluator, first_progs: dict, progs: list, steps: int) -> np.ndarray:
    """Scores of `progs` by the evaluator fine-tuned, per task, on that task's first programs."""
    out = np.zeros(len(progs))
    for key, own_progs in first_progs.items():
        own = ev.copy()
        own.fine_tune(own_progs, steps=steps)
        ix = [i for i, q in enumerate(progs) if q.task_key == key]
        out[ix] = own.score_programs([progs[i] for i in ix])
    return out


def tlm_ranking(evaluators: dict, paths: list, held: dict) -> None:
    by_task: dict[str, list[Program]] = {}
    for q in programs_from_records(read_records(paths), held):
        by_task.setdefault(q.task_key, []).append(q)
    ratios: dict[str, list[float]] = {"greedy (TLM-1)": [], "first 10 (TLM-10)": []}
    for progs in by_task.values():
        if len(progs) < 64:
            continue
        lat = np.array([q.seconds or math.inf for q in progs[:64]])
        best = lat.min()
        ratios["greedy (TLM-1)"].append(best / lat[0])
        ratios["first 10 (TLM-10)"].append(best / lat[:10].min())
        for name, ev in evaluators.items():
            order = np.argsort(-ev.score_programs(progs[:64]), kind="stable")
            ratios.setdefault(f"{name}: its first of 64", []).append(best / lat[order[0]])
            ratios.setdefault(f"{name}: its first 10 of 64", []).append(best / lat[order[:10]].min())
    n = len(ratios["greedy (TLM-1)"])
    print(f"\nTLM programs on {n} held-out tasks: best of the picks / best of all 64 (geometric mean)")
    print("| picks | ratio |\n|---|---:|")
    for name, xs in ratios.items():
        print(f"| {name} | {math.exp(np.mean(np.log(np.maximum(xs, 1e-4)))):.3f} |")


if __name__ == "__main__":
    main()
