"""Which of a task's transfers to measure: every transfer `tlm` could borrow, measured.

    .venv/bin/python bench/transfer_picks.py --db runs/transfer-picks.db [--model tlm] \
        [--archive data/eval-spr/transfer-picks.jsonl.xz]
    .venv/bin/python bench/transfer_picks.py --split train --gflop 0 1.2 --limit 420 \
        --db runs/transfer-picks-train.db --features runs/transfer-picks-train.jsonl

`tlm` borrows its top picks among the `tlm_transfers` (16) nearest training programs
rewritten for the task (TLM-1: one, TLM-10: six). Here every one of them (or of the
--transfers nearest) is measured on each held-out representative task (strategy
`transfer-all`, resumable: a task's transfers already in --db are not measured again),
and picking rules are scored against the best of all measured (geometric mean over tasks
of the pick's best / the best): the evaluator's order, the library's order (nearest
source first), their rank sum (what `tlm` picks by: docs/model.md, "The evaluator's rank
plus the library's"), and with --transfers beyond 16 the best of the first 16 (the
ceiling of borrowing from 16). Held-out records are only written, never a source.

With `--split train` the tasks are training tasks, each borrowing from the others (never
its own programs), as many as a picking rule needs to be fitted and checked on tasks the
held-out evaluation never sees; `--features` writes every transfer's source, ranks and
measured time (`bench/pick_rules.py` reads them).
"""
from __future__ import annotations

import argparse
import json
import math
import random
import re
import time

import numpy as np
from evolve_tasks import take_turns  # noqa: E402  (bench/ is this script's directory)
from pool_rankers import pick_ratio  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--db", required=True)
    p.add_argument("--model", default="tlm")
    p.add_argument("--transfers", type=int, default=None,
                   help="how many nearest to measure (default: SearchParams.tlm_transfers); beyond "
                        "tlm_transfers, the best of the first tlm_transfers is scored against them too")
    p.add_argument("--split", choices=("held-out", "train"), default="held-out",
                   help="held-out: each category's representative task; train: training tasks (each "
                        "borrowing from the others, never its own programs)")
    p.add_argument("--match", default="", help="train: a regular expression on task names")
    p.add_argument("--gflop", type=float, nargs=2, default=(0.0, float("inf")), metavar=("MIN", "MAX"),
                   help="train: only tasks of this many GFLOP")
    p.add_argument("--limit", type=int, default=None,
                   help="train: at most this many tasks, the categories taking turns, each in a "
                        "seeded random order")
    p.add_argument("--features", help="append each task's transfers (source, ranks, measured seconds) "
                                      "to this .jsonl, for picking rules fitted offline (a task "
                                      "written twice: bench/pick_rules.py reads the last)")
    p.add_argument("--archive", help="export --db's records to this .jsonl.xz at the end")
    p.add_argument("--search-param", action="append", default=[], metavar="NAME=VALUE",
                   help="override a SearchParams field (repeatable): how transfers are rewritten and "
                        "ordered, e.g. tlm_transfer_deviation=0; the picks' GFLOP/s compare across runs")
    a = p.parse_args()

    from tlmir.evaluate import representative_tasks
    from tlmir.lm.tlm_search import cached_sources
    from tlmir.runtime.records import RecordDB, export_jsonl
    from tlmir.runtime.target import host_hardware, search_params

    hw, sp = host_hardware(), search_params(a.search_param)
    library = cached_sources(a.model)
    if library is None:
        raise SystemExit(f"model {a.model!r} ships no transfer library")
    tasks = representative_tasks("held-out") if a.split == "held-out" else training_tasks(a)
    db = RecordDB(a.db)
    features = open(a.features, "a") if a.features else None
    ratios: dict[str, list[float]] = {}
    t0 = time.perf_counter()
    try:
        with Measured(hw, sp, db) as measured:
            for i, task in enumerate(tasks):
                row = measure_transfers(task, library, measured, a.transfers or sp.tlm_transfers, features)
                if row is None:
                    print(f"{task.name}: no transfer measured", flush=True)
                    continue
                for k, v in row.items():
                    if not k.startswith("_") or k.startswith("_gflops"):
                        ratios.setdefault(k, []).append(v)
                print(f"[{time.perf_counter() - t0:5.0f}s {i + 1}/{len(tasks)}] {task.name[:48]:48s} "
                      f"{row['_n']:2d} transfers, best {row['_gflops']:6.1f} GFLOP/s (#{row['_best']} nearest, "
                      f"#{row['_best_evaluator']} evaluator)  "
                      + "  ".join(f"{k} {v:.2f}" for k, v in row.items() if not k.startswith("_")), flush=True)
    finally:
        if features:
            features.close()
    print("geometric mean of pick / best of all:",
          "  ".join(f"{k} {math.exp(np.mean(np.log(v))):.3f}" for k, v in ratios.items()
                    if not k.startswith("_")))
    print("geometric mean GFLOP/s of the best of all and of tlm's picks (rank sum) of 1 and 6:",
          "  ".join(f"{k[8:] or 'best'} {math.exp(np.mean(np.log(v))):.1f}" for k, v in ratios.items()
                    if k.startswith("_gflops")))
    if a.archive:
        export_jsonl(db, a.archive)
    db.close()


def training_tasks(a) -> list:
    """The training tasks `--match` and `--gflop` select, the categories taking turns (each
    in a seeded random order: every size, not the smallest first), at most `--limit`."""
    from tlmir.evaluate import category
    from tlmir.workloads import split_tasks
    pattern, (lo, hi) = re.compile(a.match), a.gflop
    queues: dict[str, list] = {}
    for t in sorted(split_tasks("train"), key=lambda t: t.key):
        if pattern.search(t.name) and lo <= t.flops / 1e9 <= hi:
            queues.setdefault(category(t), []).append(t)
    for q in queues.values():
        random.Random(0).shuffle(q)
    return take_turns([q for _, q in sorted(queues.items())])[: a.limit]


class Measured:
    """Measures a candidate once: a program already in the database is read back."""

    def __init__(self, hw, sp, db):
        from tlmir.search.measurer import Measurer
        self.hw, self.sp, self.db, self.meas = hw, sp, db, Measurer(hw=hw)

    def __enter__(self) -> "Measured":
        return self

    def __exit__(self, *exc) -> None:
        self.meas.close()

    def seconds(self, task, cands) -> list[float]:
        from tlmir.search.tune import measure_candidate
        done = {r.trace: r for r in self.db.records(task.key, self.hw.key)}
        out = []
        for c in cands:
            rec = done.get(c.trace.to_json())
            if rec is None:
                rec = measure_candidate(self.meas, task, c, math.inf, self.hw, self.sp, "transfer-all", 0)
                self.db.append(rec)
            out.append(rec.best if rec.ok else math.inf)
        return out


def measure_transfers(task, library, measured: Measured, limit: int, features) -> dict | None:
    """Measure the task's `limit` transfers in tlm's order and score the picking rules
    (`pick_ratio`); with `features`, write the task's row there."""
    from tlmir.lm.tlm_search import _ranks
    from tlmir.schedule.space import SearchSpace
    from tlmir.search.rankers import WorldRanker
    from tlmir.search.strategy import make_candidates
    from tlmir.search.transfer_sources import shape_distance, shape_signature, source_category, task_type

    hw, sp = measured.hw, measured.sp
    space = SearchSpace(task.outputs, hw, sp)
    ranker = WorldRanker(space, task, 0)
    got = library.sourced_rewrites(space, task, limit, deviation_steps=sp.tlm_transfer_deviation)
    cands = make_candidates(space, task.args, [(r.schedule, r.trace) for _, r in got], ranker.reads_features)
    if not cands:
        return None
    seconds = measured.seconds(task, cands)
    if not math.isfinite(min(seconds)):
        return None
    throughput = np.array([1.0 / t if math.isfinite(t) else 0.0 for t in seconds])
    evaluator, nearest = ranker.score(cands), -np.arange(len(cands), dtype=float)
    rank_sum = -(_ranks(-evaluator) + _ranks(-nearest))  # pick_ratio's stable sort: tlm's tie order
    row = {f"{name}-{k}": pick_ratio(scores, throughput, k) for k in (1, 6)
           for name, scores in (("evaluator", evaluator), ("nearest", nearest), ("rank-sum", rank_sum))}
    if len(cands) > sp.tlm_transfers:
        row[f"first-{sp.tlm_transfers}"] = pick_ratio(nearest, throughput, sp.tlm_transfers)
    if features is not None:
        shape, kind, cat = shape_signature(task), task_type(task), source_category(task)
        features.write(json.dumps({
            "task": task.key, "name": task.name, "flops": task.flops, "hw": hw.key, "transfers": [
                {"source": s.task_key, "source_hw": s.hw_key, "this_host": s.hw_key == hw.key,
                 "source_gflops": s.gflops, "shape_distance": shape_distance(shape, s.shape),
                 "same_type": s.task_type == kind, "same_category": s.category == cat,
                 "deviation": r.deviation, "moved": len(r.moved), "sketch": s.sketch,
                 "evaluator": float(e), "seconds": t if math.isfinite(t) else None}
                for (s, r), e, t in zip(got, evaluator, seconds)]}) + "\n")
        features.flush()
    best = int(np.argmax(throughput))
    picked = [throughput[np.argsort(-rank_sum, kind="stable")[:k]].max() for k in (1, 6)]
    row.update(_gflops_pick1=task.flops * picked[0] / 1e9, _gflops_pick6=task.flops * picked[1] / 1e9)
    row.update(_n=len(cands), _best=best, _gflops=task.flops * throughput[best] / 1e9,
               _best_evaluator=list(np.argsort(-evaluator, kind="stable")).index(best))
    return row


if __name__ == "__main__":
    main()
