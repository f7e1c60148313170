"""Which of a task's transfers to measure: every transfer `tlm` could borrow, measured.

    .venv/bin/python bench/transfer_picks.py --db runs/transfer-picks.db [--model tlm] \
        [--archive data/eval-spr/transfer-picks.jsonl.xz]

`tlm` borrows its top picks among the `tlm_transfers` (16) nearest training programs
rewritten for the task (TLM-1: one, TLM-10: six). Here every one of them (or of the
--transfers nearest) is measured on each held-out representative task (strategy
`transfer-all`, resumable: a task's transfers already in --db are not measured again),
and picking rules are scored against the best of all measured (geometric mean over tasks
of the pick's best / the best): the evaluator's order, the library's order (nearest
source first), and with --transfers beyond 16 the best of the first 16 (the ceiling of
borrowing from 16). `tlm` now orders by the sum of the first two ranks (docs/model.md,
"The evaluator's rank plus the library's"). Held-out records are only written, never a
source.
"""
from __future__ import annotations

import argparse
import math
import time

import numpy as np
from pool_rankers import pick_ratio  # noqa: E402  (bench/ is this script's directory)


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
            got = library.transfers(space, task, a.transfers or sp.tlm_transfers,
                                    deviation_steps=sp.tlm_transfer_deviation)  # in tlm's order
            cands = make_candidates(space, task.args, got, ranker.reads_features)
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
            throughput = np.array([1.0 / t if math.isfinite(t) else 0.0 for t in seconds])
            evaluator, nearest = ranker.score(cands), -np.arange(len(cands), dtype=float)
            row = {f"{name}-{k}": pick_ratio(scores, throughput, k)
                   for k in (1, 6) for name, scores in (("evaluator", evaluator), ("nearest", nearest))}
            if len(cands) > sp.tlm_transfers:
                row[f"first-{sp.tlm_transfers}"] = pick_ratio(nearest, throughput, sp.tlm_transfers)
            for k, v in row.items():
                ratios.setdefault(k, []).append(v)
            best = int(np.argmax(throughput))
            by_evaluator = list(np.argsort(-evaluator, kind="stable"))
            print(f"[{time.perf_counter() - t0:5.0f}s] {task.name[:48]:48s} {len(cands):2d} transfers, best "
                  f"{task.flops * throughput[best] / 1e9:6.1f} GFLOP/s (#{best} nearest, "
                  f"#{by_evaluator.index(best)} evaluator)  "
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
