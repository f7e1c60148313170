"""The schedule space of a task: the sketches its Target's rule set derives
(schedule.rules; Ansor's CPU rules in rules/cpu.py) and the ways to turn a Decider's
answers into schedules. Sampling, replay, mutation and LM generation all go through
`apply`, so they are one code path.
"""
from __future__ import annotations

import random
import re

from ..errors import ScheduleError
from ..runtime.target import HardwareParams, SearchParams
from .decider import Decider, MutateDecider, RandomDecider, ReplayDecider, Trace
from .rules import Sketch, rule_set
from .schedule import Schedule

__all__ = ["SearchSpace", "Sketch"]


class SearchSpace:
    """The sketches of one computation and the ways to turn answers into schedules."""

    def __init__(self, outputs, hw: HardwareParams | None = None, sp: SearchParams | None = None):
        from ..runtime.target import host_hardware
        self.outputs = list(outputs)
        self.hw = hw or host_hardware()
        self.sp = sp or SearchParams()
        self.rules = rule_set(self.hw.kind)
        self.sketches = self.rules.sketches(self.outputs, self.hw, self.sp)
        self.drawn = self._drawn_sketches()

    def _drawn_sketches(self) -> list[int]:
        """The sketches random draws come from: those SearchParams.sketch_filter matches, so a
        search can be pointed at a sketch it would rarely keep (packed-weights convolutions)."""
        if not self.sp.sketch_filter:
            return list(range(len(self.sketches)))
        pattern = re.compile(self.sp.sketch_filter)
        drawn = [i for i, s in enumerate(self.sketches) if pattern.search(str(s))]
        if not drawn:
            raise ScheduleError(f"sketch_filter {self.sp.sketch_filter!r} matches none of the "
                                f"{len(self.sketches)} sketches ({'; '.join(map(str, self.sketches))})")
        return drawn

    def apply(self, sketch_id: int, ask: Decider) -> tuple[Schedule, Trace]:
        if not 0 <= sketch_id < len(self.sketches):
            raise ScheduleError(f"sketch {sketch_id} does not exist (the space has {len(self.sketches)})")
        sch = self.rules.build(self.outputs, self.sketches[sketch_id], ask, self.hw, self.sp)
        return sch, Trace(sketch_id, list(ask.decisions))

    def sample(self, rng: random.Random) -> tuple[Schedule, Trace]:
        return self.apply(self.drawn[rng.randrange(len(self.drawn))], RandomDecider(rng))

    def replay(self, trace: Trace) -> Schedule:
        return self.apply(trace.sketch, ReplayDecider(trace))[0]

    def mutate(self, trace: Trace, rng: random.Random) -> tuple[Schedule, Trace]:
        return self.apply(trace.sketch, MutateDecider(trace, rng,
                                                      move_tile_factors=self.sp.tile_mutation == "move",
                                                      weights=dict(self.sp.mutation_weights)))
