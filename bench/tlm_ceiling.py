"""Where TLM-10 loses: the language model's pool, or the evaluator's pick from it.

    .venv/bin/python bench/tlm_ceiling.py --db runs/ceiling.db --pool 640 --random 54 \
        [--model default] [--evaluator default] [--json runs/ceiling.json]

Ranked TLM-10 (`tlm@world`) has the model write 64 programs per measurement and the
world-model evaluator measure its top 10 of the 640. Per held-out task this writes the
same pool (same seed, so the same programs), measures the evaluator's top 10 and then
`--random` more drawn uniformly from the rest of the pool, and records all of them
(strategy `pool-top` / `pool-random`, in that order, so `bench/tlm_models.py
X=runs/ceiling.db:10` is the ranked TLM-10 and `:64` the best of everything measured).

Printed per task: the best GFLOP/s of the top 10 and of the random draws, where the
fastest random draw sat in the evaluator's order, and the Spearman correlation of the
evaluator's score with the measured throughput over the random draws (an unbiased
sample of the pool). If the random draws hold programs much faster than the top 10, the
evaluator is what loses; if not, the model does not write them. Resumable: a task
whose records are in --db is read back, not measured again.
"""
from __future__ import annotations

import argparse
import json
import math

import numpy as np

from tlmir.lm.registry import passive_openmp


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    if len(a) < 3:
        return math.nan
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1])


def unseen_train_tasks() -> list:
    """Per category of the training split, the median-FLOP task of at most 1 GFLOP (as
    iterate's) that no archive has records of."""
    import glob
    from tlmir.evaluate import median_per_category
    from tlmir.runtime.records import read_records
    from tlmir.workloads import split_tasks
    seen = {r.task_key for r in read_records(sorted(glob.glob("data/*/*.jsonl.xz")))}
    return median_per_category([t for t in split_tasks("train") if t.key not in seen and t.flops <= 1e9])


def pool_task(task, hw, sp, db, measurer, args) -> dict:
    """Write the pool, measure the evaluator's top 10 and the random draws (or read them
    back from the database), and summarize."""
    from tlmir.lm.tlm_search import TLMSearch
    from tlmir.schedule.space import SearchSpace
    from tlmir.search.tune import measure_candidate

    space = SearchSpace(task.outputs, hw, sp)
    search = TLMSearch(space, task.args, args.seed, task=task, model=args.model, ranked=True)
    pool = search._write(args.pool, set(), draws=2)
    scores = search.ranker.score(pool)
    order = np.argsort(-scores, kind="stable")
    rank = np.empty(len(pool), dtype=int)
    rank[order] = np.arange(len(pool))
    rng = np.random.default_rng(args.seed)
    rest = order[args.top:]
    draws = rng.choice(rest, size=min(args.random, len(rest)), replace=False) if len(rest) else []
    plan = [(i, "pool-top") for i in order[:args.top]] + [(i, "pool-random") for i in draws]
    done = {r.trace: r for r in db.records(task.key, hw.key)}
    rows = []
    best = math.inf
    for i, label in plan:
        rec = done.get(pool[i].trace.to_json())
        if rec is None:
            rec = measure_candidate(measurer, task, pool[i], best, hw, sp, label, 0)
            db.append(rec)
        if rec.ok:
            best = min(best, rec.best)
        rows.append((label, int(rank[i]), float(scores[i]), rec.best if rec.ok else None))

    def best_gf(label):
        secs = [s for lab, _, _, s in rows if lab == label and s]
        return task.flops / min(secs) / 1e9 if secs else 0.0

    rand = [(r, sc, s) for lab, r, sc, s in rows if lab == "pool-random"]
    ok = [(r, sc, s) for r, sc, s in rand if s]
    fastest = min(ok, key=lambda x: x[2]) if ok else None
    rho = spearman(np.array([sc for _, sc, _ in ok]), np.array([1.0 / s for _, _, s in ok])) if ok else math.nan
    return {"task": task.name, "pool": len(pool), "top": best_gf("pool-top"), "random": best_gf("pool-random"),
            "fastest_random_rank": fastest[0] if fastest else None, "spearman": rho,
            "random_failed": len(rand) - len(ok)}


def main() -> None:
    passive_openmp()
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--db", required=True)
    p.add_argument("--pool", type=int, default=640, help="programs the model writes per task")
    p.add_argument("--top", type=int, default=10, help="the evaluator's picks measured")
    p.add_argument("--random", type=int, default=54, help="random draws from the rest measured")
    p.add_argument("--model", default="default")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--match", default="", help="only tasks whose name contains this")
    p.add_argument("--split", choices=("held-out", "train"), default="held-out",
                   help="train: per category of the training split, the median-FLOP task of those no "
                        "archive under data/ has a record of (unseen by the model's demonstrations and "
                        "the evaluator: a validation set)")
    p.add_argument("--json", default="")
    args = p.parse_args()

    from tlmir.evaluate import representative_tasks
    from tlmir.runtime.records import RecordDB
    from tlmir.runtime.target import SearchParams, cpu_model_name, host_hardware
    from tlmir.search.measurer import Measurer

    hw, sp = host_hardware(), SearchParams()
    tasks = representative_tasks("held-out") if args.split == "held-out" else unseen_train_tasks()
    tasks = [t for t in tasks if args.match in t.name]
    out = []
    with RecordDB(args.db) as db:
        measurer = Measurer(hw=hw)
        try:
            for t in tasks:
                row = pool_task(t, hw, sp, db, measurer, args)
                out.append(row)
                print(f"{row['task']:<56} top10 {row['top']:7.1f}  random{args.random} {row['random']:7.1f}  "
                      f"fastest random at rank {row['fastest_random_rank']}  rho {row['spearman']:+.2f}",
                      flush=True)
        finally:
            measurer.close()
    ratio = [r["random"] / r["top"] for r in out if r["top"] and r["random"]]
    print(f"\n{len(out)} {args.split} tasks, {cpu_model_name()}, {hw.key}: best of {args.random} random pool draws / "
          f"best of the evaluator's top {args.top}: geomean {math.exp(np.mean(np.log(ratio))):.3f}; "
          f"median Spearman {np.nanmedian([r['spearman'] for r in out]):+.2f}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"cpu": cpu_model_name(), "hw": hw.key, "args": vars(args), "tasks": out}, fh, indent=1)


if __name__ == "__main__":
    main()
