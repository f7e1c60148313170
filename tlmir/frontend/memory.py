"""Buffer planning: the kernels' outputs share one arena instead of each call allocating
every one of them.

A kernel output is live from the step that writes it to the last step that reads it or a
view of it. Two outputs may share bytes only if their lifetimes are disjoint (an output
and the operands of its own kernel never share: the kernel reads while it writes).
Placement is greedy by size, as TFLite's arena planner: largest first, each at the
lowest-offset gap that fits among the outputs already placed that are live at the same
time. The arena is allocated once per compiled model and reused by every call.

An output the model returns, or one a returned value may be a view of, cannot be in the
arena (the next call would overwrite what the caller holds): it is allocated per call.
Model inputs and constants are never written (kernels write only their outputs), and
the front end builds no in-place kernel (`CompiledModel` refuses one), so no output
aliases an operand. What PyTorch steps compute is PyTorch's to allocate.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.fx as fx

from .partition import Subgraph

ALIGN = 64      # bytes: every output starts on a cache line, as PyTorch's allocator gives


@dataclass(frozen=True)
class Slot:
    """Where step `step`'s kernel output lives: `offset` into the arena (None: allocated
    per call, returned to the caller), `nbytes`, and its lifetime `first..last` (steps)."""
    step: int
    offset: int | None
    nbytes: int
    first: int
    last: int


@dataclass
class MemoryPlan:
    slots: dict[int, Slot]      # step index -> its kernel output's slot
    arena_bytes: int            # the shared arena, allocated once

    @property
    def fresh_bytes(self) -> int:
        """Bytes of kernel outputs allocated per call (those returned to the caller)."""
        return sum(s.nbytes for s in self.slots.values() if s.offset is None)

    @property
    def unplanned_bytes(self) -> int:
        """Bytes of every kernel output: what each call allocated with no planning."""
        return sum(s.nbytes for s in self.slots.values())

    @property
    def peak_bytes(self) -> int:
        """Kernel-output memory a call holds at most: the arena and the returned outputs."""
        return self.arena_bytes + self.fresh_bytes

    def describe(self) -> str:
        return (f"kernel outputs: {_mb(self.peak_bytes)} planned peak ({_mb(self.arena_bytes)} arena "
                f"reused by every call + {_mb(self.fresh_bytes)} returned, allocated per call) "
                f"vs {_mb(self.unplanned_bytes)} unplanned")


def _mb(n: int) -> str:
    return f"{n / 2**20:.2f} MB"


# copies the runner returns uncopied (the graph is functional: nothing mutates them)
ALIASED_COPIES = {torch.ops.aten.clone.default, torch.ops.aten.alias.default,
                  torch.ops.aten.detach.default, torch.ops.aten.lift_fresh_copy.default}
# views the runner computes with reshape (kernel outputs may be strided unlike eager's);
# _unsafe_view returns a view though its schema has no alias annotation
RESHAPES = {torch.ops.aten.view.default, torch.ops.aten._unsafe_view.default}


def aliases_input(node: fx.Node) -> bool:
    """Whether a PyTorch step's result may share memory with its inputs: an ATen op whose
    schema annotates a return as an alias (views, reshape, split), one the runner runs as
    an alias (`ALIASED_COPIES`, `RESHAPES`), or anything that is no ATen op (getitem)."""
    schema = getattr(node.target, "_schema", None)
    if schema is None or node.target in ALIASED_COPIES or node.target in RESHAPES:
        return True
    return schema.is_mutable or any(r.alias_info is not None for r in schema.returns)


def _aligned(nbytes: int) -> int:
    return -(-nbytes // ALIGN) * ALIGN


def _nbytes(step: Subgraph) -> int:
    out = step.task.outputs[0]
    return math.prod(out.shape) * np.dtype(out.dtype).itemsize


def plan_memory(outputs: list, steps: list) -> MemoryPlan:
    """Slots for the kernel outputs of `steps` (Subgraph | TorchStep, in execution order);
    `outputs` are the graph's returned nodes (None: a constant)."""
    roots: dict[fx.Node, frozenset[int]] = {}    # value -> kernel outputs it may be a view of
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for i, step in enumerate(steps):
        if isinstance(step, Subgraph):
            reads = [o.node for o in step.operands if o.node is not None]
        else:
            reads = step.node.all_input_nodes
        for r in reads:
            for b in roots.get(r, ()):
                last[b] = i
        if isinstance(step, Subgraph):
            first[i] = last[i] = i
            roots[step.output] = frozenset({i})
        elif aliases_input(step.node):
            roots[step.node] = frozenset().union(*(roots.get(r, frozenset()) for r in reads))
    returned = frozenset().union(*(roots.get(o, frozenset()) for o in outputs if o is not None))
    slots = {i: Slot(i, None, _nbytes(steps[i]), first[i], last[i]) for i in returned}
    placed: list[Slot] = []
    for i in sorted(set(first) - returned, key=lambda i: (-_nbytes(steps[i]), i)):
        size = _nbytes(steps[i])
        slot = Slot(i, _offset(placed, _aligned(size), first[i], last[i]), size, first[i], last[i])
        placed.append(slot)
        slots[i] = slot
    arena = max((s.offset + _aligned(s.nbytes) for s in placed), default=0)
    return MemoryPlan(dict(sorted(slots.items())), arena)


def _offset(placed: list[Slot], size: int, lo: int, hi: int) -> int:
    """The start of the smallest gap of at least `size` bytes between the placed slots
    live during steps lo..hi, else the end of the highest of them."""
    busy = sorted((s.offset, s.offset + _aligned(s.nbytes)) for s in placed
                  if s.first <= hi and lo <= s.last)
    best, best_gap, end = None, None, 0
    for start, stop in busy:
        gap = start - end
        if gap >= size and (best_gap is None or gap < best_gap):
            best, best_gap = end, gap
        end = max(end, stop)
    return end if best is None else best
