"""Attention: `scaled_dot_product_attention` (SDPA) as the ops tlmir maps.

transformers' BERT, GPT-2 and LLaMA call SDPA, which torch.export keeps as one opaque
ATen node. Capture decomposes each call it can compute (`DECOMPOSITIONS`, given to
`run_decompositions`) the way PyTorch's math backend does: Q·Kᵀ (a matmul), times the
scale, plus one additive mask (a boolean mask is 0 where True and -inf where False;
`is_causal` adds -inf above the diagonal, top-left aligned), softmax over the keys, ·V (a
matmul). The partitioner then maps these as it maps eager attention: two `batch_matmul`
tasks, the first taking the scale and mask as its epilogue, and a softmax. Masks that are constants
(the usual case: built from shapes) are folded at capture.

With an attention mask a row can be masked whole; SDPA gives that row zeros, not NaN, so
the decomposition's softmax is `_safe_softmax`. The partitioner maps it to the plain
softmax when the mask is a constant keeping an entry of every row (`keeps_every_row`),
else to `safe_softmax`, a softmax whose fully masked rows are 0.

Variants not computed here (dropout_p > 0: training) stay one SDPA node that PyTorch runs,
named as a fallback in reports.
"""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.fx as fx

from .. import te
from ..runtime.task import Task

aten = torch.ops.aten
FLT_MAX = float(np.finfo(np.float32).max)
FLT_MIN = float(np.finfo(np.float32).tiny)


def sdpa_math(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: torch.Tensor | None = None,
              dropout_p: float = 0.0, is_causal: bool = False, *, scale: float | None = None,
              enable_gqa: bool = False):
    """aten.scaled_dot_product_attention in matmul / softmax terms, or NotImplemented
    (the node stays whole) for dropout."""
    if dropout_p != 0.0:
        return NotImplemented
    L, S = q.shape[-2], k.shape[-2]
    if enable_gqa and q.dim() >= 3 and k.shape[-3] != q.shape[-3]:
        group = q.shape[-3] // k.shape[-3]          # query head h reads key / value head h // group
        k, v = (t.unsqueeze(-3).expand(*t.shape[:-2], group, *t.shape[-2:]).flatten(-4, -3) for t in (k, v))
    s = scale if scale is not None else 1.0 / math.sqrt(q.shape[-1])
    scores = torch.matmul(q, k.transpose(-2, -1)) * s
    mask = None
    if is_causal:
        keep = torch.ones(L, S, dtype=torch.bool).tril()
        mask = torch.zeros(L, S, dtype=q.dtype).masked_fill(keep.logical_not(), -math.inf)
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            attn_mask = torch.zeros(attn_mask.shape, dtype=q.dtype).masked_fill(attn_mask.logical_not(),
                                                                                -math.inf)
        mask = attn_mask if mask is None else mask + attn_mask
    if mask is not None:
        scores = scores + mask
    # a causal mask alone keeps the first key of every row: only a given mask can empty one
    probs = aten._safe_softmax(scores, -1) if attn_mask is not None else torch.softmax(scores, -1)
    return torch.matmul(probs, v)


DECOMPOSITIONS = {aten.scaled_dot_product_attention.default: sdpa_math}


def keeps_every_row(x: fx.Node, constants: dict) -> bool:
    """Whether no last-axis row of `x` is all -inf, as far as the graph shows: `x` is
    `matmul * scale + M` (the decomposition's scores) with M a constant keeping an entry
    of every row. Then `_safe_softmax(x)` is `softmax(x)`."""
    if x.target is not aten.add.Tensor or len(x.args) != 2:
        return False
    a, m = x.args
    mask = constants.get(m) if isinstance(m, fx.Node) else None
    if not isinstance(mask, torch.Tensor) or not isinstance(a, fx.Node) or a.target is not aten.mul.Tensor:
        return False
    product = a.args[0]
    if not isinstance(product, fx.Node) or product.target not in (aten.matmul.default, aten.bmm.default):
        return False
    shape = tuple(x.meta["val"].shape)
    return bool((torch.broadcast_to(mask, shape) != -math.inf).any(-1).all())


def safe_softmax(M: int, N: int) -> Task:
    """Softmax over the last axis of an M x N input whose rows that are all -inf give 0
    (aten._safe_softmax): the max is clamped to -FLT_MAX, so such a row's exps are 0, and
    the sum to FLT_MIN, so it divides to 0. Other rows are computed as ops.softmax does."""
    X = te.placeholder((M, N), name="X")
    k1 = te.reduce_axis(N, "k")
    mx = te.compute((M,), lambda i: te.max(X[i, k1], axis=k1), name="max")
    ex = te.compute((M, N), lambda i, j: te.exp(X[i, j] - te.max(mx[i], -FLT_MAX)), name="exp")
    k2 = te.reduce_axis(N, "k")
    sm = te.compute((M,), lambda i: te.sum(ex[i, k2], axis=k2), name="sum")
    out = te.compute((M, N), lambda i, j: ex[i, j] / te.max(sm[i], FLT_MIN), name="out")

    def ref(x):
        x = np.asarray(x, dtype=np.float64)
        kept = (x != -np.inf).any(axis=-1, keepdims=True)
        e = np.exp(x - np.where(kept, x.max(axis=-1, keepdims=True), 0.0))
        return [np.where(kept, e / np.where(kept, e.sum(axis=-1, keepdims=True), 1.0), 0.0)]
    return Task(f"safe_softmax_{M}x{N}", [X, out], reference=ref, input_ranges=[(-4.0, 4.0)])
