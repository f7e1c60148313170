"""Stride-2 convolutions: strided vector loads as a gather or as contiguous loads + a shuffle.

    .venv/bin/python bench/strided_loads.py [--network resnet-50] [--trials 10] [--top 3] \
        [--db runs/strided.db]

Tunes every stride-2 conv of the network with the shipped TLM (`--trials` measurements,
records kept in `--db`, so a second run only re-times), then compiles each task's `--top`
best programs twice: with vector loads of constant stride 2-4 emitted as gathers (the
code generator's limit `MAX_SHUFFLED_STRIDE` set to 1) and as contiguous loads + one
shuffle (the default). Both kernels are checked against numpy, then timed alternately, 5
rounds of 5 calls, the fastest round kept; printed: GFLOP/s gather -> shuffled.
"""
from __future__ import annotations

import argparse

import numpy as np

import tlmir.codegen_cpu.exprs as exprs
from tlmir.build import build, reference_outputs
from tlmir.runtime.records import RecordDB
from tlmir.runtime.target import parse_target
from tlmir.schedule.decider import Trace
from tlmir.schedule.space import SearchSpace
from tlmir.search.tune import tune
from tlmir.workloads import network_tasks


def both_ways(task, schedule) -> dict:
    """{stride limit: kernel} for gathers (1) and shuffled loads (the default)."""
    shuffled, out = exprs.MAX_SHUFFLED_STRIDE, {}
    try:
        for limit in (1, shuffled):
            exprs.MAX_SHUFFLED_STRIDE = limit
            out[limit] = build(schedule, task.args)
    finally:
        exprs.MAX_SHUFFLED_STRIDE = shuffled
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--network", default="resnet-50")
    p.add_argument("--trials", type=int, default=10)
    p.add_argument("--top", type=int, default=3)
    p.add_argument("--db", default="runs/strided.db")
    a = p.parse_args()
    hw = parse_target("cpu")
    tasks = [t for t, _ in network_tasks(a.network) if t.name.startswith("conv") and "_s2_" in t.name]
    print(f"{a.network}: {len(tasks)} stride-2 convs, TLM-{a.trials}, top {a.top} programs each, "
          f"{hw.key}; GFLOP/s gather -> shuffled")
    with RecordDB(a.db) as db:
        for task in tasks:
            tune(task, trials=a.trials, strategy="tlm", db=db, progress=False)
            best = sorted((r for r in db.records(task.key, hw.key) if r.ok), key=lambda r: r.best)
            space = SearchSpace(task.outputs, hw)
            ins = task.random_inputs(0)
            ref = reference_outputs(task, ins)
            cells = []
            for rec in best[:a.top]:
                kernels = both_ways(task, space.replay(Trace.from_json(rec.trace)))
                arrays = {}
                for limit, k in kernels.items():
                    outs = [np.zeros(t.shape, t.dtype) for t in task.outputs]
                    k(*ins, *outs)
                    np.testing.assert_allclose(outs[0], ref[0], rtol=1e-3, atol=1e-3)
                    arrays[limit] = ins + outs
                fastest = {limit: np.inf for limit in kernels}
                for _ in range(5):
                    for limit, k in kernels.items():
                        fastest[limit] = min(fastest[limit], k.benchmark(*arrays[limit], repeat=5).median)
                g = [task.flops / fastest[limit] / 1e9 for limit in kernels]
                cells.append(f"{g[0]:6.1f} -> {g[1]:6.1f}")
            print(f"{task.name:46s} " + "   ".join(cells), flush=True)


if __name__ == "__main__":
    main()
