"""Demonstrations of the iterate run's tasks from several record archives, for `tlmir train sft`.

    .venv/bin/python bench/demonstrations.py --records data/iterate/records.jsonl.xz \
        data/stride2/evolutionary.jsonl.xz data/demos-evo/tlm+evolutionary.jsonl.xz \
        --out runs/demos-evo.jsonl
    tlmir train sft --data runs/demos-evo.jsonl --model base --out runs/tlm-evo

With `--base FILE --update ARCHIVE`, FILE's demonstrations are kept but for this host's
rows of the tasks ARCHIVE has records of, which are recomputed (e.g. the shipped model's
demonstrations with the tasks a new search covered brought up to date; another host's
rows of those tasks stay).

The rule is the iterate run's own (`tlmir.lm.iterate.best_demonstrations`): per task, the
fastest verified program measured on this host, plus each other sketch's fastest within
--slack x of it, over every archive given. Other searches of the same training tasks
(bench/evolve_tasks.py) thus replace the TLM's own programs where they found faster ones.
"""
from __future__ import annotations

import argparse
import collections
import json


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--records", nargs="+", required=True, help="record archives (.db, .jsonl, .jsonl.xz)")
    p.add_argument("--out", required=True, help="demonstrations .jsonl")
    p.add_argument("--slack", type=float, default=1.5)
    p.add_argument("--base", help="demonstrations kept as they are, but for the tasks --update has records of")
    p.add_argument("--update", nargs="+", default=[],
                   help="with --base: archives whose tasks get their demonstrations recomputed from --records")
    p.add_argument("--iterate", default="runs/iterate", help="the iterate run whose tasks are kept")
    p.add_argument("--archive-of-iterate", default="data/iterate")
    p.add_argument("--all-tasks", action="store_true",
                   help="every training task the records measured, not only the iterate run's "
                        "(bench/transfer_demos.py --tasks train measures others)")
    a = p.parse_args()
    from tlmir.lm.iterate import best_demonstrations, running_tasks
    from tlmir.lm.language import hw_prompt
    from tlmir.runtime.records import read_records
    from tlmir.runtime.target import host_hardware
    from tlmir.workloads import split_tasks
    keys = running_tasks(a.iterate, a.archive_of_iterate)
    train = {t.key: t for t in split_tasks("train")}
    tasks = dict(train) if a.all_tasks else {k: train[k] for k in keys if k in train}
    records = list(read_records(a.records))
    kept = []
    if a.base:
        updated = {r.task_key for r in read_records(a.update)}
        host = " " + " ".join(hw_prompt(host_hardware())) + " "
        with open(a.base) as fh:
            kept = [d for d in map(json.loads, fh) if d["key"] not in updated or host not in d["sentence"]]
        tasks = {k: t for k, t in tasks.items() if k in updated}
    new = best_demonstrations(records, tasks, host_hardware(), a.slack)
    demos = kept + new
    with open(a.out, "w") as fh:
        fh.writelines(json.dumps(d) + "\n" for d in demos)
    source = {(r.task_key, r.best): r.strategy for r in records if r.ok}
    firsts: dict[str, dict] = {}
    for d in new:
        firsts.setdefault(d["key"], d)
    by_source = collections.Counter(source.get((k, d["seconds"]), "?") for k, d in firsts.items())
    print(f"{len(demos)} demonstrations ({len(new)} of this host's {len(firsts)} tasks) from {len(records)} records -> {a.out}; "
          f"this host's fastest per task from: {dict(by_source)}")


if __name__ == "__main__":
    main()
