"""What ranks candidate programs before they are measured: the searches' cost models.

A ranker scores candidates (higher = predicted faster, comparable within the task) and
learns from the task's measurements as the search makes them:

- `mlp`: the MLP over program features (features.py, cost_model.py), trained from
  scratch on the task's own measurements (Ansor's way);
- `world`: the world-model evaluator (world_model.py), pre-trained offline on every
  measured program of the training tasks and fine-tuned online on the task's own;
  it also ranks the TLM's samples (lm/tlm_search.py) before any is measured.

Evolutionary search asks `score` for thousands of candidates per round; both rankers
cache per candidate what does not change between rounds (features, sentences).
"""
from __future__ import annotations

import dataclasses
import os
import threading
from typing import Sequence

import numpy as np

from ..errors import TlmirError
from ..schedule.space import SearchSpace
from .cost_model import CostModel
from .features import program_features

COST_MODELS = ("mlp", "world")
DEFAULT_EVALUATOR = "default"
_EVALUATORS: dict = {}
_LOCK = threading.Lock()


def evaluator_dir(name: str) -> str:
    """`default` names the evaluator shipped in the package; anything else is a directory."""
    if name == DEFAULT_EVALUATOR:
        return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "lm", "models",
                            "evaluator")
    return name


def cached_evaluator(name: str = DEFAULT_EVALUATOR):
    """The evaluator of `name`, loaded once per process (never modified: rankers copy it)."""
    from .world_train import Evaluator
    path = os.path.abspath(evaluator_dir(name))
    with _LOCK:
        if path not in _EVALUATORS:
            _EVALUATORS[path] = Evaluator.load(path)
        return _EVALUATORS[path]


def candidate_features(cand, hw) -> np.ndarray | None:
    """The cost model's features of a candidate that lowers: those its lowering brought
    along (parallel_lower), else computed here; None if it does not lower."""
    if not cand.lowered:
        return None
    return cand.features if cand.features is not None else program_features(cand.func, hw)


class MLPRanker:
    name = "mlp"
    reads_features = True  # program_features of each candidate (lowering may bring them along)

    def __init__(self, space: SearchSpace, task=None, seed: int = 0):
        self.space = space
        self.model = CostModel(seed=seed, steps=space.sp.cost_model_steps)
        self._feat: dict[str, np.ndarray | None] = {}

    def features(self, cands: Sequence) -> np.ndarray:
        rows = []
        for c in cands:
            if c.key not in self._feat:
                self._feat[c.key] = candidate_features(c, self.space.hw)
            rows.append(self._feat[c.key])
        dim = next((r.shape[0] for r in rows if r is not None), 1)
        return np.stack([r if r is not None else np.zeros(dim, np.float32) for r in rows])

    def score(self, cands: Sequence) -> np.ndarray:
        return np.asarray(self.model.predict(self.features(cands)), dtype=float)

    def fit(self, measured: Sequence[tuple]) -> None:
        """`measured`: (candidate, throughput 1/s; 0 if it failed) of every lowered program."""
        if len(measured) >= 4:
            self.model.fit(self.features([c for c, _ in measured]), np.array([t for _, t in measured]),
                           np.zeros(len(measured), dtype=np.int64))


class WorldRanker:
    name = "world"

    def __init__(self, space: SearchSpace, task, seed: int = 0):
        if task is None:
            raise TlmirError("the world cost model needs the task (its prompt is the model's state)")
        self.space, self.task, self.seed = space, task, seed
        # the evaluator SearchParams.world_evaluator names, shared until the first fit copies it
        self.ev = cached_evaluator(space.sp.world_evaluator)
        self._own = False
        self._programs: dict = {}
        self._scores: dict[str, float] = {}
        self._fitted = 0
        self._pending: list[tuple] = []  # measurements to fine-tune on before the next score

    @property
    def reads_features(self) -> bool:
        return self.ev.reads_features

    def program(self, cand):
        """The candidate as the evaluator reads it (sentence, features), cached by trace."""
        from ..lm.language import trace_to_sentence
        from .world_train import Program
        if cand.key not in self._programs:
            feats = candidate_features(cand, self.space.hw) if self.ev.reads_features else None
            self._programs[cand.key] = Program(self.task.key, trace_to_sentence(self.task, self.space.hw, cand.trace),
                                               None, feats)
        return self._programs[cand.key]

    def score(self, cands: Sequence) -> np.ndarray:
        if self._pending:
            self._fine_tune(self._pending)
            self._pending = []
        out = np.full(len(cands), -np.inf)
        todo = [i for i, c in enumerate(cands) if c.lowered and c.key not in self._scores]
        if todo:
            for i, s in zip(todo, self.ev.score_programs([self.program(cands[i]) for i in todo])):
                self._scores[cands[i].key] = float(s)
        for i, c in enumerate(cands):
            if c.lowered:
                out[i] = self._scores[c.key]
        return out

    def fit(self, measured: Sequence[tuple]) -> None:
        """Fine-tune on every measured program of the task, a few steps per new batch of
        measurements (the copy keeps what earlier rounds taught it); done when the next
        score asks, so a search's last round costs no training."""
        if len(measured) >= 4 and len(measured) != self._fitted:
            self._pending = list(measured)

    def _fine_tune(self, measured: Sequence[tuple]) -> None:
        if not self._own:
            self.ev = self.ev.copy()
            self._own = True
        progs = [dataclasses.replace(self.program(c), seconds=1.0 / t if t > 0 else None) for c, t in measured]
        self.ev.fine_tune(progs, steps=self.space.sp.world_finetune_steps, seed=self.seed + len(measured))
        self._fitted = len(measured)
        self._scores.clear()


def make_ranker(name: str, space: SearchSpace, task=None, seed: int = 0):
    """The ranker of cost model `name` (mlp | world) for `task`."""
    if name == "mlp":
        return MLPRanker(space, task, seed)
    if name == "world":
        return WorldRanker(space, task, seed)
    raise TlmirError(f"unknown cost model {name!r}; available: {', '.join(COST_MODELS)}")
