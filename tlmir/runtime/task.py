"""A tuning task: a computation (inputs then outputs), its reference, FLOPs and weight."""
from __future__ import annotations

import hashlib
import re
from typing import Callable, Sequence

import numpy as np

from ..errors import DefinitionError
from ..ir.printer import te_str
from ..ir.tensor import ComputeOp, PlaceholderOp, Tensor, topo_ops


class Task:
    """`Task(name, [A, B, C])`: the tensors a kernel takes, inputs (placeholders) first.

    `reference` is a numpy function of the inputs; without one, the untuned default
    schedule of the same computation is the reference (`tlmir.build.reference_outputs`:
    running a schedule belongs to the layers above the task's). `key` identifies the computation
    (definition, shapes, dtypes): records of one task never apply to another.
    """

    def __init__(self, name: str, args: Sequence[Tensor], reference: Callable | None = None,
                 weight: float = 1.0, input_ranges: list | None = None, flops: int | None = None):
        from ..ops.base import count_flops
        args = list(args)
        if not args or not all(isinstance(t, Tensor) for t in args):
            raise DefinitionError(f"task {name!r}: args must be a non-empty list of tensors")
        self.name, self.weight = name, weight
        self.inputs = [t for t in args if isinstance(t.op, PlaceholderOp)]
        self.outputs = [t for t in args if isinstance(t.op, ComputeOp)]
        if args != self.inputs + self.outputs or not self.outputs:
            raise DefinitionError(f"task {name!r}: give the input placeholders first, then the "
                                  f"outputs (got {[t.name for t in args]})")
        missing = [op.name for op in topo_ops(self.outputs)
                   if isinstance(op, PlaceholderOp) and all(op is not t.op for t in self.inputs)]
        if missing:
            raise DefinitionError(f"task {name!r}: inputs {missing} are read but not in args")
        self.args = args
        self.flops = count_flops(self.outputs) if flops is None else flops
        self.reference = reference
        self.input_ranges = input_ranges
        self.op = None  # the tlmir.ops OpDef this task came from, if any
        self.definition = te_str(self.outputs)
        order = ",".join(t.name for t in args)
        self.key = hashlib.sha1(f"{self.definition}\nargs:{order}".encode()).hexdigest()[:16]

    @classmethod
    def from_op(cls, op, weight: float = 1.0, name: str | None = None) -> "Task":
        """A task for an OpDef of tlmir.ops (its numpy reference included), named after the
        op's family unless `name` is given."""
        task = cls(name or op.family, op.args, op.run_reference, weight, op.input_ranges, op.flops)
        task.op = op
        return task

    def random_inputs(self, seed: int = 0) -> list[np.ndarray]:
        rng = np.random.default_rng(seed)
        ranges = self.input_ranges or [(-1.0, 1.0)] * len(self.inputs)
        return [rng.uniform(lo, hi, size=t.shape).astype(t.dtype) for t, (lo, hi) in zip(self.inputs, ranges)]

    def __repr__(self) -> str:
        return f"Task({self.name}, key={self.key}, {self.flops / 1e9:.3f} GFLOP, weight={self.weight})"


_PARAM_WORD = re.compile(r"\d|[a-z]\d+$")  # 1x64x56x56, 3, m128, s2, p0, g32 (not conv2d)


def task_type(task) -> str:
    """The op family of a task: its name up to the first shape or parameter word."""
    words = []
    for w in task.name.split("_"):
        if _PARAM_WORD.match(w):
            break
        words.append(w)
    return "_".join(words) or task.name


_KERNEL = re.compile(r"\d+x\d+$")


def category(task: Task) -> str:
    """Op family, plus the kernel size for convolutions (1x1 and 3x3 convs differ in kind)."""
    kind = task_type(task)
    if "conv" in kind:
        rest = task.name[len(kind):].split("_")
        kernel = next((w for w in rest[2:] if _KERNEL.match(w)), "")
        return f"{kind}_{kernel}" if kernel else kind
    return kind
