"""2-D pooling over NCHW (floor mode, no dilation).

max_pool2d pads with the lowest float32 (padding never wins, as in PyTorch);
avg_pool2d counts padded zeros in the divisor (PyTorch count_include_pad=True):
out = sum(window of the zero-padded input) / (kh * kw).
Their baselines are PyTorch's max_pool2d / avg_pool2d; numpy has no fast pooling."""
from __future__ import annotations

from typing import Callable

import numpy as np

from .. import te
from ..errors import DefinitionError
from .base import OpDef, baseline, count_flops, out_size, pair, pos_int
from .conv import _np_pad, hw, pad_nchw, win

FLOAT32_LOWEST = float(np.finfo(np.float32).min)


def _pool_params(op, N, C, H, W, kernel, stride, padding):
    N, C, H, W = (pos_int(op, n, v) for n, v in zip("NCHW", (N, C, H, W)))
    kh, kw = pair(op, "kernel", kernel)
    sh, sw = pair(op, "stride", kernel if stride is None else stride)
    ph, pw = pair(op, "padding", padding, True)
    if ph > kh // 2 or pw > kw // 2:  # PyTorch's rule
        raise DefinitionError(f"{op}: padding {padding} must be at most half the kernel {kernel}")
    P, Q = out_size(op, "H", H, kh, sh, ph), out_size(op, "W", W, kw, sw, pw)
    params = dict(N=N, C=C, H=H, W=W, kernel=kernel,
                  stride=kernel if stride is None else stride, padding=padding)
    return (N, C, H, W, kh, kw, sh, sw, ph, pw, P, Q), params


def _windows(x: np.ndarray, kh, kw, sh, sw, P, Q) -> np.ndarray:
    """N x C x P x Q x kh x kw view of the (already padded) input's windows."""
    return np.stack([np.stack([x[:, :, r: r + sh * (P - 1) + 1: sh, s: s + sw * (Q - 1) + 1: sw]
                               for s in range(kw)], -1) for r in range(kh)], -2)


def max_pool2d(N: int, C: int, H: int, W: int, kernel=2, stride=None, padding=0) -> OpDef:
    """out[n,c,p,q] = max over the kh x kw window at (p*sh - ph, q*sw - pw).

    stride defaults to the kernel (as in PyTorch). Stages `pad` (if padding > 0), `pool`."""
    (N, C, H, W, kh, kw, sh, sw, ph, pw, P, Q), params = _pool_params(
        "max_pool2d", N, C, H, W, kernel, stride, padding)
    X = te.placeholder((N, C, H, W), name="X")
    Xp = pad_nchw(X, ph, pw, FLOAT32_LOWEST)
    rr, rs = te.reduce_axis(kh, "rr"), te.reduce_axis(kw, "rs")
    out = te.compute((N, C, P, Q), lambda n, c, p, q: te.max(
        Xp[n, c, win(p, sh, rr, 1), win(q, sw, rs, 1)], axis=[rr, rs]), name="pool")

    def ref(x):
        xp = _np_pad(x.astype(np.float64), ph, pw, value=-np.inf)
        return [_windows(xp, kh, kw, sh, sw, P, Q).max(axis=(-2, -1))]
    return OpDef("max_pool2d", [X], [out], ref, count_flops([out]), params)


def avg_pool2d(N: int, C: int, H: int, W: int, kernel=2, stride=None, padding=0) -> OpDef:
    """out = (sum of the zero-padded kh x kw window) / (kh * kw)  (count_include_pad=True).

    Stages `pad` (if padding > 0), `sum` (reduction), `out` (the divide)."""
    (N, C, H, W, kh, kw, sh, sw, ph, pw, P, Q), params = _pool_params(
        "avg_pool2d", N, C, H, W, kernel, stride, padding)
    X = te.placeholder((N, C, H, W), name="X")
    Xp = pad_nchw(X, ph, pw)
    rr, rs = te.reduce_axis(kh, "rr"), te.reduce_axis(kw, "rs")
    total = te.compute((N, C, P, Q), lambda n, c, p, q: te.sum(
        Xp[n, c, win(p, sh, rr, 1), win(q, sw, rs, 1)], axis=[rr, rs]), name="sum")
    out = te.compute((N, C, P, Q), lambda n, c, p, q: total[n, c, p, q] / float(kh * kw),
                     name="out")

    def ref(x):
        xp = _np_pad(x.astype(np.float64), ph, pw)
        return [_windows(xp, kh, kw, sh, sw, P, Q).mean(axis=(-2, -1))]
    return OpDef("avg_pool2d", [X], [out], ref, count_flops([out]), params)


# ------------------------------------------------------------------ baselines

@baseline("torch", "max_pool2d")
def _max_pool2d_torch(p: dict) -> Callable:
    import torch.nn.functional as F
    k, st, pd = hw(p["kernel"]), hw(p["stride"]), hw(p["padding"])
    return lambda x: F.max_pool2d(x, k, st, pd)


@baseline("torch", "avg_pool2d")
def _avg_pool2d_torch(p: dict) -> Callable:
    import torch.nn.functional as F
    k, st, pd = hw(p["kernel"]), hw(p["stride"]), hw(p["padding"])
    return lambda x: F.avg_pool2d(x, k, st, pd, ceil_mode=False, count_include_pad=True)
