"""Search strategies: which traces of a task's space to measure next.

`propose(n)` returns up to n candidates not measured before; `update` feeds back what
was measured. Evolutionary search is Ansor's: a population from the best measured
traces plus fresh samples, evolved by mutation (one answer redrawn) with selection by a
learned cost model (rankers.py: `mlp` over program features by default, or the `world`
model), then ε-greedy: most of a round is the
model's top picks, the rest random samples. A share of every round is unranked random
mutants of the best measured programs (a local search the model cannot veto), and a share
of the population and of the model's picks is dealt over the sketches, so the search does
not settle on whichever sketch its model learned first.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..errors import TlmirError
from ..ir.stmt import PrimFunc
from ..schedule.decider import Trace
from ..schedule.lower import lower
from ..schedule.space import SearchSpace
from .parallel_lower import (build_batch, in_workers, lower_one, mutate_request, replay_request,
                             sample_request)
from .rankers import make_ranker


class Candidate:
    """A trace of the task's space and its lowered program. A candidate built in a worker
    process (parallel_lower) is lowered again here on first use of `func`: most candidates
    are only ranked, and sending programs back costs more than lowering the few measured."""
    __slots__ = ("trace", "error", "features", "_func", "_space", "_args", "_key")

    def __init__(self, trace: Trace, func: PrimFunc | None = None, error: str | None = None,
                 features: np.ndarray | None = None, space: SearchSpace | None = None, args=None):
        self.trace, self.error, self.features = trace, error, features   # features: the cost model's
        self._func, self._space, self._args, self._key = func, space, args, None

    @property
    def lowered(self) -> bool:
        """Whether the program lowers (False: a failed trial, `error` says why)."""
        return self._func is not None or (self._space is not None and self.error is None)

    @property
    def func(self) -> PrimFunc | None:
        if self._func is None and self.lowered:
            self._func = lower(self._space.replay(self.trace), self._args)
            self._space = self._args = None
        return self._func

    @property
    def key(self) -> str:
        if self._key is None:
            self._key = self.trace.to_json()
        return self._key


def make_candidate(space: SearchSpace, args, sch_trace, features: bool = False) -> Candidate:
    sch, trace = sch_trace
    return Candidate(trace, *lower_one(space, args, sch, features))


def build_candidates(space: SearchSpace, args, requests: list, features: bool = False) -> list[Candidate]:
    """The candidates of parallel_lower requests (samples, mutants, replays), built in worker
    processes when there are many (SearchParams.lowering_workers); `features`: with the
    cost model's features."""
    return [Candidate(trace, func, error, feats, space if func is None and error is None else None, args)
            for trace, func, error, feats in build_batch(space, args, requests, features, space.sp.lowering_workers)]


def make_candidates(space: SearchSpace, args, sch_traces: list, features: bool = False) -> list[Candidate]:
    """`make_candidate` of each (schedule, trace); many are replayed and lowered in worker processes."""
    if in_workers(len(sch_traces), space.sp.lowering_workers):
        return build_candidates(space, args, [replay_request(t) for _, t in sch_traces], features)
    return [make_candidate(space, args, st, features) for st in sch_traces]


class RandomSearch:
    name = "random"
    lowers_features = False  # whether lowering computes the cost model's features too

    def __init__(self, space: SearchSpace, args, seed: int = 0):
        self.space, self.args = space, args
        self.rng = random.Random(seed)
        self.seen: set[str] = set()

    def _distinct(self, n: int, draw, exclude: set) -> list[Candidate]:
        """Up to n distinct lowered candidates from `draw()` (a (schedule, trace) pair) not in
        `exclude`, at most 20 n draws, lowered one by one as drawn (for a few)."""
        out: dict[str, Candidate] = {}
        for _ in range(n * 20):
            if len(out) == n:
                break
            cand = make_candidate(self.space, self.args, draw())
            if cand.key not in exclude and cand.lowered:
                out.setdefault(cand.key, cand)
        return list(out.values())

    def _sample(self, n: int, exclude: set) -> list[Candidate]:
        """Up to n random candidates, distinct and not in `exclude` (at most 20 n draws,
        asked for in batches of as many as are missing)."""
        out: dict[str, Candidate] = {}
        draws = 0
        while len(out) < n and draws < 20 * n:
            k = min(n - len(out), 20 * n - draws)
            draws += k
            requests = [sample_request(self.rng.getrandbits(63)) for _ in range(k)]
            for cand in build_candidates(self.space, self.args, requests, self.lowers_features):
                if cand.key not in exclude and len(out) < n:
                    out.setdefault(cand.key, cand)
        return list(out.values())

    def round_size(self, done: int) -> int:
        """How many programs the next round measures, `done` measured so far."""
        return self.space.sp.measures_per_round

    def propose(self, n: int) -> list[Candidate]:
        picks = self._sample(n, self.seen)
        self.seen.update(c.key for c in picks)
        return picks

    def update(self, measured: list[tuple[Candidate, float | None]]) -> None:
        self.seen.update(c.key for c, _ in measured)


class EvolutionarySearch(RandomSearch):
    name = "evolutionary"
    warmup = True  # the first round's worth comes in `warmup_rounds` smaller rounds

    def __init__(self, space: SearchSpace, args, seed: int = 0, task=None, cost_model: str = "mlp"):
        super().__init__(space, args, seed)
        self.sp = space.sp
        self.ranker = make_ranker(cost_model, space, task, seed)
        self.lowers_features = self.ranker.reads_features
        self.measured: list[tuple[Candidate, float]] = []  # (candidate, throughput 1/s; 0 if failed)

    def round_size(self, done: int) -> int:
        """Until one round's worth is measured, rounds of measures_per_round / warmup_rounds:
        a whole first round would be random samples ranked by an untrained model (every
        candidate ties); smaller ones train the model after 16 programs instead of 64."""
        per, k = self.sp.measures_per_round, self.sp.warmup_rounds
        return max(1, per // k) if self.warmup and k > 1 and done < per else per

    def _scores(self, cands: list[Candidate]) -> np.ndarray:
        if not cands:
            return np.zeros(0)
        scores = self.ranker.score(cands)
        scores[[not c.lowered for c in cands]] = -np.inf
        return scores

    def propose(self, n: int) -> list[Candidate]:
        pop_size = self.sp.population
        fastest_first = sorted(self.measured, key=lambda m: -m[1])
        pop = [c for c, t in fastest_first[: pop_size // 2] if t > 0]
        pop += self._sample(pop_size - len(pop), {c.key for c in pop})
        pool = {c.key: c for c in pop}
        dropped = self._dropped_sketches(self.measured)
        for _ in range(self.sp.evolution_iters):
            scores = self._scores(pop)
            finite = np.where(np.isfinite(scores), scores, np.nan)
            if np.all(np.isnan(finite)):
                break
            w = np.nan_to_num(finite - np.nanmin(finite) + 1e-3, nan=0.0)
            requests = []
            for _ in range(pop_size):
                parent = pop[self.rng.choices(range(len(pop)), weights=w)[0]]
                if parent.lowered and self.rng.random() <= self.sp.mutation_prob:
                    requests.append(mutate_request(parent.key, self.rng.getrandbits(63)))
            children = []
            for child in build_candidates(self.space, self.args, requests, self.lowers_features):
                if child.key not in pool:
                    pool[child.key] = child
                    children.append(child)
            merged = pop + children
            pop = [merged[i] for i in self._top(merged, self._scores(merged), pop_size, dropped)]
        local = self._local_mutants(min(n, int(round(n * self.sp.local_share))), fastest_first)
        taken = self.seen | {c.key for c in local}
        fresh = [c for c in pool.values() if c.key not in taken]
        n_model = n - len(local)
        n_random = max(1, int(round(n_model * self.sp.eps_greedy))) if len(fresh) > n_model else 0
        top = self._top(fresh, self._scores(fresh), n_model - n_random, dropped)
        chosen = set(top)
        rest = [c for i, c in enumerate(fresh) if i not in chosen]
        self.rng.shuffle(rest)
        picks = local + [fresh[i] for i in top] + rest[:n_random]
        self.seen.update(c.key for c in picks)
        if len(picks) < n:
            picks += RandomSearch.propose(self, n - len(picks))
        return picks

    def _dropped_sketches(self, measured: list[tuple[Candidate, float]]) -> set[int]:
        """Sketches out of the reserved share (see `_top`): measured `sketch_drop_after` times
        and the best program still `sketch_drop_factor` times slower than the best (one bad
        first sample must not drop a sketch: matmul's sketch 0 drew 164 ms first, 10 ms
        after 50 tries). `measured`: (candidate, throughput; 0 = failed)."""
        best, tried = {}, {}
        for c, t in measured:
            s = c.trace.sketch
            tried[s] = tried.get(s, 0) + 1
            best[s] = max(best.get(s, 0.0), t)
        top_t = max(best.values(), default=0.0)
        return {s for s, n in tried.items()
                if n >= self.sp.sketch_drop_after and best[s] * self.sp.sketch_drop_factor < top_t}

    def _top(self, cands: list[Candidate], scores: np.ndarray, k: int, dropped: set[int]) -> list[int]:
        """Indices of the k candidates to keep, by model score, of which round(`sketch_share` k)
        are dealt round-robin over the sketches not `dropped`, each taking its own
        best-scored (sketches in the order of their best score; with more sketches than
        reserved places, the best-scored sketches get one each). Ranked globally, a model
        trained mostly on one sketch's programs keeps picking that sketch: matmul's runs put
        80-86% of 1000 measurements on one sketch, a different one per seed, and the sketch
        of the fastest program found (a B panel, 6.1 ms) got 2-36 measurements in the runs
        that missed it (docs/history.md, "a share for every sketch")."""
        order = [int(i) for i in np.argsort(-scores, kind="stable")]
        deal, rank = [], {}  # (rank within its sketch, global position, index)
        for pos, i in enumerate(order):
            s = cands[i].trace.sketch
            if s not in dropped and np.isfinite(scores[i]):
                rank[s] = rank.get(s, -1) + 1
                deal.append((rank[s], pos, i))
        taken = [i for _, _, i in sorted(deal)[: round(k * self.sp.sketch_share)]]
        reserved = set(taken)
        return taken + [i for i in order if i not in reserved][: k - len(taken)]

    def _local_mutants(self, k: int, fastest_first: list[tuple[Candidate, float]]) -> list[Candidate]:
        """Up to k random one-answer mutants of the best measured programs, not ranked by the
        cost model: a model trained on the programs measured so far underrates programs unlike
        them, while the best program's neighbourhood is where the next gain most likely is
        (layernorm: the one-step mutants the model scored lowest ran 2.4x faster than the
        best; docs/history.md, "local mutants"). The parents are the best programs of the
        `local_parents` best sketches, so a sketch the model has not learned to rate yet
        still gets refined (mutation never changes the sketch); half the mutants come from
        the very best. `fastest_first`: the measured (candidate, throughput), best first."""
        best_of_sketch: dict[int, Candidate] = {}
        for c, t in fastest_first:
            if t > 0 and c.lowered:
                best_of_sketch.setdefault(c.trace.sketch, c)
        parents = list(best_of_sketch.values())[: self.sp.local_parents]
        if not parents:
            return []

        def mutant() -> tuple:
            parent = parents[0] if self.rng.random() < 0.5 else self.rng.choice(parents)
            return self.space.mutate(parent.trace, self.rng)
        return self._distinct(k, mutant, self.seen)

    def update(self, measured: list[tuple[Candidate, float | None]]) -> None:
        super().update(measured)
        self.measured += [(c, 1.0 / s if s else 0.0) for c, s in measured]
        self.ranker.fit([(c, t) for c, t in self.measured if c.lowered])


@dataclass(frozen=True)
class StrategyEntry:
    """How to make a search: `make(space, task, seed, model, cost_model)`; the cost models
    it takes, its default first (none: it ranks nothing)."""
    make: Callable
    cost_models: tuple[str, ...] = ()


STRATEGIES: dict[str, StrategyEntry] = {}


def register_strategy(name: str, make: Callable, cost_models: tuple[str, ...] = ()) -> None:
    """Add a search strategy under `name` (lm/tlm_search.py adds the TLM's)."""
    STRATEGIES[name] = StrategyEntry(make, tuple(cost_models))


def parse_strategy(spec: str) -> tuple[str, str | None]:
    """`NAME[@COST_MODEL]` -> (strategy, cost model or None for the strategy's default):
    `evolutionary@world` is evolutionary search ranked by the world model, `tlm@none` the
    TLM's samples measured in the order written."""
    name, _, cost = spec.partition("@")
    if name not in STRATEGIES:
        raise TlmirError(f"unknown strategy {name!r}; available: {', '.join(STRATEGIES)}")
    allowed = STRATEGIES[name].cost_models
    if cost and cost not in allowed:
        takes = f"cost model {' or '.join(allowed)}" if allowed else "no cost model"
        raise TlmirError(f"strategy {name!r} takes {takes}, not {cost!r}")
    return name, cost or None


def make_strategy(spec: str, space: SearchSpace, task, seed: int = 0, model: str = "default"):
    """The search object of strategy `spec` (see parse_strategy) for `task` (`model`: the
    TLM for tlm strategies), with its default cost model unless `spec` names one."""
    name, cost = parse_strategy(spec)
    entry = STRATEGIES[name]
    return entry.make(space, task, seed, model, cost or (entry.cost_models[0] if entry.cost_models else None))


register_strategy("random", lambda space, task, seed, model, cost: RandomSearch(space, task.args, seed))
register_strategy("evolutionary", lambda space, task, seed, model, cost: EvolutionarySearch(
    space, task.args, seed, task=task, cost_model=cost), ("mlp", "world"))
