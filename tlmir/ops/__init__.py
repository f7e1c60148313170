"""The operator library: each op is a function returning an `OpDef`; `make` builds by name."""
from __future__ import annotations

import inspect
from typing import Callable

from ..errors import DefinitionError
from .base import OpDef, count_flops, stage_flops, topo_ops
from .conv import (conv2d_bias, conv2d_bias_relu, conv2d_nchw, conv2d_nhwc, conv2d_transpose_nchw,
                   depthwise_conv2d_nchw)
from .elemwise import add, add_relu, bias_add_gelu, scale_shift_tanh, silu_mul
from .linalg import batch_matmul, dense, matmul
from .norm import layernorm, rmsnorm, softmax
from .pool import avg_pool2d, max_pool2d

OPS: dict[str, Callable[..., OpDef]] = {f.__name__: f for f in (
    matmul, batch_matmul, dense,
    conv2d_nchw, conv2d_nhwc, depthwise_conv2d_nchw, conv2d_bias_relu, conv2d_bias,
    conv2d_transpose_nchw,
    max_pool2d, avg_pool2d,
    softmax, layernorm, rmsnorm,
    add_relu, bias_add_gelu, scale_shift_tanh, add, silu_mul,
)}


def make(name: str, **params) -> OpDef:
    """OPS[name](**params), with unknown names / parameters reported as DefinitionError."""
    if name not in OPS:
        raise DefinitionError(f"unknown op {name!r}; known ops: {', '.join(sorted(OPS))}")
    fn = OPS[name]
    sig = inspect.signature(fn)
    try:
        sig.bind(**params)
    except TypeError as e:
        raise DefinitionError(f"op {name!r}: bad parameters {sorted(params)} ({e}); "
                              f"signature is {name}{sig}") from None
    return fn(**params)


__all__ = ["OPS", "OpDef", "make", "count_flops", "stage_flops", "topo_ops"] + list(OPS)
