"""Derivation rules per target kind. SearchSpace asks the rule set of its Target's kind
(`HardwareParams.kind`): Ansor's CPU rules (cpu.py) and GPU rules (gpu.py, kind "cuda");
a new kind adds its module here and one RULE_SETS entry.

    rules = rule_set(hw.kind)
    sch = rules.build(outputs, rules.sketches(outputs, hw, sp)[0], decider, hw, sp)
"""
from __future__ import annotations

from ...errors import ScheduleError
from .base import RuleSet, Sketch
from .cpu import CPURules
from .gpu import GPURules

__all__ = ["RULE_SETS", "RuleSet", "Sketch", "question_keywords", "rule_set"]

RULE_SETS: dict[str, RuleSet] = {"cpu": CPURules(), "cuda": GPURules()}


def rule_set(kind: str) -> RuleSet:
    try:
        return RULE_SETS[kind]
    except KeyError:
        raise ScheduleError(f"no derivation rules for target kind {kind!r}; "
                            f"rule sets exist for: {', '.join(RULE_SETS)}") from None


def question_keywords() -> tuple[str, ...]:
    """The first words of every question any rule set asks, in registration order."""
    out: list[str] = []
    for rules in RULE_SETS.values():
        out += [q for q in rules.questions if q not in out]
    return tuple(out)
