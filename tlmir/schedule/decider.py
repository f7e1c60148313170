"""Deciders answer the questions a sketch asks; a Trace records the answers.

The same sketch code builds a schedule whoever answers: uniform random answers
(sampling), recorded answers (replay), recorded answers with one redrawn (mutation), or
a language model (tlmir.lm). Questions are named by what they decide ("tile C.i",
"at pad", "unroll C"), never by stage or loop positions.
"""
from __future__ import annotations

import functools
import json
import random
from dataclasses import dataclass, field
from typing import Any, Sequence

from ..errors import ScheduleError


@functools.lru_cache(maxsize=4096)
def factorizations(extent: int, parts: int, max_innermost: int) -> tuple[tuple[int, ...], ...]:
    """Every way to write extent = f0 * ... * f{parts-1} with f{-1} <= max_innermost
    (perfect tiles, outermost first)."""
    def rec(n: int, k: int) -> list[tuple[int, ...]]:
        if k == 1:
            return [(n,)]
        out = []
        for d in range(1, n + 1):
            if n % d == 0:
                out += [(d,) + rest for rest in rec(n // d, k - 1)]
        return out
    return tuple(f for f in rec(extent, parts) if f[-1] <= max_innermost)


def _jsonable(answer: Any) -> Any:
    return list(answer) if isinstance(answer, tuple) else answer


@dataclass
class Trace:
    """The complete, replayable description of a schedule: sketch + (question, answer)s."""
    sketch: int
    decisions: list = field(default_factory=list)

    def answers(self) -> dict:
        return dict(self.decisions)

    def to_dict(self) -> dict:
        """The trace as plain JSON data (tuples as lists)."""
        return {"sketch": self.sketch, "decisions": [[q, _jsonable(a)] for q, a in self.decisions]}

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @classmethod
    def from_json(cls, text: str) -> "Trace":
        try:
            d = json.loads(text)
            return cls(int(d["sketch"]), [(str(q), tuple(a) if isinstance(a, list) else a)
                                          for q, a in d["decisions"]])
        except (ValueError, KeyError, TypeError) as e:
            raise ScheduleError(f"unreadable trace: {e}: {str(text)[:80]!r}") from None

    def __str__(self) -> str:
        parts = [f"sketch {self.sketch}"]
        for q, a in self.decisions:
            parts.append(f"{q} = {' '.join(map(str, a)) if isinstance(a, tuple) else a}")
        return "; ".join(parts)


class Decider:
    """Base: asks `_decide` for each question and records (question, answer)."""

    def __init__(self) -> None:
        self.decisions: list = []

    def tile(self, question: str, extent: int, parts: int, max_innermost: int) -> tuple[int, ...]:
        return self.choice(question, factorizations(extent, parts, max_innermost))

    def parallel(self, question: str, extents: Sequence[int], offered: int) -> int:
        """How many outer loops to fuse into the parallel loop: an answer among
        1..offered, where `extents[n - 1]` is the fused loop's extent for answer n (a
        decider that rewrites another task's answer keeps its meaning by it); the answers
        past `offered`, up to len(extents), only replay."""
        return self.choice(question, list(range(1, offered + 1)),
                           list(range(offered + 1, len(extents) + 1)))

    def choice(self, question: str, options: Sequence, replayable: Sequence = ()) -> Any:
        """One answer among `options`. `replayable`: answers a recorded trace may give
        although the space no longer offers them to new decisions (a limit added after the
        trace was recorded, such as SearchParams.pack_max_repeat); only a plain replay
        accepts them (MutateDecider redraws such an answer among `options`)."""
        if not options:
            raise ScheduleError(f"question {question!r} has no valid answer")
        answer = self._decide(question, list(options))
        self.decisions.append((question, answer))
        return answer

    def _decide(self, question: str, options: list) -> Any:
        raise NotImplementedError


class RandomDecider(Decider):
    """Uniform over the valid options (paper Alg. 1 sampling; random search)."""

    def __init__(self, rng: random.Random | int | None = None):
        super().__init__()
        self.rng = rng if isinstance(rng, random.Random) else random.Random(rng)

    def _decide(self, question: str, options: list) -> Any:
        return options[self.rng.randrange(len(options))]


class ReplayDecider(Decider):
    """The answers recorded in a trace; an answer the space does not offer is an error."""

    def __init__(self, trace: Trace):
        super().__init__()
        self.recorded = trace.answers()
        self.trace = trace
        self._replayable: Sequence = ()

    def choice(self, question: str, options: Sequence, replayable: Sequence = ()) -> Any:
        self._replayable = replayable
        return super().choice(question, options)

    def _decide(self, question: str, options: list) -> Any:
        if question not in self.recorded:
            raise ScheduleError(f"trace has no answer for question {question!r} (sketch {self.trace.sketch})")
        answer = self.recorded[question]
        if answer not in options and answer not in self._replayable:
            raise ScheduleError(f"trace answer {answer!r} for {question!r} is not a valid option")
        return answer


def tile_neighbors(old: tuple, options: list) -> list:
    """The tile answers among `options` that move one factor of `old` from one level to
    another (they differ from `old` at exactly two levels; the product is the extent)."""
    return [o for o in options
            if len(o) == len(old) and sum(x != y for x, y in zip(o, old)) == 2]


def single_tile(answer) -> bool:
    """A tile answer of an extent-1 axis: nothing to mutate (Ansor skips such splits)."""
    return isinstance(answer, tuple) and all(f == 1 for f in answer)


def draw_question(names: list[str], rng: random.Random, weights: dict[str, float] | None) -> str | None:
    """One of `names`: with `weights` ({kind: weight}, kind = a question's first word) a kind
    drawn by weight among those present, then one of its questions uniformly; without, or
    where no weighted kind is present, any question alike (None if there is none)."""
    by_kind: dict[str, list[str]] = {}
    for q in names:
        by_kind.setdefault(q.split(" ", 1)[0], []).append(q)
    kinds = [k for k in by_kind if weights and weights.get(k, 0.0) > 0]
    if not kinds:
        return rng.choice(names) if names else None
    kind = rng.choices(kinds, weights=[weights[k] for k in kinds])[0]
    return rng.choice(by_kind[kind])


class MutateDecider(ReplayDecider):
    """Replays a trace but redraws the answer to one question (evolutionary mutation).
    `question=None` picks one at random among the trace's questions: with `weights`
    ({kind: weight}, kind = a question's first word, e.g. "tile") a kind is drawn by weight
    among those the trace asks, then one of its questions uniformly (Ansor's mutation rule
    weights); without, every question is equally likely. A tile answer moves
    one factor between two levels (Ansor's tile-size mutation; `move_tile_factors=False`
    redraws it instead): a uniform redraw of a
    4-level tile throws away the good levels with the bad one, so evolution could not
    climb (on a 3x3 conv it stayed at half of what random search found)."""

    def __init__(self, trace: Trace, rng: random.Random | int | None = None, question: str | None = None,
                 move_tile_factors: bool = True, weights: dict[str, float] | None = None):
        super().__init__(trace)
        self.rng = rng if isinstance(rng, random.Random) else random.Random(rng)
        self.move_tile_factors = move_tile_factors
        if question is None:
            question = draw_question([q for q, a in trace.decisions if not single_tile(a)], self.rng, weights)
        self.target = question

    def _decide(self, question: str, options: list) -> Any:
        old = self.recorded.get(question)
        if question == self.target or old not in options:
            moves = (tile_neighbors(old, options)
                     if self.move_tile_factors and isinstance(old, tuple) and old in options else [])
            others = moves or [o for o in options if o != old] or options
            return others[self.rng.randrange(len(others))]
        return old
