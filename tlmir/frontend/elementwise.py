"""Element-wise ATen ops as `te` expressions: a chain of them becomes one fused stage.

Each rule takes the te expressions of a node's tensor operands (at the output index) and
its scalar arguments, and returns the node's expression. Operands that broadcast are read
with index 0 along their size-1 axes, so a chain reads every input once per output point.
"""
from __future__ import annotations

import math
from typing import Callable

import torch
import torch.fx as fx

from .. import te
from ..ops.linalg import gelu_expr
from .capture import op_name


def _scalar(v) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _gelu(x, approximate: str = "none"):
    if approximate == "tanh":
        c = math.sqrt(2.0 / math.pi)
        return 0.5 * x * (1.0 + te.tanh(c * (x + 0.044715 * x * x * x)))
    return gelu_expr(x)


def _clamp(x, lo, hi):
    if lo is not None:
        x = te.max(x, float(lo))
    if hi is not None:
        x = te.min(x, float(hi))
    return x


def _pow(x, e):
    e = float(e)
    if e == 2.0:
        return x * x
    if e == 3.0:
        return x * x * x
    if e == 0.5:
        return te.sqrt(x)
    if e == -0.5:
        return te.rsqrt(x)
    if e == 1.0:
        return x
    if e == -1.0:
        return 1.0 / x
    raise KeyError(e)   # other exponents: not element-wise rules here (PyTorch runs them)


# name -> fn(operands, node) ; operands: te exprs or python floats, in argument order
RULES: dict[str, Callable] = {
    "add": lambda a, n: a[0] + a[1] * float(n.kwargs.get("alpha", 1)),
    "sub": lambda a, n: a[0] - a[1] * float(n.kwargs.get("alpha", 1)),
    "rsub": lambda a, n: a[1] - a[0] * float(n.kwargs.get("alpha", 1)),
    "mul": lambda a, n: a[0] * a[1],
    "div": lambda a, n: a[0] / a[1],
    "neg": lambda a, n: -a[0],
    "relu": lambda a, n: te.max(a[0], 0.0),
    "relu6": lambda a, n: _clamp(a[0], 0.0, 6.0),
    "hardtanh": lambda a, n: _clamp(a[0], *(list(a[1:3]) + [-1.0, 1.0][len(a) - 1:])),
    "clamp": lambda a, n: _clamp(a[0], *(list(a[1:3]) + [None, None])[:2]),
    "gelu": lambda a, n: _gelu(a[0], n.kwargs.get("approximate", "none")),
    "silu": lambda a, n: a[0] * te.sigmoid(a[0]),
    "sigmoid": lambda a, n: te.sigmoid(a[0]),
    "tanh": lambda a, n: te.tanh(a[0]),
    "exp": lambda a, n: te.exp(a[0]),
    "log": lambda a, n: te.log(a[0]),
    "sqrt": lambda a, n: te.sqrt(a[0]),
    "rsqrt": lambda a, n: te.rsqrt(a[0]),
    "abs": lambda a, n: te.abs(a[0]),
    "reciprocal": lambda a, n: 1.0 / a[0],
    "pow": lambda a, n: _pow(a[0], a[1]),
    "leaky_relu": lambda a, n: te.if_then_else(a[0] > 0.0, a[0],
                                               a[0] * (a[1] if len(a) > 1 else 0.01)),
}


def is_elementwise(node: fx.Node) -> bool:
    """Whether node is an element-wise float32 op these rules compute exactly."""
    name = op_name(node)
    if name not in RULES or node.kwargs.get("rounding_mode") is not None:
        return False
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor) or val.dtype != torch.float32:
        return False
    if name == "pow":
        e = node.args[1] if len(node.args) > 1 else None
        if _scalar(e) is None or float(e) not in (2.0, 3.0, 0.5, -0.5, 1.0, -1.0):
            return False
    for a in node.args:
        if isinstance(a, fx.Node):
            v = a.meta.get("val")
            if not isinstance(v, torch.Tensor) or v.dtype != torch.float32:
                return False
        elif a is not None and _scalar(a) is None:
            return False
    return True


def broadcast_read(t: te.Tensor, out_shape: tuple, idx: tuple):
    """t read at output index idx, numpy-broadcast (size-1 / missing leading axes)."""
    lead = len(out_shape) - len(t.shape)
    return t[tuple(0 if s == 1 and out_shape[lead + d] != 1 else idx[lead + d]
                   for d, s in enumerate(t.shape))]


def chain_expr(nodes: list[fx.Node], leaf: Callable[[fx.Node], object],
               specials: dict | None = None, idx: tuple = ()) -> object:
    """The expression of nodes[-1] at output index idx; `leaf(node)` gives the expression of
    a tensor operand outside the chain (a placeholder read, already broadcast);
    `specials[node](x, idx)` computes a node from its first operand x alone."""
    specials = specials or {}
    exprs: dict[fx.Node, object] = {}

    def operand(a):
        if isinstance(a, fx.Node):
            return exprs[a] if a in exprs else leaf(a)
        return a if a is None else float(a)
    for n in nodes:
        if n in specials:
            exprs[n] = specials[n](operand(n.args[0]), idx)
        else:
            exprs[n] = RULES[op_name(n)]([operand(a) for a in n.args], n)
    return exprs[nodes[-1]]
