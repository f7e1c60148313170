"""Schedule transfer: replay a program of one task on another task of the same operator.

A trace names its decisions by what they decide ("tile D.i", "at W.pack"), so a trace of
dense 128x3072x768 asks the same questions as one of dense 384x2048x512; only the valid
answers differ (the factorizations of other extents). `replay` replays the
source's answers where the target's space offers them and otherwise takes the nearest
valid answer: for a tile, the factorization closest to the source's factors, inner
levels first (the register and cache tiles are what make a program fast; the outermost
level absorbs the change of extent), and says how far the inner tiles moved. The sketch
is matched by its rules, not its id.

Used to spread the fastest programs found on some training tasks to every task of
their kind (bench/transfer_demos.py), so demonstrations hold patterns the language
model's own few samples per task never reached.
"""
from __future__ import annotations

import math
import os
from typing import Any, Callable, NamedTuple

from ..errors import ScheduleError
from ..schedule.decider import Decider, Trace
from ..schedule.schedule import Schedule
from ..schedule.space import SearchSpace


def tile_distance(option: tuple, source: tuple) -> float:
    """How far a tile answer is from the source's, level by level in log2, each level
    weighted twice its outer neighbour (the innermost counts most)."""
    return sum(2.0 ** lvl * abs(math.log2(o) - math.log2(s))
               for lvl, (o, s) in enumerate(zip(option, source)))


def tile_deviation(chosen: Any, source: Any) -> float:
    """How far a replayed tile answer moved from the source's in its inner levels
    (`tile_distance` without the outermost, which absorbs a change of extent): 0 where
    the source's register and cache tiles were kept, or the answer is not a tile."""
    if (isinstance(source, tuple) and isinstance(chosen, tuple) and len(chosen) == len(source)
            and chosen != source and all(s > 0 for s in source)):
        return tile_distance(chosen[1:], source[1:])
    return 0.0


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


Names = Callable[[str], str]


def _same(name: str) -> str:
    return name


class TransferDecider(Decider):
    """Answers every question as `source` did, or with the nearest valid answer. A
    question the source never answered (a stage the target's answers brought in, such as
    the parallel loop of a pack computed at the root) takes the nearest answer to the
    source's first answer of the same kind ("parallel", "unroll", ...), else the first
    option. Where the two sketches name their stages differently (`epilogue_form`),
    questions and loop names are compared in the common naming.

    A parallel answer counts loops, so on another shape it can mean another amount of
    parallel work: a batch-4 program that parallelizes its batch loop runs serially on
    batch 1. Where the replayed answer's fused loop is shorter than `min_parallel` (the
    target's cores), the fewest loops that reach it are fused instead.

    `deviation` sums `tile_deviation` over the answers replayed: how much of the source's
    inner tiling the target's extents could not keep; `moved` names the questions whose
    tiles moved (for the language model to answer anew: `tlm_transfer_repairs`). A
    program tuned for 17x17 maps (prime extents) loses its tiles on 14x14 ones; one
    tuned for 12x12 maps keeps them and transfers better, though its shape is farther
    (`SourceLibrary.rewrites`)."""

    def __init__(self, source: Trace, source_names: Names = _same, target_names: Names = _same,
                 min_parallel: int = 1):
        super().__init__()
        self.names = target_names
        self.min_parallel = min_parallel
        self.deviation = 0.0
        self.moved: list[str] = []
        self.recorded = {_question(q, source_names): source_names(a) if isinstance(a, str) else a
                         for q, a in source.decisions}
        self.by_kind: dict[str, Any] = {}
        for q, a in source.decisions:
            self.by_kind.setdefault(q.split(" ", 1)[0], a)

    def parallel(self, question: str, extents, offered: int) -> int:
        extents = extents[:offered]  # a rewritten answer takes an offered option
        n = self._decide(question, list(range(1, len(extents) + 1)))
        if extents[n - 1] < self.min_parallel:
            n = next((i + 1 for i, e in enumerate(extents) if e >= self.min_parallel), n)
        self.decisions.append((question, n))
        return n

    def _decide(self, question: str, options: list) -> Any:
        key = _question(question, self.names)
        if key in self.recorded:
            answer = self.recorded[key]
            if isinstance(answer, str) and self.names is not _same:
                named = {self.names(o): o for o in options if isinstance(o, str)}
                if named:
                    return named[nearest_answer(answer, list(named))]
            return self._nearest(question, answer, options)
        kind = question.split(" ", 1)[0]
        if kind in self.by_kind:
            try:
                return self._nearest(question, self.by_kind[kind], options)
            except ScheduleError:
                pass
        return options[0]

    def _nearest(self, question: str, source: Any, options: list) -> Any:
        chosen = nearest_answer(source, options)
        deviation = tile_deviation(chosen, source)
        if deviation > 0:
            self.deviation += deviation
            self.moved.append(question)
        return chosen


def _question(question: str, names: Names) -> str:
    kind, _, what = question.partition(" ")
    return f"{kind} {names(what)}"


def _epilogue_names(out: str) -> Names:
    def names(name: str) -> str:
        return "@out" + name[len(out):] if name == out or name.startswith(out + ".") else name
    return names


def _cache_write_names(stage: str) -> Names:
    """A cache-write sketch computes `stage.local` (axes `n.c`, `k.c`, ...) inside the
    loops of `stage`, which writes the result back: the tiled stage and the output of a
    fused sketch."""
    local, written_back = stage + ".local", _epilogue_names(stage)

    def names(name: str) -> str:
        if name == local or name.startswith(local + "."):
            kept, after_axis = [stage], False
            for w in (name[len(local) + 1:].split(".") if name != local else []):
                if w == "c" and after_axis:
                    after_axis = False  # the ".c" a cache-write axis carries
                    continue
                kept.append(w)
                after_axis = w not in ("outer", "inner", "fused")
            return ".".join(kept)
        return written_back(name)
    return names


def _copy_out_names(stage: str) -> Names:
    """A transposed cache-write sketch of an output stage: its loops write `stage.local`
    back as an element-wise epilogue's would read it; the local stage keeps its name."""
    local, written_back = stage + ".local", _epilogue_names(stage)
    return lambda name: name if name == local or name.startswith(local + ".") else written_back(name)


def epilogue_form(rules: str) -> tuple[str, Names | None]:
    """(the sketch's rules with its element-wise epilogue made anonymous, how its names
    read in that form; None where they read as they are). A sketch whose first (output)
    stage is skipped carries an element-wise epilogue whose loops the tiled stage is fused
    into; what it computes (a bias, ReLU, GELU, a residual add) does not change the
    schedule, and stages inlined into it ask nothing. So `bias:skip, D:tile_fuse1` (dense
    + bias) and `gelu:skip, bias:inline, D:tile_fuse1` (dense + bias + GELU) both read
    `@out:skip, D:tile_fuse1`, and so does a plain dense's `D:cache_write1`, whose
    result is written back from a local buffer at the same loop level. A transposed
    cache-write keeps its rule: `conv:cache_write_transposed1` (an NCHW conv) reads
    `@out:skip, conv:cache_write_transposed1` like the conv + bias + ReLU whose copy-out
    is inlined into the ReLU."""
    stages = [part.split(":", 1) for part in rules.split(", ")]
    first, rule = stages[0]
    if rule.startswith("cache_write_transposed"):  # the output's own copy-out is the epilogue
        rest = [f"{s}:{r}" for s, r in stages[1:] if r != "inline"]
        return ", ".join(["@out:skip", f"{first}:{rule}"] + rest), _copy_out_names(first)
    if rule.startswith("cache_write"):
        rest = [f"{s}:{r}" for s, r in stages[1:] if r != "inline"]
        return ", ".join(["@out:skip", f"{first}:tile_fuse{rule[len('cache_write'):]}"] + rest), \
            _cache_write_names(first)
    out = first if len(stages) > 1 and rule == "skip" else None
    kept = [("@out" if stage == out else stage) + ":" + r for stage, r in stages if r != "inline"]
    return ", ".join(kept), (_epilogue_names(out) if out else None)


class Replayed(NamedTuple):
    """A source program rewritten for a task: its schedule and trace, the summed
    `tile_deviation` of its answers from the source's and the questions whose tiles moved."""
    schedule: Schedule
    trace: Trace
    deviation: float
    moved: tuple[str, ...]


def replay(space: SearchSpace, source: Trace, source_sketch: str) -> Replayed | None:
    """The source program (its trace and its sketch's rules, `str(Sketch)`) rewritten for
    `space`'s task (`Replayed`), or None where the space has no sketch with those
    rules or an answer has no counterpart. Without a sketch of the same rules, one of the
    same `epilogue_form` takes it, questions and loop names compared in that form's
    naming (a dense + residual add borrows a dense + bias program, a plain conv a conv +
    bias + ReLU one)."""
    rules, cores = [str(sk) for sk in space.sketches], space.hw.cores
    if source_sketch in rules:
        sketch_id, decider = rules.index(source_sketch), TransferDecider(source, min_parallel=cores)
    else:
        form, source_names = epilogue_form(source_sketch)
        match = [(i, names) for i, (f, names) in enumerate(map(epilogue_form, rules))
                 if f == form and (source_names or names)]
        if not match:
            return None
        sketch_id, target_names = match[0]
        decider = TransferDecider(source, source_names or _same, target_names or _same, cores)
    try:
        schedule, trace = space.apply(sketch_id, decider)
    except ScheduleError:
        return None
    return Replayed(schedule, trace, decider.deviation, tuple(decider.moved))
