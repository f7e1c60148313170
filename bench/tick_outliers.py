"""How many measured records are scheduler-tick artefacts, per records archive.

    .venv/bin/python bench/tick_outliers.py data/iterate/records.jsonl.xz data/eval-avx2/evolutionary.jsonl.xz ...

A parallel kernel whose second thread shares its core with another runnable process (a
niced training job, another search, a neighbour's vCPU) waits at every barrier until the
scheduler's next tick: its time becomes a multiple of the tick (4 ms here), however
fast the program is. Among the records more than `--factor` times slower than their
task's best (same CPU class) and between 1 and 10 ticks, a genuine slow program's time
is spread evenly over the tick's phase; an artefact sits within `--width` of a multiple.
Printed per archive: records, slow records, the phase histogram (16 bins), and how many
slow records sit at a multiple of the tick beyond what an even spread would put there.
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from tlmir.runtime.records import TICK_SECONDS, read_records, task_bests, tick_artefact  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("paths", nargs="+", help="records (.db or .jsonl[.xz])")
    p.add_argument("--tick", type=float, default=TICK_SECONDS, help="scheduler tick in seconds")
    p.add_argument("--factor", type=float, default=20.0, help="slower than the task's best by this much")
    p.add_argument("--width", type=float, default=0.0625, help="phase window either side of a multiple")
    a = p.parse_args()
    for path in a.paths:
        recs = [r for r in read_records([path]) if r.ok]
        best = task_bests(recs)
        slow = [r for r in recs if 0.95 * a.tick <= r.best <= 10 * a.tick
                and r.best >= a.factor * best[(r.task_key, r.hw_key)]]
        phase = (np.array([r.best for r in slow]) / a.tick) % 1.0
        near = sum(tick_artefact(r.best, best[(r.task_key, r.hw_key)], a.tick, a.factor, a.width) for r in slow)
        even = 2 * a.width * len(slow)
        hist = np.histogram(phase, bins=16, range=(0, 1))[0]
        print(f"{path}: {len(recs)} records, {len(slow)} slow; at a multiple of {a.tick * 1e3:g} ms: "
              f"{near} (an even spread: {even:.0f}), so about {max(0, near - even):.0f} artefacts "
              f"({max(0, near - even) / max(1, len(recs)):.1%} of the records)")
        print(f"  phase histogram: {' '.join(str(int(h)) for h in hist)}")


if __name__ == "__main__":
    main()
