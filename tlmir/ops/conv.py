"""2-D convolutions: NCHW (grouped, strided, dilated, padded), NHWC (HWIO weight),
depthwise NCHW, and conv + bias + ReLU. Padding is its own `pad` stage (zero outside).
Their baselines are PyTorch's conv2d / conv_transpose2d (oneDNN); numpy has no fast
convolution."""
from __future__ import annotations

from typing import Callable

import numpy as np

from .. import te
from ..errors import DefinitionError
from ..ir.tensor import Tensor
from .base import OpDef, baseline, count_flops, out_size, pair, pos_int, torch_act


def pad_nchw(X: Tensor, ph: int, pw: int, value: float = 0.0, name: str = "pad") -> Tensor:
    """X padded by ph rows / pw columns on each side of its last two axes (if any)."""
    if ph == 0 and pw == 0:
        return X
    N, C, H, W = X.shape
    return te.compute(
        (N, C, H + 2 * ph, W + 2 * pw),
        lambda n, c, h, w: te.if_then_else(
            te.all(h >= ph, h < H + ph, w >= pw, w < W + pw), X[n, c, h - ph, w - pw], value),
        name=name)


def pad_nhwc(X: Tensor, ph: int, pw: int, name: str = "pad") -> Tensor:
    if ph == 0 and pw == 0:
        return X
    N, H, W, C = X.shape
    return te.compute(
        (N, H + 2 * ph, W + 2 * pw, C),
        lambda n, h, w, c: te.if_then_else(
            te.all(h >= ph, h < H + ph, w >= pw, w < W + pw), X[n, h - ph, w - pw, c], 0.0),
        name=name)


def win(p, stride: int, r, dil: int):
    """Input coordinate p*stride + r*dil of a sliding window (unit factors left out)."""
    return (p if stride == 1 else p * stride) + (r if dil == 1 else r * dil)


def _np_pad(x: np.ndarray, ph: int, pw: int, axes=(2, 3), value: float = 0.0) -> np.ndarray:
    widths = [(0, 0)] * x.ndim
    widths[axes[0]], widths[axes[1]] = (ph, ph), (pw, pw)
    return np.pad(x, widths, constant_values=value)


def conv_ref_nchw(x, w, stride, padding, dilation, groups) -> np.ndarray:
    """float64 grouped conv2d (torch.nn.functional.conv2d semantics), weight K x C/g x R x S."""
    x = _np_pad(x.astype(np.float64), *padding)
    w = w.astype(np.float64)
    N, C, H, W = x.shape
    K, Cg, R, S = w.shape
    (sh, sw), (dh, dw) = stride, dilation
    P = (H - dh * (R - 1) - 1) // sh + 1
    Q = (W - dw * (S - 1) - 1) // sw + 1
    Kg = K // groups
    out = np.zeros((N, K, P, Q))
    for g in range(groups):
        xg = x[:, g * Cg:(g + 1) * Cg]
        wg = w[g * Kg:(g + 1) * Kg]
        for r in range(R):
            for s in range(S):
                win = xg[:, :, r * dh: r * dh + sh * (P - 1) + 1: sh,
                         s * dw: s * dw + sw * (Q - 1) + 1: sw]          # N x Cg x P x Q
                out[:, g * Kg:(g + 1) * Kg] += np.einsum("ncpq,kc->nkpq", win, wg[:, :, r, s])
    return out


def _conv_params(op, N, C, H, W, K, R, S, stride, padding, dilation, groups):
    N, C, H, W, K, R, S = (pos_int(op, n, v) for n, v in
                           zip("NCHWKRS", (N, C, H, W, K, R, S)))
    st, pd, dl = pair(op, "stride", stride), pair(op, "padding", padding, True), \
        pair(op, "dilation", dilation)
    groups = pos_int(op, "groups", groups)
    if C % groups or K % groups:
        raise DefinitionError(f"{op}: groups={groups} must divide C={C} and K={K}")
    P = out_size(op, "H", H, R, st[0], pd[0], dl[0])
    Q = out_size(op, "W", W, S, st[1], pd[1], dl[1])
    params = dict(N=N, C=C, H=H, W=W, K=K, R=R, S=S, stride=stride, padding=padding,
                  dilation=dilation, groups=groups)
    return (N, C, H, W, K, R, S, st, pd, dl, groups, P, Q), params


def _conv_nchw_stages(op, N, C, H, W, K, R, S, stride, padding, dilation, groups, name):
    (N, C, H, W, K, R, S, st, pd, dl, groups, P, Q), params = _conv_params(
        op, N, C, H, W, K, R, S, stride, padding, dilation, groups)
    Cg, Kg = C // groups, K // groups
    X = te.placeholder((N, C, H, W), name="X")
    Wt = te.placeholder((K, Cg, R, S), name="W")
    Xp = pad_nchw(X, *pd)
    rc, rr, rs = te.reduce_axis(Cg, "rc"), te.reduce_axis(R, "rr"), te.reduce_axis(S, "rs")

    def body(n, k, p, q):
        c = rc if groups == 1 else k // Kg * Cg + rc
        return te.sum(Xp[n, c, win(p, st[0], rr, dl[0]), win(q, st[1], rs, dl[1])]
                      * Wt[k, rc, rr, rs], axis=[rc, rr, rs])
    out = te.compute((N, K, P, Q), body, name=name)
    return X, Wt, out, (st, pd, dl, groups), params


def conv2d_nchw(N: int, C: int, H: int, W: int, K: int, R: int, S: int, stride=1, padding=0,
                dilation=1, groups: int = 1) -> OpDef:
    """out[n,k,p,q] = sum_{c,r,s} pad(X)[n, g(k)*C/g + c, p*sh + r*dh, q*sw + s*dw] * W[k,c,r,s].

    X: N x C x H x W, W: K x C/groups x R x S (torch layout); stride/padding/dilation are an
    int or an (h, w) pair. Stages: `pad` (only if padding > 0), `conv`."""
    X, Wt, out, (st, pd, dl, g), params = _conv_nchw_stages(
        "conv2d_nchw", N, C, H, W, K, R, S, stride, padding, dilation, groups, "conv")

    def ref(x, w):
        return [conv_ref_nchw(x, w, st, pd, dl, g)]
    return OpDef("conv2d_nchw", [X, Wt], [out], ref, count_flops([out]), params)


def conv2d_bias_relu(N: int, C: int, H: int, W: int, K: int, R: int, S: int, stride=1,
                     padding=0, dilation=1, groups: int = 1) -> OpDef:
    """relu(conv2d_nchw(X, W) + b[k]); stages `pad`, `conv`, `bias`, `relu`."""
    X, Wt, conv, (st, pd, dl, g), params = _conv_nchw_stages(
        "conv2d_bias_relu", N, C, H, W, K, R, S, stride, padding, dilation, groups, "conv")
    b = te.placeholder((params["K"],), name="b")
    biased = te.compute(conv.shape, lambda n, k, p, q: conv[n, k, p, q] + b[k], name="bias")
    out = te.compute(conv.shape, lambda n, k, p, q: te.max(biased[n, k, p, q], 0.0), name="relu")

    def ref(x, w, bb):
        r = conv_ref_nchw(x, w, st, pd, dl, g) + bb.astype(np.float64)[None, :, None, None]
        return [np.maximum(r, 0.0)]
    return OpDef("conv2d_bias_relu", [X, Wt, b], [out], ref, count_flops([out]), params)


CONV_EPILOGUES = (None, "relu", "relu6")


def _act(x, act: str | None):
    """The activation `act` of CONV_EPILOGUES applied to the expression x."""
    if act == "relu":
        return te.max(x, 0.0)
    if act == "relu6":
        return te.min(te.max(x, 0.0), 6.0)
    return x


def _np_act(r: np.ndarray, act: str | None) -> np.ndarray:
    if act == "relu":
        return np.maximum(r, 0.0)
    if act == "relu6":
        return np.clip(r, 0.0, 6.0)
    return r


def conv2d_bias(N: int, C: int, H: int, W: int, K: int, R: int, S: int, stride=1, padding=0,
                dilation=1, groups: int = 1, act: str | None = None) -> OpDef:
    """conv2d_nchw(X, W) + b[k], then `act` (None or "relu6"; ReLU is conv2d_bias_relu):
    a conv with its BatchNorm folded and no ReLU after it (ResNet's last 1x1 of a block,
    MobileNetV2's projection), or MobileNet's conv + BN + ReLU6. Stages `pad`, `conv`,
    `bias`, then `relu6`."""
    if act not in (None, "relu6"):
        raise DefinitionError(f"conv2d_bias: act must be None or 'relu6' (ReLU is "
                              f"conv2d_bias_relu), got {act!r}")
    X, Wt, conv, (st, pd, dl, g), params = _conv_nchw_stages(
        "conv2d_bias", N, C, H, W, K, R, S, stride, padding, dilation, groups, "conv")
    params["act"] = act
    b = te.placeholder((params["K"],), name="b")
    out = te.compute(conv.shape, lambda n, k, p, q: conv[n, k, p, q] + b[k], name="bias")
    if act:
        y = out
        out = te.compute(conv.shape, lambda n, k, p, q: _act(y[n, k, p, q], act), name=act)

    def ref(x, w, bb):
        r = conv_ref_nchw(x, w, st, pd, dl, g) + bb.astype(np.float64)[None, :, None, None]
        return [_np_act(r, act)]
    return OpDef("conv2d_bias", [X, Wt, b], [out], ref, count_flops([out]), params)


def conv2d_nhwc(N: int, C: int, H: int, W: int, K: int, R: int, S: int, stride=1, padding=0,
                dilation=1, groups: int = 1) -> OpDef:
    """NHWC conv: X: N x H x W x C, weight HWIO: R x S x C/groups x K, out: N x P x Q x K.

    Same arithmetic as conv2d_nchw (torch equivalent: permute X to NCHW and the weight to
    K x C/g x R x S). Stages: `pad` (if padding > 0), `conv`."""
    (N, C, H, W, K, R, S, st, pd, dl, groups, P, Q), params = _conv_params(
        "conv2d_nhwc", N, C, H, W, K, R, S, stride, padding, dilation, groups)
    Cg, Kg = C // groups, K // groups
    X = te.placeholder((N, H, W, C), name="X")
    Wt = te.placeholder((R, S, Cg, K), name="W")
    Xp = pad_nhwc(X, *pd)
    rr, rs, rc = te.reduce_axis(R, "rr"), te.reduce_axis(S, "rs"), te.reduce_axis(Cg, "rc")

    def body(n, p, q, k):
        c = rc if groups == 1 else k // Kg * Cg + rc
        return te.sum(Xp[n, win(p, st[0], rr, dl[0]), win(q, st[1], rs, dl[1]), c]
                      * Wt[rr, rs, rc, k], axis=[rr, rs, rc])
    out = te.compute((N, P, Q, K), body, name="conv")

    def ref(x, w):
        y = conv_ref_nchw(x.transpose(0, 3, 1, 2), w.transpose(3, 2, 0, 1), st, pd, dl, groups)
        return [y.transpose(0, 2, 3, 1)]
    return OpDef("conv2d_nhwc", [X, Wt], [out], ref, count_flops([out]), params)


def depthwise_conv2d_nchw(N: int, C: int, H: int, W: int, R: int, S: int, stride=1,
                          padding=0, dilation=1, multiplier: int = 1, bias: bool = False,
                          act: str | None = None) -> OpDef:
    """out[n, c, p, q] = sum_{r,s} pad(X)[n, c // m, ...] * W[c // m, c % m, r, s], then
    + b[c] (if bias: a folded BatchNorm) and `act` (None, "relu", "relu6").

    X: N x C x H x W, W: C x multiplier x R x S (topi layout), out: N x C*m x P x Q.
    torch equivalent: conv2d(X, W.reshape(C*m, 1, R, S), groups=C). Stages `pad`, `conv`,
    then `bias`, then `relu` / `relu6`."""
    op = "depthwise_conv2d_nchw"
    m = pos_int(op, "multiplier", multiplier)
    if act not in CONV_EPILOGUES:
        raise DefinitionError(f"{op}: act must be one of {CONV_EPILOGUES}, got {act!r}")
    (N, C, H, W, _, R, S, st, pd, dl, _, P, Q), params = _conv_params(
        op, N, C, H, W, C * m, R, S, stride, padding, dilation, 1)
    params = {k: v for k, v in params.items() if k not in ("K", "groups")}
    params["multiplier"] = m
    X = te.placeholder((N, C, H, W), name="X")
    Wt = te.placeholder((C, m, R, S), name="W")
    Xp = pad_nchw(X, *pd)
    rr, rs = te.reduce_axis(R, "rr"), te.reduce_axis(S, "rs")

    def body(n, c, p, q):
        ci, j = (c, 0) if m == 1 else (c // m, c % m)
        return te.sum(Xp[n, ci, win(p, st[0], rr, dl[0]), win(q, st[1], rs, dl[1])]
                      * Wt[ci, j, rr, rs], axis=[rr, rs])
    out = te.compute((N, C * m, P, Q), body, name="conv")
    inputs = [X, Wt]
    if bias:
        params["bias"] = True
        b = te.placeholder((C * m,), name="b")
        inputs.append(b)
        conv = out
        out = te.compute(conv.shape, lambda n, c, p, q: conv[n, c, p, q] + b[c], name="bias")
    if act:
        params["act"] = act
        y = out
        out = te.compute(y.shape, lambda n, c, p, q: _act(y[n, c, p, q], act), name=act)

    def ref(x, w, *rest):
        r = conv_ref_nchw(x, w.reshape(C * m, 1, R, S), st, pd, dl, C)
        if bias:
            r = r + rest[0].astype(np.float64)[None, :, None, None]
        return [_np_act(r, act)]
    return OpDef(op, inputs, [out], ref, count_flops([out]), params)


TRANSPOSE_ACTIVATIONS = (None, "relu", "tanh")


def conv_transpose_ref_nchw(x, w, stride, padding, output_padding) -> np.ndarray:
    """float64 conv_transpose2d (torch semantics, groups=1, no dilation), weight C x K x R x S:
    every input pixel scatters x[n,c,h,w] * W[c,k,:,:] to out[h*sh - ph + r, w*sw - pw + s]."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    N, C, H, W = x.shape
    _, K, R, S = w.shape
    (sh, sw), (ph, pw), (oh, ow) = stride, padding, output_padding
    full = np.zeros((N, K, (H - 1) * sh + R + oh, (W - 1) * sw + S + ow))
    for r in range(R):
        for s in range(S):
            full[:, :, r: r + sh * (H - 1) + 1: sh, s: s + sw * (W - 1) + 1: sw] += \
                np.einsum("nchw,ck->nkhw", x, w[:, :, r, s])
    P = (H - 1) * sh - 2 * ph + R + oh
    Q = (W - 1) * sw - 2 * pw + S + ow
    return full[:, :, ph: ph + P, pw: pw + Q]


def conv2d_transpose_nchw(N: int, C: int, H: int, W: int, K: int, R: int, S: int, stride=1,
                          padding=0, output_padding=0, bias: bool = False,
                          act: str | None = None) -> OpDef:
    """Transposed convolution (torch conv_transpose2d, groups=1, no dilation), optionally
    followed by + b[k] and relu / tanh (a deconv + folded BN + activation, as in DCGAN).

    X: N x C x H x W, W: C x K x R x S (torch layout), out: N x K x P x Q with
    P = (H-1)*sh - 2*ph + R + oph. Computed as topi does: `pad` zero-inserts sh-1 rows between
    input rows and pads R-1-ph rows (plus oph at the bottom), then `conv` is a stride-1
    convolution with the spatially flipped kernel:
    out[n,k,p,q] = sum_{c,r,s} pad[n, c, p + r, q + s] * W[c, k, R-1-r, S-1-s].
    Stages: `pad`, `conv`, then `bias` (if bias), then `relu` / `tanh` (if act)."""
    op = "conv2d_transpose_nchw"
    N, C, H, W, K, R, S = (pos_int(op, n, v) for n, v in zip("NCHWKRS", (N, C, H, W, K, R, S)))
    (sh, sw), (ph, pw) = pair(op, "stride", stride), pair(op, "padding", padding, True)
    oh, ow = pair(op, "output_padding", output_padding, True)
    if act not in TRANSPOSE_ACTIVATIONS:
        raise DefinitionError(f"{op}: act must be one of {TRANSPOSE_ACTIVATIONS}, got {act!r}")
    if ph > R - 1 or pw > S - 1:
        raise DefinitionError(f"{op}: padding {padding} must be at most kernel - 1 ({R}x{S})")
    if oh >= sh or ow >= sw:
        raise DefinitionError(f"{op}: output_padding {output_padding} must be smaller than "
                              f"the stride {stride}")
    P, Q = (H - 1) * sh - 2 * ph + R + oh, (W - 1) * sw - 2 * pw + S + ow
    params = dict(N=N, C=C, H=H, W=W, K=K, R=R, S=S, stride=stride, padding=padding,
                  output_padding=output_padding, bias=bool(bias), act=act)
    X = te.placeholder((N, C, H, W), name="X")
    Wt = te.placeholder((C, K, R, S), name="W")
    inputs = [X, Wt]
    bh, bw = R - 1 - ph, S - 1 - pw        # rows / columns of zeros before the first input
    Hd, Wd = (H - 1) * sh + 1, (W - 1) * sw + 1

    def pad_body(n, c, h, w):
        hh, ww = h - bh, w - bw
        conds = [hh >= 0, hh < Hd, ww >= 0, ww < Wd]
        if sh > 1:
            conds.append(hh % sh == 0)
        if sw > 1:
            conds.append(ww % sw == 0)
        hi = hh if sh == 1 else hh // sh
        wi = ww if sw == 1 else ww // sw
        return te.if_then_else(te.all(*conds), X[n, c, hi, wi], 0.0)
    Xd = te.compute((N, C, P + R - 1, Q + S - 1), pad_body, name="pad")
    rc, rr, rs = te.reduce_axis(C, "rc"), te.reduce_axis(R, "rr"), te.reduce_axis(S, "rs")
    out = te.compute((N, K, P, Q), lambda n, k, p, q: te.sum(
        Xd[n, rc, p + rr, q + rs] * Wt[rc, k, R - 1 - rr, S - 1 - rs], axis=[rc, rr, rs]),
        name="conv")
    if bias:
        b = te.placeholder((K,), name="b")
        inputs.append(b)
        c0 = out
        out = te.compute(c0.shape, lambda n, k, p, q: c0[n, k, p, q] + b[k], name="bias")
    if act == "relu":
        y = out
        out = te.compute(y.shape, lambda n, k, p, q: te.max(y[n, k, p, q], 0.0), name="relu")
    elif act == "tanh":
        y = out
        out = te.compute(y.shape, lambda n, k, p, q: te.tanh(y[n, k, p, q]), name="tanh")

    def ref(x, w, *rest):
        r = conv_transpose_ref_nchw(x, w, (sh, sw), (ph, pw), (oh, ow))
        if bias:
            r = r + rest[0].astype(np.float64)[None, :, None, None]
        if act == "relu":
            r = np.maximum(r, 0.0)
        elif act == "tanh":
            r = np.tanh(r)
        return [r]
    return OpDef(op, inputs, [out], ref, count_flops([out]), params)


# ------------------------------------------------------------------ baselines

def hw(v) -> tuple[int, int]:
    """An op parameter given as an int or an (h, w) pair, as a pair (already validated)."""
    if isinstance(v, (tuple, list)):
        return int(v[0]), int(v[1])
    return int(v), int(v)


def _window(p: dict) -> tuple:
    """torch's stride, padding, dilation, groups of a conv's parameters."""
    return hw(p["stride"]), hw(p["padding"]), hw(p["dilation"]), p["groups"]


@baseline("torch", "conv2d_nchw")
def _conv2d_nchw_torch(p: dict) -> Callable:
    import torch.nn.functional as F
    st, pd, dl, groups = _window(p)
    return lambda x, w: F.conv2d(x, w, None, st, pd, dl, groups)


@baseline("torch", "conv2d_bias_relu")
def _conv2d_bias_relu_torch(p: dict) -> Callable:
    import torch
    import torch.nn.functional as F
    st, pd, dl, groups = _window(p)
    return lambda x, w, b: torch.relu_(F.conv2d(x, w, b, st, pd, dl, groups))


@baseline("torch", "conv2d_bias")
def _conv2d_bias_torch(p: dict) -> Callable:
    import torch.nn.functional as F
    st, pd, dl, groups = _window(p)
    act = torch_act(p.get("act"))
    return lambda x, w, b: act(F.conv2d(x, w, b, st, pd, dl, groups))


@baseline("torch", "conv2d_nhwc")
def _conv2d_nhwc_torch(p: dict) -> Callable:
    import torch.nn.functional as F
    st, pd, dl, groups = _window(p)

    def conv2d_nhwc(x, w):
        # NHWC input seen as a channels_last NCHW tensor, HWIO weight as KCRS: views only;
        # the channels_last output permuted back is a contiguous NHWC tensor
        y = F.conv2d(x.permute(0, 3, 1, 2), w.permute(3, 2, 0, 1), None, st, pd, dl, groups)
        return y.permute(0, 2, 3, 1)
    return conv2d_nhwc


@baseline("torch", "depthwise_conv2d_nchw")
def _depthwise_conv2d_nchw_torch(p: dict) -> Callable:
    import torch.nn.functional as F
    st, pd, dl = hw(p["stride"]), hw(p["padding"]), hw(p["dilation"])
    C, m, R, S = p["C"], p["multiplier"], p["R"], p["S"]
    act = torch_act(p.get("act"))
    if p.get("bias"):
        return lambda x, w, b: act(F.conv2d(x, w.reshape(C * m, 1, R, S), b, st, pd, dl, C))
    return lambda x, w: act(F.conv2d(x, w.reshape(C * m, 1, R, S), None, st, pd, dl, C))


@baseline("torch", "conv2d_transpose_nchw")
def _conv2d_transpose_nchw_torch(p: dict) -> Callable:
    import torch.nn.functional as F
    st, pd, opd = hw(p["stride"]), hw(p["padding"]), hw(p["output_padding"])
    bias, act = p.get("bias", False), torch_act(p.get("act"))
    return lambda x, w, *rest: act(F.conv_transpose2d(x, w, rest[0] if bias else None, st, pd, opd))
