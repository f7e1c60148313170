"""Schedule transfer: replay a program of one task on another task of the same operator.

A trace names its decisions by what they decide ("tile D.i", "at W.pack"), so a trace of
dense 128x3072x768 asks the same questions as one of dense 384x2048x512; only the valid
answers differ (the factorizations of other extents). `transfer` replays the
source's answers where the target's space offers them and otherwise takes the nearest
valid answer: for a tile, the factorization closest to the source's factors, inner
levels first (the register and cache tiles are what make a program fast; the outermost
level absorbs the change of extent). The sketch is matched by its rules, not its id.

Used to spread the fastest programs found on some training tasks to every task of
their kind (bench/transfer_demos.py), so demonstrations hold patterns the language
model's own few samples per task never reached.
"""
from __future__ import annotations

import math
import os
from typing import Any

from ..errors import ScheduleError
from ..schedule.decider import Decider, Trace
from ..schedule.schedule import Schedule
from ..schedule.space import SearchSpace


def tile_distance(option: tuple, source: tuple) -> float:
    """How far a tile answer is from the source's, level by level in log2, each level
    weighted twice its outer neighbour (the innermost counts most)."""
    return sum(2.0 ** lvl * abs(math.log2(o) - math.log2(s))
               for lvl, (o, s) in enumerate(zip(option, source)))


def nearest_answer(source: Any, options: list) -> Any:
    """`source` if the options hold it, else the option nearest to it: a tile by
    `tile_distance`, a number in log scale, a name (a compute location) by the longest
    common prefix. The first of equally near options wins, so the result is deterministic."""
    if source in options:
        return source
    if isinstance(source, tuple):
        same = [o for o in options if isinstance(o, tuple) and len(o) == len(source)]
        if same and all(s > 0 for s in source):
            return min(same, key=lambda o: tile_distance(o, source))
    elif isinstance(source, (int, float)) and not isinstance(source, bool):
        nums = [o for o in options if isinstance(o, (int, float)) and not isinstance(o, bool)]
        if nums:
            return min(nums, key=lambda o: abs(math.log1p(abs(o)) - math.log1p(abs(source))))
    elif isinstance(source, str):
        names = [o for o in options if isinstance(o, str)]
        if names:
            return max(names, key=lambda o: len(os.path.commonprefix([o, source])))
    raise ScheduleError(f"no answer near {source!r} among {len(options)} options")


class TransferDecider(Decider):
    """Answers every question as `source` did, or with the nearest valid answer. A
    question the source never answered (a stage the target's answers brought in, such as
    the parallel loop of a pack computed at the root) takes the nearest answer to the
    source's first answer of the same kind ("parallel", "unroll", ...), else the first option."""

    def __init__(self, source: Trace):
        super().__init__()
        self.recorded = source.answers()
        self.by_kind: dict[str, Any] = {}
        for q, a in source.decisions:
            self.by_kind.setdefault(q.split(" ", 1)[0], a)

    def _decide(self, question: str, options: list) -> Any:
        if question in self.recorded:
            return nearest_answer(self.recorded[question], options)
        kind = question.split(" ", 1)[0]
        if kind in self.by_kind:
            try:
                return nearest_answer(self.by_kind[kind], options)
            except ScheduleError:
                pass
        return options[0]


def epilogue_form(rules: str) -> tuple[str, str | None]:
    """(the sketch's rules with its element-wise epilogue made anonymous, the epilogue's
    stage name or None). A sketch whose first (output) stage is skipped carries an
    element-wise epilogue whose loops the tiled stage is fused into; what it computes
    (a bias, ReLU, GELU, a residual add) does not change the schedule, and stages inlined
    into it ask nothing. So `bias:skip, D:tile_fuse1` (dense + bias) and `gelu:skip,
    bias:inline, D:tile_fuse1` (dense + bias + GELU) both read `@out:skip, D:tile_fuse1`."""
    stages = [part.split(":", 1) for part in rules.split(", ")]
    out = stages[0][0] if len(stages) > 1 and stages[0][1] == "skip" else None
    kept = [("@out" if stage == out else stage) + ":" + rule for stage, rule in stages if rule != "inline"]
    return ", ".join(kept), out


def _renamed(trace: Trace, old: str, new: str) -> Trace:
    """`trace` with the stage `old` called `new` in its questions and loop-name answers."""
    def name(text: str) -> str:
        return new + text[len(old):] if text == old or text.startswith(old + ".") else text
    decisions = []
    for q, a in trace.decisions:
        kind, _, what = q.partition(" ")
        decisions.append((f"{kind} {name(what)}", name(a) if isinstance(a, str) else a))
    return Trace(trace.sketch, decisions)


def transfer(space: SearchSpace, source: Trace, source_sketch: str) -> tuple[Schedule, Trace] | None:
    """The source program (its trace and its sketch's rules, `str(Sketch)`) rewritten for
    `space`'s task as (schedule, trace), or None where the space has no sketch with those
    rules or an answer has no counterpart. Without a sketch of the same rules, one of the
    same `epilogue_form` takes it, the epilogue stage renamed (a dense + residual add
    borrows a dense + bias program)."""
    rules = [str(sk) for sk in space.sketches]
    if source_sketch in rules:
        sketch_id = rules.index(source_sketch)
    else:
        form, out = epilogue_form(source_sketch)
        match = [(i, o) for i, (f, o) in enumerate(map(epilogue_form, rules)) if f == form and out and o]
        if not match:
            return None
        sketch_id, target_out = match[0]
        source = _renamed(source, out, target_out)
    try:
        return space.apply(sketch_id, TransferDecider(source))
    except ScheduleError:
        return None
