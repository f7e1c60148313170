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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ref", nargs="+", required=True, help="record archives of the long search")
    p.add_argument("--runs", nargs="+", required=True, help="record archives of the short searches")
    p.add_argument("--min-ref", type=int, default=900, help="tasks the reference measured at least this often")
    a = p.parse_args()
    from tlmir.lm.iterate import fastest_by_sketch
    from tlmir.runtime.records import read_records
    ref_records = read_records(a.ref)
    counts: dict[str, int] = {}
    for r in ref_records:
        counts[r.task_key] = counts.get(r.task_key, 0) + r.ok
    ref = fastest_by_sketch(ref_records)
    runs = fastest_by_sketch(read_records(a.runs))
    print(f"{'task':<52} {'reference: sketch best / overall best':<40} run: sketch, fraction")
    rows = []
    for key, per_sketch in ref.items():
        if counts[key] < a.min_ref or key not in runs or len(per_sketch) < 2:
            continue
        top = min(r.best for r in per_sketch.values())
        cells = " ".join(f"{s}:{top / r.best:.2f}" for s, r in sorted(per_sketch.items()))
        sketch, run_best = min(runs[key].items(), key=lambda kv: kv[1].best)
        rows.append(f"{run_best.task_name:<52} {cells:<40} {sketch}, {top / run_best.best:.2f}")
    print("\n".join(sorted(rows)))


if __name__ == "__main__":
    main()
