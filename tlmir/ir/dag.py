"""ComputeDAG: the stages of a computation and the facts derivation rules test.

For each stage: its kind (placeholder / injective / reduction), how it reads each
input (simple element-wise or broadcast access vs. anything else), whether it is
*strictly inlinable* (injective, simple reads only, no expensive math, no branch —
Ansor's rule, with every transcendental call counted as expensive) and whether it
*needs multi-level tiling* (it reuses data: an input misses at least two spatial axes,
or one when the stage also reduces).
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Sequence

from .expr import Call, Select, TensorRead, Var, walk
from .tensor import ComputeOp, Operation, Tensor, topo_ops

EXPENSIVE_CALLS = ("exp", "log", "tanh", "erf", "sigmoid")


@dataclass
class Access:
    """How a stage reads one tensor: `simple` when every read indexes it with bare
    loop variables in loop order (element-wise or broadcast)."""
    tensor: str
    simple: bool
    missing_spatial: int  # spatial axes (extent > 1) that index none of the reads


@dataclass
class StageFacts:
    name: str
    op: Operation
    kind: str                                   # placeholder | injective | reduction
    is_output: bool
    reads: list[Access] = field(default_factory=list)
    producers: list[str] = field(default_factory=list)
    consumers: list[str] = field(default_factory=list)
    has_expensive_op: bool = False
    has_branch: bool = False

    @property
    def strictly_inlinable(self) -> bool:
        return (self.kind == "injective" and not self.has_expensive_op and not self.has_branch
                and all(a.simple for a in self.reads))

    @property
    def needs_multi_level_tiling(self) -> bool:
        """Data reuse worth tiling for (Ansor's NeedsMultiLevelTiling)."""
        if self.kind == "placeholder":
            return False
        n_missing = sum(1 for a in self.reads if a.missing_spatial > 0)
        return n_missing >= 2 or (n_missing >= 1 and self.kind == "reduction")


def _access(op: ComputeOp, tensor: Tensor) -> Access:
    reads = [n for n in walk(op.body) if isinstance(n, TensorRead) and n.tensor.op is tensor.op]
    order = {a.var: k for k, a in enumerate(list(op.axis) + list(op.reduce_axis))}
    simple, used = True, set()
    for r in reads:
        pos = [order.get(i) if isinstance(i, Var) else None for i in r.indices]
        if None in pos or len(set(pos)) != len(pos) or pos != sorted(pos):
            simple = False
        for i in r.indices:
            used |= {n for n in walk(i) if isinstance(n, Var)}
    missing = sum(1 for a in op.axis if a.extent > 1 and a.var not in used)
    return Access(tensor.name, simple, missing)


_BODY_FACTS: "weakref.WeakKeyDictionary[ComputeOp, tuple]" = weakref.WeakKeyDictionary()


def _body_facts(op: ComputeOp) -> tuple:
    """(reads, producers, has_expensive_op, has_branch) of a compute op: what its body
    alone decides, computed once per op (the rules build a DAG for every candidate)."""
    facts = _BODY_FACTS.get(op)
    if facts is None:
        nodes = list(walk(op.body))
        facts = ([_access(op, t) for t in op.inputs()], [t.name for t in op.inputs()],
                 any(isinstance(n, Call) and n.op in EXPENSIVE_CALLS for n in nodes),
                 any(isinstance(n, Select) for n in nodes))
        _BODY_FACTS[op] = facts
    return facts


class ComputeDAG:
    """Stages in topological order (inputs first) with their classification."""

    def __init__(self, outputs: Sequence[Tensor]):
        outputs = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
        self.outputs = outputs
        self.ops: list[Operation] = topo_ops(outputs)
        out_ids = {id(t.op) for t in outputs}
        self.stages: list[StageFacts] = []
        by_id: dict[int, StageFacts] = {}
        for op in self.ops:
            if not isinstance(op, ComputeOp):
                facts = StageFacts(op.name, op, "placeholder", id(op) in out_ids)
            else:
                reads, producers, expensive, branch = _body_facts(op)
                facts = StageFacts(
                    op.name, op, "reduction" if op.reduce_axis else "injective", id(op) in out_ids,
                    reads=list(reads), producers=list(producers),
                    has_expensive_op=expensive, has_branch=branch)
                for t in op.inputs():
                    by_id[id(t.op)].consumers.append(op.name)
            by_id[id(op)] = facts
            self.stages.append(facts)

    def __getitem__(self, name: str) -> StageFacts:
        for s in self.stages:
            if s.name == name:
                return s
        raise KeyError(f"no stage named {name!r}; stages: {[s.name for s in self.stages]}")

    def __str__(self) -> str:
        rows = []
        for s in self.stages:
            flags = [f for f, on in (("output", s.is_output), ("inline", s.strictly_inlinable),
                                     ("multi-level-tiling", s.needs_multi_level_tiling)) if on]
            reads = ", ".join(f"{a.tensor}{'' if a.simple else '(complex)'}" for a in s.reads)
            rows.append(f"{s.name:<12} {s.kind:<11} reads [{reads}] {' '.join(flags)}")
        return "\n".join(rows)
