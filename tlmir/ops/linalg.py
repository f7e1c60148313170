"""Matrix products: matmul, batch_matmul, dense (PyTorch Linear with bias / activation)."""
from __future__ import annotations

import math

import numpy as np

from .. import te
from ..errors import DefinitionError
from .base import OpDef, count_flops, pos_int

ACTIVATIONS = (None, "relu", "gelu")


def gelu_expr(x):
    """Exact (erf) GELU, as torch.nn.functional.gelu(approximate='none')."""
    return x * 0.5 * (1.0 + te.erf(x * (1.0 / math.sqrt(2.0))))


def gelu_ref(x: np.ndarray) -> np.ndarray:
    from math import erf
    verf = np.vectorize(erf, otypes=[np.float64])
    return 0.5 * x * (1.0 + verf(x / math.sqrt(2.0)))


def matmul(M: int, N: int, K: int) -> OpDef:
    """C[i, j] = sum_k A[i, k] * B[k, j]; A: MxK, B: KxN."""
    M, N, K = (pos_int("matmul", n, v) for n, v in (("M", M), ("N", N), ("K", K)))
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    k = te.reduce_axis(K, "k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")

    def ref(a, b):
        return [a.astype(np.float64) @ b.astype(np.float64)]
    return OpDef("matmul", [A, B], [C], ref, count_flops([C]), dict(M=M, N=N, K=K))


def batch_matmul(B: int, M: int, N: int, K: int) -> OpDef:
    """C[b, i, j] = sum_k A[b, i, k] * W[b, k, j]; A: BxMxK, W: BxKxN (torch.bmm)."""
    B, M, N, K = (pos_int("batch_matmul", n, v)
                  for n, v in (("B", B), ("M", M), ("N", N), ("K", K)))
    A = te.placeholder((B, M, K), name="A")
    W = te.placeholder((B, K, N), name="B")
    k = te.reduce_axis(K, "k")
    C = te.compute((B, M, N), lambda b, i, j: te.sum(A[b, i, k] * W[b, k, j], axis=k), name="C")

    def ref(a, w):
        return [np.matmul(a.astype(np.float64), w.astype(np.float64))]
    return OpDef("batch_matmul", [A, W], [C], ref, count_flops([C]), dict(B=B, M=M, N=N, K=K))


def dense(M: int, N: int, K: int, bias: bool = False, act: str | None = None) -> OpDef:
    """out = act(X @ W.T + b) with X: MxK, W: NxK (torch Linear), b: N.

    Stages: D (the reduction), then `bias` (if bias), then `relu` / `gelu` (if act)."""
    M, N, K = (pos_int("dense", n, v) for n, v in (("M", M), ("N", N), ("K", K)))
    if act not in ACTIVATIONS:
        raise DefinitionError(f"dense: act must be one of {ACTIVATIONS}, got {act!r}")
    X = te.placeholder((M, K), name="X")
    W = te.placeholder((N, K), name="W")
    inputs = [X, W]
    k = te.reduce_axis(K, "k")
    out = te.compute((M, N), lambda i, j: te.sum(X[i, k] * W[j, k], axis=k), name="D")
    if bias:
        b = te.placeholder((N,), name="b")
        inputs.append(b)
        d = out
        out = te.compute((M, N), lambda i, j: d[i, j] + b[j], name="bias")
    if act == "relu":
        y = out
        out = te.compute((M, N), lambda i, j: te.max(y[i, j], 0.0), name="relu")
    elif act == "gelu":
        y = out
        out = te.compute((M, N), lambda i, j: gelu_expr(y[i, j]), name="gelu")

    def ref(x, w, *rest):
        r = x.astype(np.float64) @ w.astype(np.float64).T
        if bias:
            r = r + rest[0].astype(np.float64)
        if act == "relu":
            r = np.maximum(r, 0.0)
        elif act == "gelu":
            r = gelu_ref(r)
        return [r]
    return OpDef("dense", inputs, [out], ref, count_flops([out]),
                 dict(M=M, N=N, K=K, bias=bool(bias), act=act))
