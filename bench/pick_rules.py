"""Rules for picking which transfers to measure, scored offline on measured transfers.

    .venv/bin/python bench/pick_rules.py data/transfer-picks-zen5/features-train.jsonl.xz \
        [--test data/transfer-picks-zen5/features-held-out.jsonl.xz] [--folds 5]

Reads the rows `bench/transfer_picks.py --features` writes (every transfer of a task, its
source, its ranks and its measured time; a task written twice counts once, the last row)
and scores each rule as search uses it: of each task's transfers, the best measured
throughput among the rule's top k over the best of all (geometric mean over tasks; k = 1 is
TLM-1's pick, k = 6 TLM-10's transfers; a failed pick counts as 0.05). Rules:

- nearest: the library's order (`SourceLibrary.rewrites`);
- evaluator: the world-model evaluator's score;
- rank-sum: the evaluator's rank plus the library's (what `tlm` picks by);
- source: the source's measured throughput on its host, this host's sources first;
- rank-sum+source: the three ranks summed;
- fitted: a pairwise logistic model over the features below, fitted on the other folds'
  tasks (folds by task, so a task is never scored by a rule fitted on it); its weights,
  fitted on every task, are printed.
"""
from __future__ import annotations

import argparse
import json
import lzma
import math

import numpy as np
from pool_rankers import pick_ratio  # noqa: E402  (bench/ is this script's directory)

from tlmir.lm.tlm_search import _ranks

FAILED = 0.05  # a pick that failed (or ran 20x slower than the best) counts this in the mean
FEATURES = ("evaluator_z", "library_place", "source_log_gflops", "this_host", "shape_distance",
            "deviation", "moved", "same_type", "same_category", "sketch_share")


def read_rows(paths: list[str]) -> list[dict]:
    """The last row of every task with at least two transfers measured."""
    rows: dict[str, dict] = {}
    for path in paths:
        with (lzma.open(path, "rt") if path.endswith(".xz") else open(path)) as f:
            for line in f:
                if line.strip():
                    row = json.loads(line)
                    rows[row["task"]] = row
    out = []
    for row in rows.values():
        if sum(t["seconds"] is not None for t in row["transfers"]) >= 2:
            out.append(row)
    return out


def features(row: dict) -> np.ndarray:
    """One row of FEATURES per transfer, each comparable within the task."""
    ts = row["transfers"]
    ev = np.array([t["evaluator"] for t in ts])
    ev_z = (ev - ev.mean()) / (ev.std() + 1e-9)
    log_g = np.log(np.array([max(t["source_gflops"], 1e-6) for t in ts]))
    return np.stack([
        ev_z,
        np.arange(len(ts)) / max(len(ts) - 1, 1),
        log_g - log_g.max(),
        np.array([float(t["this_host"]) for t in ts]),
        np.array([t["shape_distance"] for t in ts]),
        np.array([t["deviation"] for t in ts]),
        np.array([float(t["moved"]) for t in ts]),
        np.array([float(t["same_type"]) for t in ts]),
        np.array([float(t["same_category"]) for t in ts]),
        np.array([sum(u["sketch"] == t["sketch"] for u in ts) / len(ts) for t in ts]),
    ], axis=1)


def throughput(row: dict) -> np.ndarray:
    return np.array([0.0 if t["seconds"] is None else 1.0 / t["seconds"] for t in row["transfers"]])


def ranks(x: np.ndarray) -> np.ndarray:
    """0 for the highest value ... n - 1 for the lowest (ties in order)."""
    return _ranks(-x)


def fixed_rules(row: dict) -> dict[str, np.ndarray]:
    f, n = features(row), len(row["transfers"])
    library = -np.arange(n, dtype=float)
    source = f[:, 2] + 10.0 * f[:, 3]  # this host's first, then by throughput
    # equal sums keep the library's order: pick_ratio sorts stably
    return {"nearest": library, "evaluator": f[:, 0],
            "rank-sum": -(ranks(f[:, 0]) + ranks(library)),
            "source": source,
            "rank-sum+source": -(ranks(f[:, 0]) + ranks(library) + ranks(source))}


def pairs(rows: list[dict], margin: float = 0.05) -> tuple[np.ndarray, np.ndarray]:
    """Feature differences of every pair of a task's transfers whose throughputs differ by
    more than `margin`, each task weighing the same, and which of the two is faster."""
    xs, ws = [], []
    for row in rows:
        f, thr = features(row), throughput(row)
        ok = np.flatnonzero(thr > 0)
        diffs = []
        for a in ok:
            for b in ok:
                if thr[a] > thr[b] * (1 + margin):
                    diffs.append(f[a] - f[b])
        for a in np.flatnonzero(thr == 0):  # a failed transfer loses to every measured one
            diffs += [f[b] - f[a] for b in ok]
        if diffs:
            xs.append(np.array(diffs))
            ws.append(np.full(len(diffs), 1.0 / len(diffs)))
    return np.concatenate(xs), np.concatenate(ws)


def fit(rows: list[dict], l2: float = 1e-2, steps: int = 50) -> np.ndarray:
    """Weights w of a pairwise logistic model P(a faster than b) = sigmoid(w . (f_a - f_b)),
    by Newton's method on the task-weighted log loss with an L2 penalty."""
    x, wt = pairs(rows)
    wt = wt / wt.sum()
    w = np.zeros(x.shape[1])
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-x @ w))
        grad = x.T @ (wt * (p - 1.0)) + l2 * w
        hess = (x * (wt * p * (1 - p))[:, None]).T @ x + l2 * np.eye(len(w))
        w -= np.linalg.solve(hess, grad)
    return w


def score(rows: list[dict], fitted: list[np.ndarray]) -> dict[str, dict[int, float]]:
    """Each rule's geometric mean of pick / best of all over `rows`, at k = 1 and 6; `fitted`:
    the fitted rule's scores of each row."""
    scores: dict[str, dict[int, list[float]]] = {}
    for row, fit_scores in zip(rows, fitted):
        thr = throughput(row)
        for name, s in {"fitted": fit_scores, **fixed_rules(row)}.items():
            for k in (1, 6):
                scores.setdefault(name, {}).setdefault(k, []).append(max(pick_ratio(s, thr, k), FAILED))
    return {name: {k: math.exp(np.mean(np.log(v))) for k, v in by_k.items()} for name, by_k in scores.items()}


def print_scores(title: str, scores: dict[str, dict[int, float]]) -> None:
    print(title)
    for name, by_k in scores.items():
        print(f"  {name:16s} " + "  ".join(f"top-{k} {v:.3f}" for k, v in sorted(by_k.items())))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("features", nargs="+", help="transfer_picks.py --features files")
    p.add_argument("--folds", type=int, default=5)
    p.add_argument("--l2", type=float, default=1e-2)
    p.add_argument("--test", nargs="+", default=[],
                   help="features of other tasks (the held-out ones), scored with the rule fitted on "
                        "every task of the positional files")
    a = p.parse_args()
    rows = read_rows(a.features)
    fold = np.random.default_rng(0).permutation(len(rows)) % a.folds
    fitted: list = [None] * len(rows)
    for i in range(a.folds):
        w = fit([r for r, f in zip(rows, fold) if f != i], a.l2)
        for j, (row, f) in enumerate(zip(rows, fold)):
            if f == i:
                fitted[j] = features(row) @ w
    print_scores(f"{len(rows)} tasks, {sum(len(r['transfers']) for r in rows)} transfers, the fitted rule "
                 f"by {a.folds} folds; pick / best of all (geometric mean over tasks):", score(rows, fitted))
    w = fit(rows, a.l2)
    print("fitted on every task: " + "  ".join(f"{n} {v:+.3f}" for n, v in zip(FEATURES, w)))
    if a.test:
        test = read_rows(a.test)
        print_scores(f"{len(test)} other tasks:", score(test, [features(r) @ w for r in test]))


if __name__ == "__main__":
    main()
