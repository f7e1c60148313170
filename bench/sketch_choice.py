"""Which sketch each search's best program uses, against the best of every sketch a long
search found: does a short search lose by picking the wrong sketch or by tiling it badly?

    .venv/bin/python bench/sketch_choice.py --ref data/eval-avx2/evolutionary.jsonl.xz \
        --runs data/eval-avx2/tlm-10.jsonl.xz data/eval-avx2/tlm-10-s1.jsonl.xz [--min-ref 900]

Per task the reference (`--ref`, e.g. evolutionary-1000) has searched with at least
`--min-ref` verified measurements: the table gives, for each of its sketches, the best
throughput found in that sketch as a fraction of the reference's best; then the sketch of
the best program of `--runs` (all of them pooled) and its fraction. A run whose sketch reads
0.6 where another sketch reads 1.0 lost on the sketch, one whose sketch reads 1.0 lost on
the tiles.
"""
from __future__ import annotations

import argparse
import json


def best_by_sketch(records) -> dict[str, dict[int, float]]:
    """task name -> sketch id -> fastest verified seconds."""
    out: dict[str, dict[int, float]] = {}
    for r in records:
        if r.ok:
            sketch = json.loads(r.trace)["sketch"]
            per = out.setdefault(r.task_name, {})
            per[sketch] = min(per.get(sketch, r.best), r.best)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ref", nargs="+", required=True, help="record archives of the long search")
    p.add_argument("--runs", nargs="+", required=True, help="record archives of the short searches")
    p.add_argument("--min-ref", type=int, default=900, help="tasks the reference measured at least this often")
    a = p.parse_args()
    from tlmir.runtime.records import read_records
    ref_records = read_records(a.ref)
    counts: dict[str, int] = {}
    for r in ref_records:
        counts[r.task_name] = counts.get(r.task_name, 0) + r.ok
    ref = best_by_sketch(ref_records)
    runs = best_by_sketch(read_records(a.runs))
    print(f"{'task':<52} {'reference: sketch best / overall best':<40} run: sketch, fraction")
    for name in sorted(ref):
        if counts[name] < a.min_ref or name not in runs or len(ref[name]) < 2:
            continue
        top = min(ref[name].values())
        cells = " ".join(f"{s}:{top / t:.2f}" for s, t in sorted(ref[name].items()))
        sketch, seconds = min(runs[name].items(), key=lambda kv: kv[1])
        print(f"{name:<52} {cells:<40} {sketch}, {top / seconds:.2f}")


if __name__ == "__main__":
    main()
