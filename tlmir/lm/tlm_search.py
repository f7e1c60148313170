"""Search strategies driven by the tensor language model.

`tlm`: every round the TLM writes new programs for the task (constrained generation,
batched); the tuner measures them and keeps the best. Ranked (the default, `tlm@world`),
the TLM writes `tlm_rank_per_slot` programs per measurement (at least `tlm_rank_min_pool`,
at most `tlm_rank_max` a round) and the world-model evaluator (search/rankers.py) picks
the ones measured, so TLM-1 measures the evaluator's best guess of 640; it is fine-tuned
on the task's measurements for later rounds. Unranked (`tlm@none`), the very first
candidate is the model's greedy answer (temperature 0) and the rest are sampled,
measured as written. Where the model ships transfer sources (search/transfer_sources.py),
`tlm_transfer_share` of each round's measurements (six of TLM-10's, TLM-1's one) are
picks among the fastest training programs of the task's kind rewritten for its shape,
by the evaluator's rank plus the library's.

`tlm+evolutionary`: the first round is a ranked `tlm` round of a few programs picked
from a large pool; after it, Ansor's evolutionary search runs with TLM programs in place
of random samples (population refills and the ε-greedy share), so the model seeds the
population and the cost model, fine-tuned on what was measured, refines it. Rounds grow
(4, 4, 8, ...): with 10 measurements, 6 are refinements.
"""
from __future__ import annotations

import math
import os
import threading
from typing import TYPE_CHECKING

import numpy as np

from ..errors import TlmirError
from ..schedule.decider import draw_question, single_tile
from ..schedule.space import SearchSpace
from ..search.rankers import WorldRanker
from ..search.strategy import Candidate, EvolutionarySearch, RandomSearch, make_candidates, register_strategy

if TYPE_CHECKING:
    from .generate import Sampling

DEFAULT_MODEL = "default"
_MODELS: dict = {}
_SOURCES: dict = {}  # model directory -> its SourceLibrary, or None
_LOCK = threading.Lock()


def cached_model(name: str):
    """(model, tokenizer, config) loaded once per process and directory."""
    from .registry import load_model, model_dir
    path = os.path.abspath(model_dir(name))
    with _LOCK:
        if path not in _MODELS:
            model, tok, meta = load_model(path)
            _MODELS[path] = (model.eval(), tok, meta)
        return _MODELS[path]


def cached_sources(name: str):
    """The transfer sources shipped beside a model (None where it has none), loaded once."""
    from ..search.transfer_sources import SourceLibrary
    from .registry import model_dir
    path = os.path.abspath(model_dir(name))
    with _LOCK:
        if path not in _SOURCES:
            _SOURCES[path] = SourceLibrary.of_model(path)
        return _SOURCES[path]


class TLMSearch(RandomSearch):
    name = "tlm"

    def __init__(self, space: SearchSpace, args, seed: int = 0, task=None, model: str = DEFAULT_MODEL,
                 sampling: Sampling | None = None, batch_size: int = 64, greedy_first: bool = True,
                 ranked: bool = True, pool_size: int | None = None):
        super().__init__(space, args, seed)
        if task is None:
            raise TlmirError("the tlm strategy needs the task (its prompt is the model's input)")
        from .generate import Generator, Sampling  # torch, only once a TLM search is made
        net, tok, meta = cached_model(model)
        self.task, self.batch_size = task, batch_size
        prompt = space.sp.tlm_prompt
        self.gen = Generator.for_model(net, tok, meta, space.hw, sampling or Sampling(space.sp.tlm_temperature),
                                       seed, prompt)
        self.greedy = (Generator.for_model(net, tok, meta, space.hw, Sampling(temperature=0.0), seed, prompt)
                       if greedy_first else None)
        self.ranker = WorldRanker(space, task, seed) if ranked else None
        self.lowers_features = self.ranker is not None and self.ranker.reads_features
        self.measured: list[tuple[Candidate, float]] = []  # ranked: (candidate, throughput), to fine-tune
        self.logprob: dict[str, float] = {}  # candidate key -> the model's log-likelihood of its answers
        self.pool_size = pool_size  # ranked: programs written per round (None: per slot, as above)
        self.sources = cached_sources(model) if space.sp.tlm_transfers else None
        self.borrowable: list[Candidate] | None = None  # the transfers not yet measured, made once
        self.library_rank: dict[str, int] = {}  # candidate key -> its rewrite's place in the library's order

    def round_size(self, done: int) -> int:
        """Ranked with `tlm_refine_after` > 0: that many first (one pool, as TLM-10 measures
        it), then rounds of `tlm_refine_round` that refine the best programs measured."""
        sp = self.space.sp
        if self.ranker is None or sp.tlm_refine_after <= 0:
            return sp.measures_per_round
        return sp.tlm_refine_after if done < sp.tlm_refine_after else sp.tlm_refine_round

    def _borrow(self, n: int, exclude: set) -> list[Candidate]:
        """`tlm_transfer_share` of n (rounded) programs of the model's transfer sources
        rewritten for this task (search/transfer_sources.py), the top picks among the
        `tlm_transfers` nearest by the sum of the evaluator's rank and the library's (unranked:
        the nearest first): the evaluator alone picked TLM-1's worse (docs/model.md)."""
        k = math.floor(n * self.space.sp.tlm_transfer_share + 0.5)
        if self.sources is None or k <= 0:
            return []
        if self.borrowable is None:
            sp = self.space.sp
            got = self.sources.rewrites(self.space, self.task, sp.tlm_transfers, own=sp.tlm_borrow_own,
                                        deviation_steps=sp.tlm_transfer_deviation)
            self.borrowable = make_candidates(self.space, self.args, [(r.schedule, r.trace) for r in got],
                                              self.lowers_features)
            self.library_rank = {c.key: i for i, c in enumerate(self.borrowable)}
            if sp.tlm_transfer_repairs > 0:
                self.borrowable += self._repairs(got, sp.tlm_transfer_repairs)
        pool = [c for c in self.borrowable if c.key not in exclude]
        if self.ranker is not None and len(pool) > k:  # the evaluator's rank + the library's
            library = np.array([self.library_rank[c.key] for c in pool])
            order = np.argsort(_ranks(-self.ranker.score(pool)) + _ranks(library), kind="stable")
            pool = [pool[i] for i in order]
        picks = pool[:k]
        taken = {c.key for c in picks}
        self.borrowable = [c for c in self.borrowable if c.key not in taken]
        return picks

    def _repairs(self, rewrites: list, per_source: int) -> list[Candidate]:
        """`per_source` programs for each rewrite whose tiles moved (`Replayed.moved`): the
        rewrite's answers but those, which the model writes anew for this task's extents
        (sampled; `Generator.generate(variants=...)`). Each takes its rewrite's place in the
        library's order."""
        variants = [(r.trace, set(r.moved)) for r in rewrites if r.moved for _ in range(per_source)]
        if not variants:
            return []
        seen, picked, parents = set(self.library_rank), [], []
        for (parent, _), g in zip(variants, self.gen.generate(self.task, len(variants), self.batch_size,
                                                              self.space, variants=variants)):
            key = g.trace.to_json() if g.trace is not None else None
            if key is not None and key not in seen:
                seen.add(key)
                picked.append((g.schedule, g.trace))
                parents.append(parent.to_json())
        cands = make_candidates(self.space, self.args, picked, self.lowers_features)
        for cand, parent in zip(cands, parents):
            self.library_rank[cand.key] = self.library_rank[parent]
        return cands

    def _generate(self, n: int, exclude: set) -> list[Candidate]:
        """Up to n distinct programs whose traces are not in `exclude`: some borrowed
        (`_borrow`), the rest the TLM's: the first written, or ranked, the evaluator's top
        of n x tlm_rank_per_slot written (within tlm_rank_min_pool .. tlm_rank_max, or
        `pool_size`). In a refining round, half the pool is the model's variants of the
        best programs measured (`_variants`)."""
        borrowed = self._borrow(n, exclude)
        if borrowed:
            return borrowed + self._generate_own(n - len(borrowed), exclude | {c.key for c in borrowed})
        return self._generate_own(n, exclude)

    def _generate_own(self, n: int, exclude: set) -> list[Candidate]:
        if self.ranker is None or n <= 0:
            return self._write(n, exclude)
        sp = self.space.sp
        size = self.pool_size or min(max(n * sp.tlm_rank_per_slot, sp.tlm_rank_min_pool), sp.tlm_rank_max)
        size = max(n, size)
        refining = sp.tlm_refine_after > 0 and len(self.measured) >= sp.tlm_refine_after
        pool = self._variants(size // 2, exclude) if refining else []
        pool += self._write(size - len(pool), exclude | {c.key for c in pool}, draws=2)
        order = np.argsort(-self.rank_scores(pool), kind="stable")
        return [pool[i] for i in order[:n]]

    def _variants(self, n: int, exclude: set) -> list[Candidate]:
        """Up to n distinct programs that keep a good measured program's sketch and all its
        answers but one or two, which the model writes anew: a mutation whose new answer is
        the model's, not a uniform draw. Parents: the `local_parents` fastest measured, the
        fastest as often as the others together."""
        ranked = sorted(((c, t) for c, t in self.measured if t > 0), key=lambda ct: -ct[1])
        parents = [c.trace for c, _ in ranked[: self.space.sp.local_parents]]
        if not parents:
            return []
        weights = dict(self.space.sp.mutation_weights)
        variants = []
        for _ in range(n):
            trace = parents[0] if self.rng.random() < 0.5 else self.rng.choice(parents)
            variants.append((trace, free_questions(trace, self.rng, weights, 1 + (self.rng.random() < 0.5))))
        gens = self.gen.generate(self.task, n, self.batch_size, self.space, variants=variants)
        return list(self._candidates(gens, exclude, n).values())

    def rank_scores(self, pool: list[Candidate]) -> np.ndarray:
        """The pool's order: the evaluator's score, or with `tlm_rank_likelihood` > 0 its rank
        plus that weight x the rank by the model's likelihood of each program (measured
        no better at weight 1 with today's model: docs/model.md, "Picking from the pool")."""
        world = self.ranker.score(pool)
        weight = self.space.sp.tlm_rank_likelihood
        if weight == 0 or len(pool) < 2:
            return world
        like = np.array([self.logprob.get(c.key, -np.inf) for c in pool])
        return _ranks(world) + weight * _ranks(like)

    def _write(self, n: int, exclude: set, draws: int = 4) -> list[Candidate]:
        """Up to n distinct programs the TLM writes (greedy first, if it has not yet), in
        at most `draws` batches after the greedy one: a sharp model repeats itself."""
        out: dict[str, Candidate] = {}
        if self.greedy is not None and n > 0:
            gens = self.greedy.generate(self.task, 1, 1, self.space)
            self.greedy = None
            out.update(self._candidates(gens, exclude, n))
        for _ in range(draws):
            need = n - len(out)
            if need <= 0:
                break
            gens = self.gen.generate(self.task, need, self.batch_size, self.space)
            for key, cand in self._candidates(gens, exclude | set(out), need).items():
                out.setdefault(key, cand)
        return list(out.values())[:n]

    def _candidates(self, gens, exclude: set, n: int) -> dict:
        """The first n distinct programs of `gens` not in `exclude`, lowered (in worker
        processes when there are many)."""
        chosen: dict = {}
        for g in gens:
            if g.trace is not None and len(chosen) < n:
                key = g.trace.to_json()
                if key not in exclude:
                    chosen.setdefault(key, g)
        picked = list(chosen.values())
        cands = make_candidates(self.space, self.args, [(g.schedule, g.trace) for g in picked],
                                self.lowers_features)
        for cand, g in zip(cands, picked):
            self.logprob.setdefault(cand.key, g.logprob)
        return {c.key: c for c in cands}

    def propose(self, n: int) -> list[Candidate]:
        picks = self._generate(n, self.seen)
        self.seen.update(c.key for c in picks)
        if len(picks) < n:  # the model keeps writing programs already measured
            picks += RandomSearch._sample(self, n - len(picks), self.seen)
            self.seen.update(c.key for c in picks)
        return picks

    def update(self, measured: list[tuple[Candidate, float | None]]) -> None:
        super().update(measured)
        if self.ranker is not None:
            self.measured += [(c, 1.0 / s if s else 0.0) for c, s in measured if c.lowered]
            self.ranker.fit(self.measured)


def free_questions(trace, rng, weights: dict, k: int) -> set:
    """k of the trace's questions, drawn as evolution's mutations draw one
    (`decider.draw_question`), for a variant to answer anew."""
    names = [q for q, a in trace.decisions if not single_tile(a)]
    free: set = set()
    for _ in range(k):
        q = draw_question([n for n in names if n not in free], rng, weights)
        if q is None:
            break
        free.add(q)
    return free


def _ranks(x: np.ndarray) -> np.ndarray:
    """0 for the lowest value ... n - 1 for the highest (ties in order)."""
    out = np.empty(len(x))
    out[np.argsort(x, kind="stable")] = np.arange(len(x))
    return out


class TLMEvolutionarySearch(EvolutionarySearch):
    name = "tlm+evolutionary"
    warmup = False  # round one is the model's programs: no untrained cost model to warm up

    def __init__(self, space: SearchSpace, args, seed: int = 0, task=None, model: str = DEFAULT_MODEL,
                 cost_model: str = "world"):
        super().__init__(space, args, seed, task=task, cost_model=cost_model)
        self.tlm = TLMSearch(space, args, seed, task=task, model=model, ranked=cost_model == "world",
                             pool_size=space.sp.tlm_hybrid_pool)

    def round_size(self, done: int) -> int:
        """`tlm_first_round` programs first, then each round as many as all rounds before it,
        up to measures_per_round: the cost model has learned from the model's first picks
        before it picks, and with 10 measurements two rounds of refinement follow the first."""
        first = self.sp.tlm_first_round
        if first <= 0:
            return self.sp.measures_per_round
        return first if done == 0 else min(self.sp.measures_per_round, max(first, done))

    def _sample(self, n: int, exclude: set) -> list[Candidate]:
        """Population fill: new programs the model writes (round one's unpicked programs
        instead, already written and scored, did worse: 1.01 against 1.07 of ranked TLM-10,
        docs/model.md), then random samples."""
        picks = self.tlm._write(n, exclude)  # the population's cost model ranks them
        if len(picks) < n:
            picks += super()._sample(n - len(picks), exclude | {c.key for c in picks})
        return picks

    def propose(self, n: int) -> list[Candidate]:
        if not self.measured:  # round one: the model's own programs, as `tlm` measures them
            picks = self.tlm.propose(n)
            self.seen.update(c.key for c in picks)
            return picks
        return super().propose(n)


register_strategy("tlm", lambda space, task, seed, model, cost: TLMSearch(
    space, task.args, seed, task=task, model=model, ranked=cost == "world"), ("world", "none"))
register_strategy("tlm+evolutionary", lambda space, task, seed, model, cost: TLMEvolutionarySearch(
    space, task.args, seed, task=task, model=model, cost_model=cost), ("world", "mlp"))
