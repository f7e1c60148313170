"""`OpDef`: an operator's tensor definition plus its numpy reference, flop count and inputs;
`BASELINES`: each op family's framework baselines (PyTorch, numpy), which the op modules
register beside their ops with the `baseline` decorator.

Flop counting rule (applied mechanically by `count_flops`, so every op follows it):

* every float arithmetic node in a stage body counts 1 per evaluation: + - * /, min/max
  (so ReLU = max(x, 0) is 1) and each math call (exp, erf, rsqrt, tanh, ...);
* index arithmetic, comparisons, casts and selects (padding) count 0;
* a reduction stage counts (flops of its source + 1 for the combine) per point of its
  spatial x reduction domain, so a multiply-add is 2 flops: matmul = 2*M*N*K.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from ..errors import DefinitionError, ShapeError
from ..ir import expr as E
from ..ir.tensor import ComputeOp, Tensor, topo_ops  # noqa: F401 (re-exported)

_ARITH = (E.Add, E.Sub, E.Mul, E.Div, E.Min, E.Max, E.Call)


@dataclass(eq=False)
class OpDef:
    """One operator: placeholders `inputs`, final tensors `outputs`, and how to check it.

    `family` is the kind of op - for the library's ops the name of its builder in
    `ops.OPS`, so `make(family, **params)` rebuilds it - and keys its baselines in
    `BASELINES`. `reference(*input_arrays) -> [output_arrays]` is plain numpy (float64
    inside, results cast to each output's dtype). `input_ranges[i]` is the (low, high)
    interval that `random_inputs` draws input i from (default (-1, 1))."""
    family: str
    inputs: list[Tensor]
    outputs: list[Tensor]
    reference: Callable[..., list[np.ndarray]]
    flops: int
    params: dict = field(default_factory=dict)
    input_ranges: list[tuple[float, float]] | None = None

    @property
    def args(self) -> list[Tensor]:
        """Kernel argument order: inputs, then outputs."""
        return list(self.inputs) + list(self.outputs)

    @property
    def stages(self) -> list[ComputeOp]:
        """All compute stages, producers before consumers."""
        return [op for op in topo_ops(self.outputs) if isinstance(op, ComputeOp)]

    def random_inputs(self, seed: int = 0) -> list[np.ndarray]:
        """float32 (or the placeholder's dtype) arrays drawn uniformly from input_ranges."""
        rng = np.random.default_rng(seed)
        ranges = self.input_ranges or [(-1.0, 1.0)] * len(self.inputs)
        return [rng.uniform(lo, hi, size=t.shape).astype(t.dtype)
                for t, (lo, hi) in zip(self.inputs, ranges)]

    def run_reference(self, *arrays: np.ndarray) -> list[np.ndarray]:
        """The reference outputs, each cast to its output tensor's dtype."""
        outs = self.reference(*arrays)
        return [np.asarray(o).astype(t.dtype) for o, t in zip(outs, self.outputs)]

    def empty_outputs(self) -> list[np.ndarray]:
        return [np.zeros(t.shape, dtype=t.dtype) for t in self.outputs]

    def __repr__(self) -> str:
        ps = ", ".join(f"{k}={v!r}" for k, v in self.params.items())
        return f"OpDef({self.family}({ps}), {len(self.stages)} stages, {self.flops} flops)"


def _body_flops(e: E.Expr) -> int:
    if isinstance(e, E.Select):  # only one side runs; count the costlier (padding: 0)
        return max(_body_flops(e.t), _body_flops(e.f))
    if isinstance(e, (E.Cast, E.Not)) or e.dtype == "bool" or not E.is_float(e.dtype):
        return sum(_body_flops(c) for c in e.children() if E.is_float(c.dtype))
    if isinstance(e, E.TensorRead):
        return 0
    own = 1 if isinstance(e, _ARITH) else 0
    return own + sum(_body_flops(c) for c in e.children())


def stage_flops(op: ComputeOp) -> int:
    """Flops of one stage under the module's counting rule."""
    points = int(np.prod(op.shape))
    body = op.body
    if isinstance(body, E.Reduce):
        red = int(np.prod([a.extent for a in body.axes]))
        return points * red * (_body_flops(body.source) + 1)
    return points * _body_flops(body)


def count_flops(outputs: Sequence[Tensor]) -> int:
    return sum(stage_flops(op) for op in topo_ops(outputs) if isinstance(op, ComputeOp))


# ------------------------------------------------------------------ framework baselines

FRAMEWORKS = ("torch", "onednn", "numpy")

BaselineBuilder = Callable[[dict], Callable | None]
BASELINES: dict[str, dict[str, BaselineBuilder]] = {}


def baseline(framework: str, *families: str) -> Callable[[BaselineBuilder], BaselineBuilder]:
    """Decorator registering `builder(params) -> fn or None` as `framework`'s baseline of
    each op family: fn takes the op's inputs (as `baselines.prepare` gives them) and
    returns its output. Builders import torch themselves, so that importing an op module
    never loads it; None means no fast path for these parameters."""
    if framework not in FRAMEWORKS:
        raise ValueError(f"unknown framework {framework!r}; known: {', '.join(FRAMEWORKS)}")

    def register(builder: BaselineBuilder) -> BaselineBuilder:
        for family in families:
            BASELINES.setdefault(family, {})[framework] = builder
        return builder
    return register


def torch_act(act: str | None) -> Callable:
    """The PyTorch epilogue of an op's `act` parameter, in place where PyTorch has one (the
    baselines' fused activations: relu, relu6, gelu, tanh; None: none)."""
    import torch
    import torch.nn.functional as F
    fns = {None: lambda r: r, "relu": torch.relu_, "relu6": lambda r: F.relu6(r, inplace=True),
           "gelu": F.gelu, "tanh": torch.tanh_}
    if act not in fns:
        raise DefinitionError(f"no PyTorch baseline for activation {act!r}; known: "
                              f"{', '.join(str(k) for k in fns)}")
    return fns[act]


# ------------------------------------------------------------------ parameter helpers

def pos_int(op: str, name: str, v, allow_zero: bool = False) -> int:
    """Validate an integer shape parameter."""
    lo = 0 if allow_zero else 1
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
        kind = "a non-negative" if allow_zero else "a positive"
        raise DefinitionError(f"{op}: parameter {name} must be {kind} int, got {v!r}")
    return int(v)


def pair(op: str, name: str, v, allow_zero: bool = False) -> tuple[int, int]:
    """An int or a 2-sequence of ints (height, width)."""
    if isinstance(v, (tuple, list)):
        if len(v) != 2:
            raise DefinitionError(f"{op}: parameter {name} must be an int or a pair, got {v!r}")
        return pos_int(op, name, v[0], allow_zero), pos_int(op, name, v[1], allow_zero)
    v = pos_int(op, name, v, allow_zero)
    return v, v


def shape_tuple(op: str, shape) -> tuple[int, ...]:
    shape = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
    if not shape:
        raise ShapeError(f"{op}: shape must have at least one dimension")
    return tuple(pos_int(op, "shape", s) for s in shape)


def out_size(op: str, dim: str, size: int, k: int, stride: int, pad: int, dil: int = 1) -> int:
    """Output extent of a sliding window (floor mode); raises if the window does not fit."""
    span = dil * (k - 1) + 1
    n = (size + 2 * pad - span) // stride + 1
    if size + 2 * pad < span or n <= 0:
        raise ShapeError(f"{op}: window of extent {span} (kernel {k}, dilation {dil}) does not "
                         f"fit {dim}={size} with padding {pad}")
    return n
