"""Which transfers keep their tiles: the library's order scored on transfers already measured.

    .venv/bin/python bench/transfer_deviation.py --hw cpu-avx512-c2-l1_48K-l2_1024K \
        --ref data/eval-zen5/evolutionary.jsonl.xz --runs data/eval-zen5/tlm-*.jsonl.xz \
        [--weights 0 1 2 3 4 5] [--model tlm]

No measurement: every held-out representative task's transfers (`SourceLibrary.transfers`)
are rewritten here and looked up, by trace, among the programs the --runs records
measured on that host (runs of `tlm` measure transfers; over many runs most of the 48
nearest have been). For each `deviation_steps` weight, the library's first pick and the
best of its first six are scored against the best transfer measured (geometric mean
over the tasks whose first pick was measured; the best of the 48 nearest's measured
transfers is the reference of both), and the ratios to --ref's best say where
that stands against a long search. The correlation of a rewrite's tile deviation with
its throughput relative to the task's other measured transfers is printed first.
"""
from __future__ import annotations

import argparse
import math
from collections import defaultdict

import numpy as np


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hw", required=True, help="the host key the runs measured on")
    p.add_argument("--ref", required=True, help="records of the long search (evolutionary-1000)")
    p.add_argument("--runs", nargs="+", required=True, help="records of runs that measured transfers")
    p.add_argument("--weights", type=float, nargs="+", default=[0, 1, 2, 3, 4, 5])
    p.add_argument("--model", default="tlm")
    a = p.parse_args()

    from tlmir.evaluate import representative_tasks
    from tlmir.lm.tlm_search import cached_sources
    from tlmir.runtime.records import read_records
    from tlmir.runtime.target import HardwareParams, SearchParams
    from tlmir.schedule.decider import Trace
    from tlmir.schedule.space import SearchSpace
    from tlmir.search.transfer import replay

    library, hw = cached_sources(a.model), HardwareParams.from_key(a.hw)
    seconds: dict[str, dict[str, float]] = defaultdict(dict)
    for r in read_records(a.runs):
        if r.ok and r.hw_key == a.hw:
            seconds[r.task_key][r.trace] = min(seconds[r.task_key].get(r.trace, math.inf), r.best)
    ref: dict[str, float] = defaultdict(lambda: math.inf)
    for r in read_records([a.ref]):
        if r.ok:
            ref[r.task_key] = min(ref[r.task_key], r.best)

    tasks = [(t, SearchSpace(t.outputs, hw, SearchParams())) for t in representative_tasks()]
    devs, rels, best = [], [], {}
    for task, space in tasks:  # deviation against relative throughput, over the 48 nearest
        got = [replay(space, Trace.from_json(s.trace), s.sketch) for s in library.nearest(task, a.hw)[:48]]
        pairs = [(g.deviation, seconds[task.key][g.trace.to_json()]) for g in got
                 if g is not None and g.trace.to_json() in seconds[task.key]]
        if pairs:
            best[task.key] = min(s for _, s in pairs)
        if len(pairs) >= 3:
            logs = np.log([1 / s for _, s in pairs])
            devs += [d for d, _ in pairs]
            rels += list(logs - logs.mean())
    print(f"{a.hw}: correlation of tile deviation with relative log throughput "
          f"{np.corrcoef(devs, rels)[0, 1]:+.3f} over {len(devs)} measured transfers")

    def gm(xs: list[float]) -> float:
        return math.exp(np.mean(np.log(xs)))

    for w in a.weights:
        first, six, vs_ref = [], [], []
        for task, space in tasks:
            picks = [seconds[task.key].get(trace.to_json())
                     for _, trace in library.transfers(space, task, 16, deviation_steps=w)]
            if task.key not in best or not picks or picks[0] is None:
                continue
            first.append(best[task.key] / picks[0])
            six.append(best[task.key] / min(s for s in picks[:6] if s is not None))
            vs_ref.append(ref[task.key] / picks[0])
        print(f"  deviation_steps {w:g}: {len(first)} tasks, first pick {gm(first):.3f} of the best measured "
              f"({gm(vs_ref):.3f} of the reference), best of the first six {gm(six):.3f}")


if __name__ == "__main__":
    main()
