"""Retrain the world-model evaluator on every measurement kept, and score it beside others.

    .venv/bin/python bench/evaluator_retrain.py --cache runs/evprog.pkl \
        shipped=tlmir/lm/models/evaluator gap:gap:1000 top:top:1000

Reads the training split's records of every archive (the iterate runs of the three CPU
classes, the evolutionary searches of training tasks, the evolutionary-400
and `tlm+evolutionary` demonstrations searches), leaves out stale strided records and
scheduler-tick artefacts as `tlmir train evaluator` does, computes every program's
features once (`--cache`: a pickle of the programs, scratch) and then, per argument:

- `NAME=DIR`: scores a saved evaluator;
- `NAME:LOSS:STEPS[:novel][:seedS]`: trains one (seed S, default 0; 2 threads) and saves
  it to `runs/evaluator-NAME`. LOSS `gap` is the package's `ranking_loss` (pairs weighted by
  their gap in normalised throughput); `top` is the ablation that weights every pair beyond
  2% by the faster program's normalised throughput (the near-best pairs count as much as
  the rest). `:novel` trains on the evolutionary searches of novel tasks too
  (`data/iterate-novel`, tasks of no workload at shapes no network has): more tasks, each
  searched the way the held-out references were.
- `NAME=A+B+...`: the ensemble of rows scored or trained before it, each member's scores
  standardised within each task and summed.

Each row: pairwise accuracy, top-10 recall of the best and Kendall tau on the held-out
tasks' evolutionary-1000 (Zen 4 and Sapphire Rapids class) and evolutionary (AVX2)
programs and the unranked TLM-64 run, never trained on; and on the measured pool draws of `data/pool` (a uniform
sample of the TLM's programs per held-out task), the best of the evaluator's first 1 /
10 over the best of the sample (geometric mean): what TLM-1 and TLM-10 pick from.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import pickle
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from pool_rankers import pick_ratio  # noqa: E402  (bench/ is this script's directory)
from tlmir.argtypes import stale_rule  # noqa: E402
from tlmir.runtime.files import atomic_write  # noqa: E402
from tlmir.search import world_train as wt  # noqa: E402

TRAIN = ["data/iterate/records.jsonl.xz", "data/search-train/evolutionary.jsonl.xz",
         "data/stride2/evolutionary.jsonl.xz", "data/iterate-avx2/records.jsonl.xz",
         "data/demos-evo/tlm+evolutionary.jsonl.xz", "data/demos-evo400/evolutionary.jsonl.xz",
         "data/iterate-spr/records.jsonl.xz", "data/iterate-spr2/records.jsonl.xz"]
TEST = {"evo1000-avx512": "data/eval/evolutionary.jsonl.xz", "evo-avx2": "data/eval-avx2/evolutionary.jsonl.xz",
        "evo1000-spr": "data/eval-spr/evolutionary.jsonl.xz", "evo1000-zen5": "data/eval-zen5/evolutionary.jsonl.xz",
        "tlm64-unranked": "data/eval/tlm@none-64.jsonl.xz"}
NOVEL = ["data/iterate-novel/evolutionary.jsonl.xz", "data/iterate-novel/evolutionary-ops.jsonl.xz",
         "data/iterate-novel/evolutionary-ops2.jsonl.xz", "data/iterate-novel/evolutionary-zen5.jsonl.xz"]
POOL = "data/pool/held-out.jsonl.xz"
SCORED = (*TEST, "pool")  # the data sets every row scores
STALE = "^(conv2d_(?!transpose)|depthwise|max_pool|avg_pool).*_s[234]_@2026-11-25T08:04Z"


def programs(cache: str | None) -> dict:
    """{"train": ..., "novel": ..., each TEST name: ..., "pool": ...} lists of world_train.Program."""
    if cache and os.path.exists(cache):
        with open(cache, "rb") as f:
            return pickle.load(f)
    from tlmir.lm.novel_tasks import novel_tasks
    from tlmir.runtime.records import drop_tick_artefacts, read_records
    from tlmir.workloads import split_tasks
    train_tasks = {t.key: t for t in split_tasks("train")}
    held = {t.key: t for t in split_tasks("held-out")}
    recs = drop_tick_artefacts(wt.drop_stale(read_records(TRAIN), [stale_rule(STALE)]))
    out = {"train": wt.programs_from_records(recs, train_tasks),
           "novel": wt.programs_from_records(drop_tick_artefacts(read_records(NOVEL)),
                                             {t.key: t for t in novel_tasks(600)})}
    for name, path in TEST.items():
        out[name] = wt.programs_from_records(drop_tick_artefacts(read_records([path])), held)
    out["pool"] = wt.programs_from_records([r for r in read_records([POOL]) if r.strategy == "pool-random"], held)
    if cache:
        def write(tmp: str) -> None:
            with open(tmp, "wb") as f:
                pickle.dump(out, f)
        atomic_write(cache, write)
    return out


def top_weighted_loss(scores: torch.Tensor, targets: torch.Tensor, groups: torch.Tensor,
                      noise: float = 0.02) -> torch.Tensor:
    """The ablation: pairs of one task more than `noise` apart (log ratio), each weighted
    by the faster program's normalised throughput."""
    same = groups.unsqueeze(0) == groups.unsqueeze(1)
    lt = torch.log(targets.clamp(min=1e-3))
    gap = lt.unsqueeze(1) - lt.unsqueeze(0)
    pairs = same & (gap > math.log1p(noise))
    if not pairs.any():
        return scores.sum() * 0.0
    w = targets.unsqueeze(1).expand_as(gap)
    diff = scores.unsqueeze(1) - scores.unsqueeze(0)
    return (F.softplus(-diff)[pairs] * w[pairs]).sum() / w[pairs].sum()


def pool_picks(progs: list, scores: np.ndarray) -> dict:
    r1, r10 = [], []
    for ix in wt.group_indices(progs).values():
        thr = np.array([1.0 / progs[i].seconds if progs[i].seconds else 0.0 for i in ix])
        if len(ix) < 12 or thr.max() <= 0:
            continue
        r1.append(pick_ratio(scores[ix], thr, 1))
        r10.append(pick_ratio(scores[ix], thr, 10))
    gmean = lambda v: float(np.exp(np.mean(np.log(np.maximum(v, 1e-6)))))  # noqa: E731
    return {"pool_top1": round(gmean(r1), 3), "pool_top10": round(gmean(r10), 3), "pool_tasks": len(r1)}


def ensemble_scores(members: list[dict], data: dict) -> dict:
    """Per data set: the members' scores, standardised within each task, summed."""
    out = {}
    for k in SCORED:
        total = np.zeros(len(data[k]))
        for ix in wt.group_indices(data[k]).values():
            for scores in members:
                v = scores[k][ix]
                total[ix] += (v - v.mean()) / (v.std() + 1e-9)
        out[k] = total
    return out


def report(name: str, scores: dict, data: dict) -> dict:
    """The row of one evaluator's scores (`{data set: array}`, every TEST set and "pool")."""
    row: dict = {"name": name}
    for k in TEST:
        m = wt.ranking_metrics(data[k], scores[k])
        row[k] = {"pairwise": round(m["pairwise_accuracy"], 3), "top10_recall": round(m["top10_recall"], 3),
                  "tau": round(m["kendall_tau"], 3), "tasks": m["tasks"]}
    row.update(pool_picks(data["pool"], scores["pool"]))
    print(json.dumps(row), flush=True)
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", help="NAME=DIR (score), NAME:LOSS:STEPS[:novel][:seedS] (train, LOSS "
                   "gap|top) or NAME=A+B (the ensemble of rows before it)")
    p.add_argument("--cache", help="pickle of the programs and their features (computed once)")
    p.add_argument("--json", help="write the rows here")
    a = p.parse_args()
    from tlmir.lm.registry import TOKENIZER_FILE, model_dir
    from tlmir.lm.tokenizer import Tokenizer
    from tlmir.search.features import NUM_FEATURES
    from tlmir.search.world_model import WorldModelConfig
    torch.set_num_threads(2)
    data = programs(a.cache)
    print(f"{len(data['train'])} training programs, {len(data['novel'])} of novel tasks; held out: "
          + ", ".join(f"{k} {len(data[k])}" for k in SCORED), flush=True)
    tok = Tokenizer.load(os.path.join(model_dir("base"), TOKENIZER_FILE))
    package_loss = wt.ranking_loss
    rows, scored = [], {}

    def score_all(ev) -> dict:
        return {k: ev.score_programs(data[k]) for k in SCORED}

    for spec in a.runs:
        if "=" in spec:
            name, what = spec.split("=", 1)
            if "+" in what:
                members = what.split("+")
                missing = [m for m in members if m not in scored]
                if missing:
                    p.error(f"{spec}: no row named {', '.join(missing)} before it")
                scored[name] = ensemble_scores([scored[m] for m in members], data)
            else:
                scored[name] = score_all(wt.Evaluator.load(what))
            rows.append(report(name, scored[name], data))
            continue
        name, loss, steps, *rest = spec.split(":")
        novel = [f for f in rest if f == "novel"]
        seeds = [f for f in rest if f.startswith("seed") and f[4:].isdigit()]
        if len(novel) + len(seeds) != len(rest) or len(seeds) > 1:
            p.error(f"{spec}: the fields after STEPS may only be 'novel' and 'seedS'")
        train = data["train"] + (data["novel"] if novel else [])
        wt.ranking_loss = {"gap": package_loss, "top": top_weighted_loss}[loss]
        t0 = time.time()
        seed = int(seeds[0][4:]) if seeds else 0
        ev = wt.train_evaluator(train, tok, WorldModelConfig(tok.vocab_size, n_features=NUM_FEATURES),
                                steps=int(steps), threads=2, seed=seed,
                                checkpoint=f"runs/evaluator-{name}/checkpoint")
        ev.save(f"runs/evaluator-{name}", extra={"trained_on": len(train), "seed": seed})
        print(f"{name}: trained in {time.time() - t0:.0f}s", flush=True)
        scored[name] = score_all(ev)
        rows.append(report(name, scored[name], data))
    wt.ranking_loss = package_loss
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
