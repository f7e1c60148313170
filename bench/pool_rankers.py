"""Which ranker picks best from a TLM pool: offline, on bench/tlm_ceiling.py's random draws.

    .venv/bin/python bench/pool_rankers.py runs/ceiling.db [runs/ceiling-train.db ...] \
        [--model default] [--world NAME=DIR ...] [--k 2 10]

The `pool-random` records of tlm_ceiling.py are a uniform sample of the programs the
TLM writes for a task, each measured. A ranker is scored as the search uses it: of each
task's sample, the best measured throughput among the ranker's top k, over the best of
the whole sample (1 = it picks the sample's best; geometric mean over tasks), with the
Spearman correlation of score and throughput beside it. Rankers:

- world: the world-model evaluator(s) (`--world`, default the shipped one);
- likelihood: the TLM's log-likelihood of the program's answers (sum, and mean per
  answer token): does the fine-tuned model know which of its programs are good?
- world+likelihood: the sum of the two rank orders;
- world, sketch first: the evaluator's best of every sketch first (sketches in the order of
  their best score), then the rest by score: a hedge against a ranker that prefers one
  sketch whose ceiling is lower;
- random: the expected value over random orders (k / n of the sample's best... estimated
  by 200 shuffles).
"""
from __future__ import annotations

import argparse
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from tlm_ceiling import spearman  # noqa: E402  (bench/ is this script's directory)
from tlmir.lm.registry import passive_openmp  # noqa: E402


def answer_logprobs(model_name: str, sentences: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(sum, mean per answer token) of each sentence's answer log-likelihood under the TLM."""
    from tlmir.lm.sft import answer_nll_per_sentence
    from tlmir.lm.tlm_search import cached_model
    model, tok, _ = cached_model(model_name)
    per = answer_nll_per_sentence(model, tok, sentences, batch_size=64)
    return np.array([-t for t, _ in per]), np.array([-t / max(n, 1) for t, n in per])


def sketch_first(scores: np.ndarray, sketches: list[int]) -> np.ndarray:
    """Scores that order each sketch's best-scored program first, then the rest by `scores`."""
    order = np.argsort(-scores, kind="stable")
    seen: set[int] = set()
    leaders = [i for i in order if not (sketches[i] in seen or seen.add(sketches[i]))]
    led = set(leaders)
    rest = [i for i in order if i not in led]
    out = np.empty(len(scores))
    out[leaders + rest] = -np.arange(len(scores), dtype=float)
    return out


def pick_ratio(scores: np.ndarray, thr: np.ndarray, k: int) -> float:
    order = np.argsort(-scores, kind="stable")
    return float(thr[order[:k]].max() / thr.max())


def main() -> None:
    passive_openmp()
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dbs", nargs="+")
    p.add_argument("--model", default="default")
    p.add_argument("--world", nargs="*", default=["world=default"])
    p.add_argument("--k", nargs="+", type=int, default=[2, 10])
    a = p.parse_args()

    from tlmir.lm.language import sentence_to_trace
    from tlmir.runtime.records import read_records
    from tlmir.search.rankers import cached_evaluator
    from tlmir.search.world_train import programs_from_records
    from tlmir.workloads import split_tasks

    tasks = {t.key: t for s in ("train", "held-out") for t in split_tasks(s)}
    recs = [r for r in read_records(a.dbs) if r.strategy == "pool-random"]
    by_task: dict[str, list] = {}
    for r in recs:
        by_task.setdefault(r.task_key, []).append(r)
    evaluators = {}
    for spec in a.world:
        name, _, path = spec.partition("=")
        evaluators[name] = cached_evaluator(path or name)
    results: dict[str, dict[int, list[float]]] = {}
    rhos: dict[str, list[float]] = {}
    rng = np.random.default_rng(0)
    for key, task_recs in by_task.items():
        progs = programs_from_records(task_recs, tasks)
        thr = np.array([1.0 / q.seconds if q.seconds else 0.0 for q in progs])
        if len(progs) < 12 or thr.max() <= 0:
            continue
        rankers = {name: ev.score_programs(progs) for name, ev in evaluators.items()}
        tot, mean = answer_logprobs(a.model, [q.sentence for q in progs])
        rankers["likelihood sum"], rankers["likelihood mean"] = tot, mean
        first = next(iter(evaluators))
        rank = lambda s: np.argsort(np.argsort(s))  # noqa: E731
        rankers[f"{first}+likelihood"] = rank(rankers[first]) + rank(tot)
        sketches = [sentence_to_trace(q.sentence).sketch for q in progs]
        rankers[f"{first}, sketch first"] = sketch_first(rankers[first], sketches)
        for name, s in rankers.items():
            for k in a.k:
                results.setdefault(name, {}).setdefault(k, []).append(pick_ratio(s, thr, k))
            rhos.setdefault(name, []).append(spearman(s, thr))
        for k in a.k:
            results.setdefault("random", {}).setdefault(k, []).append(
                float(np.mean([pick_ratio(rng.random(len(thr)), thr, k) for _ in range(200)])))
        rhos.setdefault("random", []).append(0.0)
    n = len(rhos.get("random", []))
    print(f"{n} tasks, {len(recs)} random pool programs; best of the ranker's top k / best of the sample "
          f"(geometric mean), median Spearman")
    for name, by_k in results.items():
        cells = "  ".join(f"top{k} {math.exp(np.mean(np.log(np.maximum(v, 1e-6)))):.3f}" for k, v in by_k.items())
        print(f"{name:<22} {cells}  rho {np.median(rhos[name]):+.2f}")


if __name__ == "__main__":
    main()
