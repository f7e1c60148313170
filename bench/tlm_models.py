"""Several searches' best programs on the held-out tasks, re-timed side by side.

    .venv/bin/python bench/tlm_models.py --ref evolutionary-1000 \
        evolutionary-1000=data/eval/evolutionary.jsonl.xz:1000 \
        tlm=data/eval/tlm@world-10.jsonl.xz:10 \
        quality=runs/eval-q/tlm-10.db:10 [--top 3] [--rounds 3] [--json out.json]

`tlmir eval --phase report` confirms its runs' programs the same way
(`tlmir.evaluate.confirmed_seconds`); this compares runs of several evaluation
directories, e.g. language models whose TLM-10 differ by a few percent on a shared,
noisy machine. It takes each run's --top fastest verified programs per task among the
run's first K measurements of the task, builds and checks every one once, then times
them in --rounds passes, the programs of a task alternating within a pass. A
run's time for a task is its fastest program's fastest pass. Printed: per task
GFLOP/s, then per run Σ latency and the Σ / geometric-mean ratio against --ref
(> 1: the run is faster). A run without a verified program of a task is left out of it.
A PATH with a glob pattern reads every file it matches as one run: every TLM run archived
on a host (`union='data/eval-zen5/tlm-*.jsonl.xz':100000 --top 8`) is the best the model
and its library have ever found there.
"""
from __future__ import annotations

import argparse
import glob
import json
import math
import os

from tlmir.lm.registry import passive_openmp


def parse_run(text: str) -> tuple[str, str, int]:
    try:
        label, rest = text.split("=", 1)
        path, k = rest.rsplit(":", 1)
        return label, path, int(k)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a run is LABEL=PATH:K, got {text!r}") from None


def best_programs(path: str, k: int, tasks: list, hw_key: str, top: int) -> dict[str, list[str]]:
    """task key -> traces of the `top` fastest verified records among the task's first k
    (fewer where the search stopped early: a space with fewer programs than k)."""
    from tlmir.runtime.records import read_records
    by_task: dict[str, list] = {}
    for r in read_records(sorted(glob.glob(path)) or [path]):
        if r.hw_key == hw_key:
            by_task.setdefault(r.task_key, []).append(r)
    out = {}
    for t in tasks:
        recs = by_task.get(t.key, [])[:k]
        ok = [r for r in recs if r.ok]
        if ok:
            out[t.key] = [r.trace for r in sorted(ok, key=lambda r: r.best)[:top]]
    return out


def main() -> None:
    passive_openmp()
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", type=parse_run, help="LABEL=PATH:K (records .db / .jsonl.xz; a glob pattern "
                                                                 "reads every file it matches as one run)")
    p.add_argument("--ref", required=True, help="the label the ratios are against")
    p.add_argument("--top", type=int, default=3, help="programs per run and task re-timed")
    p.add_argument("--rounds", type=int, default=3, help="alternating timing passes")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--json", help="write the per-task seconds here")
    a = p.parse_args()
    from tlmir.evaluate import confirmed_seconds, representative_tasks
    from tlmir.runtime.target import host_hardware
    hw = host_hardware()
    labels = [label for label, _, _ in a.runs]
    if a.ref not in labels:
        p.error(f"--ref {a.ref!r} is not one of the runs {labels}")
    for label, path, _ in a.runs:
        if not os.path.exists(path):
            p.error(f"run {label}: records file {path} does not exist")
    tasks = representative_tasks("held-out")
    best = {label: best_programs(path, k, tasks, hw.key, a.top) for label, path, k in a.runs}
    rows = []
    for task in tasks:
        programs = {label: best[label][task.key] for label in labels if task.key in best[label]}
        secs = confirmed_seconds(task, programs, a.threads, a.rounds)
        rows.append({"task": task.name, "flops": task.flops, "seconds": secs})
        print(f"{task.name:<56}" + "".join(f" {lab} {task.flops / s / 1e9:7.1f}" for lab, s in secs.items()),
              flush=True)
    print(f"\n{len(tasks)} held-out tasks, {a.threads} threads, {hw.key}; GFLOP/s above: each run's "
          f"{a.top} best programs, best of {a.rounds} alternating passes")
    for label in labels:
        both = [r["seconds"] for r in rows if label in r["seconds"] and a.ref in r["seconds"]]
        total = sum(s[label] for s in both)
        ratio = sum(s[a.ref] for s in both) / total if total else math.nan
        geo = math.exp(sum(math.log(s[a.ref] / s[label]) for s in both) / len(both)) if both else math.nan
        print(f"{label:<24} {len(both):2d} tasks  Σ {total * 1e3:8.3f} ms  vs {a.ref}: Σ {ratio:.3f}  "
              f"geomean {geo:.3f}")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"hardware": hw.key, "threads": a.threads, "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
