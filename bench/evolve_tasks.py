"""Evolutionary search on the training tasks of an iterate run (or on novel tasks, `--novel`)
whose names match a pattern, into one records database: fresh measurements where the iterate
records have gone stale, or a real search where the iterate run's few samples are weak.

    .venv/bin/python bench/evolve_tasks.py --match '_s2_' --db runs/evo-s2.db \
        --archive data/stride2/evolutionary.jsonl.xz [--trials 64] [--iterate runs/iterate]

Why: a code generator change can move which programs are fastest. Shuffled strided loads
made stride-2 convolutions vectorized along the strided axis 1.6-4.8x faster, but the
iterate records (and so the TLM's demonstrations) were measured when those were gathers;
the model learned to avoid them. Evolutionary search re-explores each task under today's
code generator; its records join the demonstrations like the iterate run's own
(`tlmir train sft --records`, or imported into the iterate run's database).

`--strategy tlm+evolutionary` starts each search from the shipped TLM's programs, so
its demonstrations improve on what the model already writes rather than on random ones.
`--strategy tlm --trials 10 --search-param tlm_borrow_own=true` refreshes the shipped
library on a new host: each task measures the model's programs, its neighbours' and its
own from other hosts, and `tlmir train sources` keeps the fastest here.

`--all-train` searches any training task of the split, not only the iterate run's: the
library keeps the fastest program of every training task, and the tasks never iterated
have only programs borrowed or measured on other hosts.

`--search-param sketch_filter=packconv` draws the population from the packed-weights
sketches only, and leaves out the tasks that have none: the library then holds the
fastest packed program where it beats the one kept before.

Tasks run smallest first (with --interleave, the categories take turns), each to --trials measurements; a rerun resumes from the
database. With --archive the database is exported after every task (kept in the repository).
"""
from __future__ import annotations

import argparse
import re

from tlmir.lm.registry import passive_openmp


def main() -> None:
    passive_openmp()
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--match", required=True, help="regular expression on task names")
    p.add_argument("--db", required=True, help="records database (resumes)")
    p.add_argument("--archive", help="export the database here (.jsonl.xz) after every task")
    p.add_argument("--trials", type=int, default=64)
    p.add_argument("--strategy", default="evolutionary",
                   help="evolutionary, or tlm+evolutionary: the shipped TLM writes the first round "
                        "and seeds the population")
    p.add_argument("--interleave", action="store_true",
                   help="take the categories (tlmir.evaluate.category) in turns, each smallest first, "
                        "so a run cut short has searched some of every one")
    p.add_argument("--iterate", default="runs/iterate", help="the iterate run whose tasks are searched")
    p.add_argument("--archive-of-iterate", default="data/iterate",
                   help="where the iterate run's task list is read when --iterate has none")
    p.add_argument("--gflop", type=float, nargs=2, default=(0.0, float("inf")), metavar=("MIN", "MAX"),
                   help="only tasks of this many GFLOP (a search of microsecond kernels teaches little)")
    which = p.add_mutually_exclusive_group()  # the iterate run's tasks when neither
    which.add_argument("--all-train", action="store_true",
                       help="search any training task (tlmir.workloads.split_tasks('train')), not only "
                            "the iterate run's: about 1,500 training tasks were never iterated")
    which.add_argument("--novel", type=int, default=0,
                       help="search this many tasks of no workload (tlmir.lm.novel_tasks, seed 0: those "
                            "`tlmir iterate --split novel` measures) instead of the iterate run's")
    p.add_argument("--search-param", action="append", default=[], metavar="NAME=VALUE",
                   help="a SearchParams field, as tlmir tune takes it (tlm_borrow_own=true: a library "
                        "refreshed on a new host)")
    p.add_argument("--skip-searched", nargs="+", default=[], metavar="RECORDS",
                   help="leave out the tasks these records (.db / .jsonl[.xz]) hold, on any hardware")
    a = p.parse_args()
    from tlmir.lm.iterate import running_tasks
    from tlmir.runtime.records import RecordDB, export_jsonl, read_records
    from tlmir.runtime.target import search_params
    from tlmir.search.tune import tune
    from tlmir.workloads import split_tasks
    pattern, sp = re.compile(a.match), search_params(a.search_param)
    if a.novel:
        from tlmir.lm.novel_tasks import novel_tasks
        pool = novel_tasks(a.novel)
    elif a.all_train:
        pool = split_tasks("train")
    else:
        keys = set(running_tasks(a.iterate, a.archive_of_iterate))
        pool = [t for t in split_tasks("train") if t.key in keys]
    searched = {r.task_key for r in read_records(a.skip_searched)}
    lo, hi = a.gflop
    tasks = sorted((t for t in pool if pattern.search(t.name) and lo <= t.flops / 1e9 <= hi
                    and t.key not in searched),
                   key=lambda t: (t.flops, t.key))
    if sp.sketch_filter:
        tasks = [t for t in tasks if has_sketch(t, sp)]
    if a.interleave:
        from tlmir.evaluate import category
        queues: dict[str, list] = {}
        for t in tasks:
            queues.setdefault(category(t), []).append(t)
        tasks = take_turns(list(queues.values()))
    print(f"{len(tasks)} tasks match {a.match!r}", flush=True)
    with RecordDB(a.db) as db:
        for i, task in enumerate(tasks):
            res = tune(task, trials=a.trials, strategy=a.strategy, db=db, progress=False, sp=sp)
            print(f"[{i + 1}/{len(tasks)}] {task.name}: {res.measurements} measured, best "
                  f"{task.flops / res.best_seconds / 1e9:.1f} GFLOP/s", flush=True)
            if a.archive:
                export_jsonl(db, a.archive)


def has_sketch(task, sp) -> bool:
    """Whether `sp.sketch_filter` matches a sketch of the task on this host (a search pointed
    at packed-weights convolutions leaves out the tasks that have none)."""
    from tlmir.errors import ScheduleError
    from tlmir.schedule.space import SearchSpace
    try:
        SearchSpace(task.outputs, sp=sp)
    except ScheduleError:
        return False
    return True


def take_turns(queues: list[list]) -> list:
    """The queues' first items in queue order, then their second items, ...: a run cut short
    has taken some of every queue."""
    return [q[i] for i in range(max(map(len, queues), default=0)) for q in queues if i < len(q)]


if __name__ == "__main__":
    main()
