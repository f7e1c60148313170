"""Where ranking held-out programs is limited: by the program features, or by the move to new tasks.

    .venv/bin/python bench/evaluator_ceiling.py --cache runs/evprog.pkl [--steps 2000] [--json F]

A ranker over the lowered program's features alone (search/features.py; an MLP trained
with the package's pairwise `ranking_loss`) is scored on the held-out tasks' programs of
`bench/evaluator_retrain.py` (same archives, same cache) in three settings:

- cross-task: trained on the training split's programs, as the shipped evaluator is;
- in-task, half: trained on a random half of each held-out task's own programs, scored on
  the other half (what the features can tell apart when the task itself is known);
- in-task, first 64: trained on each task's first 64 programs in measurement order
  (what a search has after its first rounds), scored on the rest; from scratch, and
  fine-tuned from the cross-task ranker.

With `--world-steps N`, the package's world model (decisions and features) is also
trained on the random halves (N steps) and scored on the other halves: its own in-task
bound, beside its cross-task score (the shipped evaluator's).

Prints pairwise accuracy and top-10 recall per setting and test set (tlmir.search.world_train.
ranking_metrics). The held-out programs are only ever trained on within their own task.
"""
from __future__ import annotations

import argparse
import json
import os

import numpy as np
import torch

from evaluator_retrain import TEST, programs  # noqa: E402  (bench/evaluator_retrain.py)
from tlmir.search import world_train as wt  # noqa: E402


def matrix(progs: list) -> tuple[np.ndarray, np.ndarray, list[list[int]]]:
    """(features [N, F], normalised throughput [N], index lists per task) of programs
    that all have features."""
    return (np.stack([p.features for p in progs]).astype(np.float32), wt.normalized_throughput(progs),
            [ix for ix in wt.group_indices(progs).values() if len(ix) > 1])


class FeatureRanker:
    def __init__(self, n_features: int, mean: np.ndarray, std: np.ndarray, seed: int = 0):
        torch.manual_seed(seed)
        self.rng = np.random.default_rng(seed)
        self.mean, self.std = torch.tensor(mean), torch.tensor(std)
        self.net = torch.nn.Sequential(torch.nn.Linear(n_features, 256), torch.nn.GELU(),
                                       torch.nn.Linear(256, 256), torch.nn.GELU(), torch.nn.Linear(256, 1))

    def scores(self, x: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return self.net((torch.tensor(x) - self.mean) / self.std).squeeze(-1).numpy()

    def train(self, x: np.ndarray, y: np.ndarray, groups: list[list[int]], steps: int, lr: float,
              tasks_per_step: int = 16, per_task: int = 32) -> None:
        opt = torch.optim.AdamW(self.net.parameters(), lr=lr, weight_decay=1e-4)
        for _ in range(steps):
            rows, gid = [], []
            for g, k in enumerate(self.rng.choice(len(groups), tasks_per_step)):
                ix = groups[k]
                rows += list(self.rng.choice(ix, min(per_task, len(ix)), replace=False))
                gid += [g] * min(per_task, len(ix))
            s = self.net((torch.tensor(x[rows]) - self.mean) / self.std).squeeze(-1)
            loss = wt.ranking_loss(s, torch.tensor(y[rows], dtype=torch.float32), torch.tensor(gid))
            opt.zero_grad()
            loss.backward()
            opt.step()


def rounded(m: dict) -> dict:
    """Pairwise accuracy, top-10 recall and task count of `wt.ranking_metrics`, for the report."""
    return {"pairwise": round(m["pairwise_accuracy"], 3), "top10_recall": round(m["top10_recall"], 3),
            "tasks": m["tasks"]}


def metrics(ranker: FeatureRanker, progs: list) -> dict:
    return rounded(wt.ranking_metrics(progs, ranker.scores(matrix(progs)[0])))


def split(progs: list, pick) -> tuple[list, list]:
    """Each task's programs into (picked, rest) by `pick(indices in measurement order)`."""
    a, b = [], []
    for ix in wt.group_indices(progs).values():
        chosen = set(pick(ix))
        a += [progs[i] for i in ix if i in chosen]
        b += [progs[i] for i in ix if i not in chosen]
    return a, b


def world_bounds(half: list, other: list, steps: int, threads: int) -> dict:
    """The shipped evaluator's and an in-task world model's scores on `other`, the latter
    trained on `half` (the package's config, loss and schedule)."""
    from tlmir.lm.registry import MODELS, TOKENIZER_FILE, model_dir
    from tlmir.lm.tokenizer import Tokenizer
    from tlmir.search.features import NUM_FEATURES
    from tlmir.search.world_model import WorldModelConfig

    def score(ev) -> dict:
        return rounded(wt.ranking_metrics(other, ev.score_programs(other)))
    tok = Tokenizer.load(os.path.join(model_dir("base"), TOKENIZER_FILE))
    own = wt.train_evaluator(half, tok, WorldModelConfig(tok.vocab_size, n_features=NUM_FEATURES),
                             steps=steps, threads=threads)
    return {"world, shipped (cross-task)": score(wt.Evaluator.load(os.path.join(MODELS, "evaluator"))),
            "world, in-task half": score(own)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cache", help="pickle of the programs and their features (bench/evaluator_retrain.py)")
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--threads", type=int, default=2, help="torch threads")
    p.add_argument("--world-steps", type=int, default=0, help="also train the world model in-task (steps)")
    p.add_argument("--tests", help=f"comma-separated subset of: {', '.join(TEST)}")
    p.add_argument("--json")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    data = {k: [q for q in v if q.features is not None] for k, v in programs(a.cache).items()}
    x, y, groups = matrix(data["train"])
    mean, std = x.mean(0), x.std(0) + 1e-6
    cross = FeatureRanker(x.shape[1], mean, std)
    cross.train(x, y, groups, a.steps, 1e-3)
    rng = np.random.default_rng(0)
    rows = []
    for name in (a.tests.split(",") if a.tests else TEST):
        progs = data[name]
        half, other = split(progs, lambda ix: rng.permutation(ix)[: len(ix) // 2])
        first, rest = split(progs, lambda ix: ix[:64])
        row = {"test": name, "cross-task": metrics(cross, progs)}
        own = FeatureRanker(x.shape[1], mean, std)
        own.train(*matrix(half), a.steps, 1e-3)
        row["in-task half"] = metrics(own, other)
        if a.world_steps:
            row.update(world_bounds(half, other, a.world_steps, a.threads))
        if not rest:  # a run of 64 programs per task has nothing after its first 64
            rows.append(row)
            print(json.dumps(row), flush=True)
            continue
        early = FeatureRanker(x.shape[1], mean, std)
        early.train(*matrix(first), a.steps // 4, 1e-3)
        row["in-task first 64"] = metrics(early, rest)
        row["cross-task on the rest"] = metrics(cross, rest)
        tuned = FeatureRanker(x.shape[1], mean, std)
        tuned.net.load_state_dict(cross.net.state_dict())
        tuned.train(*matrix(first), a.steps // 6, 3e-4)
        row["cross-task + first 64"] = metrics(tuned, rest)
        rows.append(row)
        print(json.dumps(row), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
