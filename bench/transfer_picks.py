"""Which of a task's transfers to measure: every transfer `tlm` could borrow, measured.

    .venv/bin/python bench/transfer_picks.py --db runs/transfer-picks.db [--model tlm] \
        [--archive data/eval-spr/transfer-picks.jsonl.xz]

`tlm` borrows the evaluator's top picks among the `tlm_transfers` (16) nearest training
programs rewritten for the task (TLM-1: one, TLM-10: six). Here every one of the 16 is
measured on each held-out representative task (strategy `transfer-all`, resumable: a
task's transfers already in --db are not measured again), and picking rules are scored
against the best of all 16 (geometric mean over tasks of pick / best): the evaluator's
order (what `tlm` does), the library's order (nearest source first), and the best of
16 itself (the ceiling of borrowing alone). Held-out records are only written, never a
source.
"""
from __future__ import annotations

import argparse
import math
import time

import numpy as np


def pick_ratio(order: list[int], seconds: list[float], k: int) -> float:
    """The best of the first k of `order` over the best of all (1.0: it holds the best)."""
    return min(seconds) / min(seconds[i] for i in order[:k])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--db", required=True)
    p.add_argument("--model", default="tlm")
    p.add_argument("--transfers", type=int, default=None,
                   help="how many nearest to measure (default: SearchParams.tlm_transfers); beyond "
                        "tlm_transfers, the best of the first tlm_transfers is scored against them too")
    p.add_argument("--archive", help="export --db's records to this .jsonl.xz at the end")
    a = p.parse_args()

    from tlmir.evaluate import representative_tasks
    from tlmir.lm.tlm_search import cached_sources
    from tlmir.runtime.records import RecordDB, export_jsonl
    from tlmir.runtime.target import SearchParams, host_hardware
    from tlmir.schedule.space import SearchSpace
    from tlmir.search.measurer import Measurer
    from tlmir.search.rankers import WorldRanker
    from tlmir.search.strategy import make_candidates
    from tlmir.search.tune import measure_candidate

    hw, sp = host_hardware(), SearchParams()
    library = cached_sources(a.model)
    db, meas = RecordDB(a.db), Measurer(hw=hw)
    ratios: dict[str, list[float]] = {}
    t0 = time.perf_counter()
    try:
        for task in representative_tasks("held-out"):
            space = SearchSpace(task.outputs, hw, sp)
            ranker = WorldRanker(space, task, 0)
            cands = make_candidates(space, task.args, library.transfers(space, task, a.transfers or sp.tlm_transfers),
                                    ranker.reads_features)
            done = {r.trace: r for r in db.records(task.key, hw.key)}
            seconds = []
            for c in cands:
                rec = done.get(c.trace.to_json())
                if rec is None:
                    rec = measure_candidate(meas, task, c, math.inf, hw, sp, "transfer-all", 0)
                    db.append(rec)
                seconds.append(rec.best if rec.ok else math.inf)
            if not cands or not math.isfinite(min(seconds)):
                print(f"{task.name}: no transfer measured")
                continue
            by_evaluator = list(np.argsort(-ranker.score(cands), kind="stable"))
            nearest = list(range(len(cands)))
            row = {"evaluator-1": pick_ratio(by_evaluator, seconds, 1), "nearest-1": pick_ratio(nearest, seconds, 1),
                   "evaluator-6": pick_ratio(by_evaluator, seconds, 6), "nearest-6": pick_ratio(nearest, seconds, 6)}
            if len(cands) > sp.tlm_transfers:
                row[f"first-{sp.tlm_transfers}"] = pick_ratio(nearest, seconds, sp.tlm_transfers)
            for k, v in row.items():
                ratios.setdefault(k, []).append(v)
            print(f"[{time.perf_counter() - t0:5.0f}s] {task.name[:48]:48s} {len(cands):2d} transfers, best "
                  f"{task.flops / min(seconds) / 1e9:6.1f} GFLOP/s (#{seconds.index(min(seconds))} nearest, "
                  f"#{by_evaluator.index(seconds.index(min(seconds)))} evaluator)  "
                  + "  ".join(f"{k} {v:.2f}" for k, v in row.items()), flush=True)
    finally:
        meas.close()
    print("geometric mean of pick / best of all:",
          "  ".join(f"{k} {math.exp(np.mean(np.log(v))):.3f}" for k, v in ratios.items()))
    if a.archive:
        export_jsonl(db, a.archive)
    db.close()


if __name__ == "__main__":
    main()
