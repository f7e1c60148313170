"""Measure, on every task of an iterate run, the fastest programs of other tasks of its kind.

    .venv/bin/python bench/transfer_demos.py --records data/iterate-spr/records.jsonl.xz \
        data/iterate-spr2/records.jsonl.xz data/iterate/records.jsonl.xz ... \
        --iterate runs/iterate-spr2 --archive-of-iterate data/iterate-spr2 \
        --db runs/transfer-spr.db [--per-task 8] [--archive data/transfer-spr/records.jsonl.xz]

The iterate run's demonstrations are each task's best of ~30 of the model's own samples:
on dense+GELU the best of a task ran 130-290 GFLOP/s with one- or two-row register
tiles, where evolutionary-1000 on a held-out shape found 375 with an 8x48 tile. Here
each training task's fastest program (on any host with this host's vector width) is
a source; every task of the same op family gets the `--per-task` fastest sources of
other tasks rewritten for its shape (`tlmir.search.transfer_sources`), first those of its
category (a 3x3 conv from 3x3 convs), and measures those it has not measured yet
(`--tasks train`: then every other training task up to --max-gflop, which the iterate run
never measured: their demonstrations are transfers alone)
(strategy `transfer`). Only training tasks are read or measured: held-out records never
become sources. Resumable: a task's transfers already in --db are not measured again.
`bench/demonstrations.py --records ... runs/transfer-spr.db` then takes them into the
demonstrations wherever they beat the model's own programs.
"""
from __future__ import annotations

import argparse
import collections
import math
import time


def normalized(trace_json: str) -> str:
    from tlmir.schedule.decider import Trace
    return Trace.from_json(trace_json).to_json()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--records", nargs="+", required=True, help="record archives of training tasks (.db, .jsonl.xz)")
    p.add_argument("--iterate", default="runs/iterate", help="the iterate run whose tasks get transfers")
    p.add_argument("--archive-of-iterate", default="data/iterate")
    p.add_argument("--db", required=True)
    p.add_argument("--per-task", type=int, default=8)
    p.add_argument("--tasks", choices=("iterate", "train", "held-out"), default="iterate",
                   help="the iterate run's tasks, or those and then every other training task, or "
                        "(a probe of transfer alone) the held-out representative tasks")
    p.add_argument("--max-gflop", type=float, default=1.0, help="with --tasks train: skip larger tasks")
    p.add_argument("--archive", help="export --db's records to this .jsonl.xz at the end")
    a = p.parse_args()

    from tlmir.evaluate import representative_tasks
    from tlmir.lm.iterate import by_type, running_tasks
    from tlmir.runtime.records import RecordDB, export_jsonl, read_records
    from tlmir.runtime.target import SearchParams, host_hardware
    from tlmir.schedule.space import SearchSpace
    from tlmir.search.measurer import Measurer
    from tlmir.search.strategy import make_candidate
    from tlmir.search.transfer_sources import SourceLibrary
    from tlmir.search.tune import measure_candidate
    from tlmir.workloads import split_tasks

    hw, sp = host_hardware(), SearchParams()
    train = {t.key: t for t in split_tasks("train")}
    if a.tasks == "held-out":  # sources stay training tasks: `train` filters every record read
        targets = representative_tasks("held-out")
    else:
        targets = [train[k] for k in running_tasks(a.iterate, a.archive_of_iterate) if k in train]
    if a.tasks == "train":
        mine = {t.key for t in targets}
        targets += by_type([t for t in train.values() if t.key not in mine and t.flops <= a.max_gflop * 1e9])
    records = read_records(a.records)
    seen: dict[str, set] = collections.defaultdict(set)          # task -> traces measured here
    host_best: dict[str, float] = {}                             # task -> best seconds here
    for r in records:
        if r.hw_key == hw.key and r.task_key in train:
            seen[r.task_key].add(normalized(r.trace))
            if r.ok:
                host_best[r.task_key] = min(host_best.get(r.task_key, math.inf), r.best)
    library = SourceLibrary.from_records(records, train, sp)  # training tasks only
    db = RecordDB(a.db)
    meas = Measurer(hw=hw)
    t0, measured = time.perf_counter(), 0
    try:
        for n, task in enumerate(targets):
            mine = {normalized(r.trace) for r in db.records(task.key, hw.key)} | seen[task.key]
            space = SearchSpace(task.outputs, hw, sp)
            plan = library.transfers(space, task, a.per_task, exclude=frozenset(mine))
            best = host_best.get(task.key, math.inf)
            gained = []
            for sch_trace in plan:
                cand = make_candidate(space, task.args, sch_trace)
                rec = measure_candidate(meas, task, cand, best, hw, sp, "transfer", 0)
                db.append(rec)
                measured += 1
                if rec.ok:
                    gained.append(rec.best)
            new = min(gained, default=math.inf)
            print(f"[{time.perf_counter() - t0:7.0f}s] {n + 1}/{len(targets)} {task.name}: "
                  f"{len(plan)} transfers, best {task.flops / new / 1e9 if gained else 0:.1f} GFLOP/s "
                  f"vs own {task.flops / best / 1e9 if math.isfinite(best) else 0:.1f}"
                  f"{' *' if new < best else ''}", flush=True)
            if new < best:
                host_best[task.key] = new
    finally:
        meas.close()
    print(f"{measured} measurements in {time.perf_counter() - t0:.0f} s")
    if a.archive:
        export_jsonl(db, a.archive)
    db.close()


if __name__ == "__main__":
    main()
