"""What a search round costs besides measuring: sampling, mutating, lowering and ranking.

Evolutionary search lowers ~2,000 candidates per round so its cost model can score
them; on a 2-core host that took 60% of an evolutionary-1000 run's wall clock, more
than the measurements. This replays rounds of `EvolutionarySearch.propose` without
measuring (throughputs are a fixed function of each program's text, so the cost model
trains and the run is deterministic) and prints the seconds per round and a digest of
the picks: two versions of the code that pick the same programs print the same digest.

    .venv/bin/python bench/search_overhead.py [--rounds 3] [--tasks NAME ...]
"""
from __future__ import annotations

import argparse
import hashlib
import time

DEFAULT_TASKS = ("conv2d_nchw_1x128x14x14_k32_3x3_s1_p1", "dense_bias_gelu_m128_n3072_k768",
                 "softmax_256x128")


def fake_throughput(key: str) -> float:
    """A stand-in for a measurement: deterministic, spread over two orders of magnitude."""
    h = int(hashlib.sha256(key.encode()).hexdigest()[:8], 16)
    return 1.0 + 99.0 * (h / 0xFFFFFFFF)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tasks", nargs="+", default=list(DEFAULT_TASKS), help="held-out task names")
    p.add_argument("--rounds", type=int, default=3, help="rounds of 64 after a first round of 16")
    p.add_argument("--cost-model", default="mlp")
    p.add_argument("--workers", type=int, default=0, help="SearchParams.lowering_workers (1: in process)")
    a = p.parse_args()
    from tlmir.runtime.target import SearchParams, host_hardware
    from tlmir.schedule.space import SearchSpace
    from tlmir.search.strategy import EvolutionarySearch
    from tlmir.workloads import split_tasks
    hw = host_hardware()
    tasks = {t.name: t for t in split_tasks("held-out")}
    total = 0.0
    for name in a.tasks:
        task = tasks[name]
        search = EvolutionarySearch(SearchSpace(task.outputs, hw, SearchParams(lowering_workers=a.workers)), task.args, seed=0, task=task,
                                    cost_model=a.cost_model)
        digest, times = hashlib.sha256(), []
        for r in range(a.rounds + 1):
            t0 = time.perf_counter()
            picks = search.propose(16 if r == 0 else 64)
            times.append(time.perf_counter() - t0)
            for c in picks:
                digest.update(c.key.encode())
            search.update([(c, 1.0 / fake_throughput(c.key) if c.lowered else None) for c in picks])
        total += sum(times)
        print(f"{name:45s} " + " ".join(f"{t:6.1f}" for t in times) + f"  s/round   picks {digest.hexdigest()[:12]}")
    print(f"total {total:.1f} s on {hw.key}, lowering_workers={a.workers}")


if __name__ == "__main__":
    main()
