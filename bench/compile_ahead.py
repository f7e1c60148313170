"""Measuring a round with its programs compiled ahead in processes, or each in its trial.

LLVM takes 0.2-0.8 s a program, most of a small kernel's trial. `Measurer.prepare`
compiles a round in `compile_workers` processes before it is timed. This measures the
same random programs of each task both ways, in turns, and prints the seconds.

    .venv/bin/python bench/compile_ahead.py [--programs 48] [--tasks NAME ...]
"""
from __future__ import annotations

import argparse
import random
import time

DEFAULT_TASKS = ("conv2d_nchw_1x128x14x14_k32_3x3_s1_p1", "softmax_256x128")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tasks", nargs="+", default=list(DEFAULT_TASKS), help="held-out task names")
    p.add_argument("--programs", type=int, default=48)
    p.add_argument("--passes", type=int, default=2)
    a = p.parse_args()
    from tlmir.runtime.target import host_hardware
    from tlmir.schedule.lower import lower
    from tlmir.schedule.space import SearchSpace
    from tlmir.search.measurer import Measurer
    from tlmir.workloads import split_tasks
    hw = host_hardware()
    tasks = {t.name: t for t in split_tasks("held-out")}
    for name in a.tasks:
        task = tasks[name]
        space, rng = SearchSpace(task.outputs, hw), random.Random(5)
        funcs = [lower(space.sample(rng)[0], task.args) for _ in range(a.programs + 1)]
        seconds: dict[int, list[float]] = {1: [], 2: []}
        for _ in range(a.passes):
            for workers in (1, 2):
                m = Measurer(compile_workers=workers)
                try:
                    m.measure(task, funcs[0])  # the worker started, the task's arrays sent
                    t0 = time.perf_counter()
                    m.prepare(funcs[1:])
                    ok = sum(m.measure(task, f).ok for f in funcs[1:])
                    seconds[workers].append(time.perf_counter() - t0)
                finally:
                    m.close()
                assert ok == a.programs, f"{name}: {a.programs - ok} programs failed"
        print(f"{name:45s} in each trial {min(seconds[1]):6.1f} s   compiled ahead in 2 processes "
              f"{min(seconds[2]):6.1f} s   ({a.programs} programs, best of {a.passes})")
    print(f"on {hw.key}")


if __name__ == "__main__":
    main()
