"""Tensors and the operations that define them (TE's PlaceholderOp / ComputeOp)."""
from __future__ import annotations

from typing import Sequence

from ..errors import DefinitionError, ShapeError
from .expr import INDEX, Expr, Reduce, TensorRead, Var, const, walk


class IterVar:
    """A loop axis with domain [0, extent): `spatial` (an output dimension) or `reduce`."""
    __slots__ = ("var", "extent", "kind")

    def __init__(self, name: str, extent: int, kind: str = "spatial"):
        if not isinstance(extent, int) or extent <= 0:
            raise ShapeError(f"axis {name!r}: extent must be a positive int, got {extent!r}")
        self.var, self.extent, self.kind = Var(name, INDEX), extent, kind

    @property
    def name(self) -> str:
        return self.var.name

    # lets an IterVar stand for its variable inside expressions (TE convention)
    def _e(self):
        return self.var

    def __add__(self, o): return self.var + o
    def __radd__(self, o): return o + self.var
    def __sub__(self, o): return self.var - o
    def __rsub__(self, o): return o - self.var
    def __mul__(self, o): return self.var * o
    def __rmul__(self, o): return o * self.var
    def __floordiv__(self, o): return self.var // o
    def __mod__(self, o): return self.var % o
    def __lt__(self, o): return self.var < o
    def __le__(self, o): return self.var <= o
    def __gt__(self, o): return self.var > o
    def __ge__(self, o): return self.var >= o

    def __repr__(self) -> str:
        return f"IterVar({self.name}, {self.extent}, {self.kind})"


def as_expr(x) -> Expr:
    return x.var if isinstance(x, IterVar) else const(x)


class Operation:
    name: str
    axis: list
    reduce_axis: list
    dtype: str
    shape: tuple

    def inputs(self) -> list["Tensor"]:
        return []

    def output(self) -> "Tensor":
        return self._output


class PlaceholderOp(Operation):
    def __init__(self, name: str, shape: Sequence[int], dtype: str):
        self.name, self.shape, self.dtype = name, tuple(shape), dtype
        self.axis, self.reduce_axis = [], []
        self._output = Tensor(self)


class ComputeOp(Operation):
    """out[axis] = body, where body may be a Reduce over reduce_axis at its top."""

    def __init__(self, name: str, axis: Sequence[IterVar], body: Expr, tag: str = ""):
        self.name, self.axis, self.body, self.tag = name, list(axis), body, tag
        self.shape = tuple(a.extent for a in self.axis)
        self.dtype = body.dtype
        self.reduce_axis = list(body.axes) if isinstance(body, Reduce) else []
        for node in walk(body):
            if isinstance(node, Reduce) and node is not body:
                raise DefinitionError(f"compute {name!r}: a reduction must be the whole body, "
                                      f"not nested inside another expression")
        self._inputs: tuple | None = None
        self._output = Tensor(self)

    def inputs(self) -> list["Tensor"]:
        """The tensors the body reads, in first-read order (walked once: derivation rules
        ask for every candidate schedule, and an op's body never changes)."""
        if self._inputs is None:
            seen: dict[int, Tensor] = {}
            for node in walk(self.body):
                if isinstance(node, TensorRead):
                    seen.setdefault(id(node.tensor), node.tensor)
            self._inputs = tuple(seen.values())
        return list(self._inputs)

    @property
    def is_reduction(self) -> bool:
        return bool(self.reduce_axis)


class Tensor:
    """The output of an operation; indexing it in a compute body makes a TensorRead."""

    def __init__(self, op: Operation):
        self.op = op

    @property
    def name(self) -> str:
        return self.op.name

    @property
    def shape(self) -> tuple:
        return self.op.shape

    @property
    def dtype(self) -> str:
        return self.op.dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __getitem__(self, idx) -> TensorRead:
        idx = idx if isinstance(idx, tuple) else (idx,)
        if len(idx) != self.ndim:
            raise ShapeError(f"tensor {self.name!r} has {self.ndim} dimensions "
                             f"{list(self.shape)} but is indexed with {len(idx)}")
        return TensorRead(self, [as_expr(i) for i in idx])

    def __repr__(self) -> str:
        return f"Tensor({self.name}, {list(self.shape)}, {self.dtype})"


def topo_ops(outputs: Sequence[Tensor]) -> list[Operation]:
    """Operations reachable from `outputs`, producers first (deterministic order)."""
    order: list[Operation] = []
    seen: set[int] = set()

    def visit(op: Operation) -> None:
        if id(op) in seen:
            return
        seen.add(id(op))
        for t in op.inputs():
            visit(t.op)
        order.append(op)

    for t in outputs:
        visit(t.op)
    return order
