"""What every target kind's rule set provides: sketches (plain data, one rule per stage)
and the application of a sketch to a Decider's answers."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ...ir.dag import ComputeDAG
    from ...runtime.target import HardwareParams, SearchParams
    from ..decider import Decider
    from ..schedule import Schedule


@dataclass(frozen=True)
class Sketch:
    rules: tuple  # ((stage_name, rule, arg), ...) output-first

    def rule_of(self, name: str) -> tuple | None:
        return next(((r, a) for s, r, a in self.rules if s == name), None)

    def __str__(self) -> str:
        return ", ".join(f"{s}:{r}{'' if a is None else a}" for s, r, a in self.rules)


class RuleSet(Protocol):
    """Derivation rules of one target kind. `questions`: the first word of every question
    its sketches ask (the tensor language's question keywords come from here)."""
    kind: str
    questions: tuple[str, ...]

    def sketches(self, outputs, hw: HardwareParams, sp: SearchParams) -> list[Sketch]:
        """All sketches of the computation of `outputs`, in a deterministic order (a
        sketch's index is its id in traces and records)."""
        ...

    def build(self, outputs, sketch: Sketch, ask: Decider, hw: HardwareParams,
              sp: SearchParams) -> Schedule:
        """Apply `sketch`, asking `ask` every question."""
        ...


def elementwise_consumer(dag: ComputeDAG, name: str, inlined: set) -> str | None:
    """The single consumer (seen through inlined stages) that reads `name` element-wise
    with the same shape, or None (Ansor's HasSingleElementwiseMatchedConsumer)."""
    me = dag[name]
    found: list[str] = []

    def walk(producer: str) -> bool:
        for c in dag[producer].consumers:
            facts = dag[c]
            acc = next(a for a in facts.reads if a.tensor == producer)
            if not acc.simple or acc.missing_spatial or facts.op.shape != me.op.shape:
                return False
            if c in inlined:
                if not walk(c):
                    return False
            elif c not in found:
                found.append(c)
        return True

    ok = walk(name)
    return found[0] if ok and len(found) == 1 else None
