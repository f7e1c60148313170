"""Fast framework baselines (PyTorch, numpy) for every op, to time tlmir kernels against.

`baselines(op)` maps a framework name to a callable taking the op's inputs in `op.inputs`
order and returning its (single) output: `{"torch": fn, "onednn": fn, "numpy": fn}`. A
framework without a sensible fast path for an op is left out: numpy has no fast
convolution or pooling, so the conv / pool ops only have "torch".

"onednn" is PyTorch's own oneDNN linear (`torch.ops.mkldnn._linear_pointwise`, the kernel
its compiler's CPU fusions call), for dense (activation fused) and matmul. "torch" runs
those ops through MKL's sgemm, and MKL picks its kernels by CPU vendor: on an AMD Zen 5
host it ran dense 128x768x3072 at 6.7 ms, oneDNN (AVX-512 on any vendor) at 3.3 ms
(docs/benchmarks.md, "an AMD Zen 5 host"). Conv and the rest already run on oneDNN or on
PyTorch's own vectorized kernels under "torch". Unknown ops give `{}`.

The torch callables take torch tensors; `prepare(op, arrays, "torch")` makes them once with
`torch.from_numpy` (sharing memory with the arrays), so timing excludes the conversion.
Everything is float32 on both sides (the numpy baselines never upcast to float64 - the point
is speed), using each framework's idiomatic fast path: F.linear / conv2d / conv_transpose2d /
max_pool2d / avg_pool2d / softmax / layer_norm, torch.rms_norm, torch.matmul / bmm; numpy
matmul (BLAS sgemm) and vectorized float32 formulas.

Threads: `baseline_times(op, inputs, threads)` sets torch's intra-op thread count for the
measurement and restores it afterwards. numpy's BLAS thread count cannot be changed at run
time without threadpoolctl, so the numpy times use whatever OPENBLAS_NUM_THREADS (or
OMP_NUM_THREADS / MKL_NUM_THREADS) the process started with; numpy's element-wise code is
single-threaded regardless. Next to tlmir kernels, time them with `baselines_isolated`
(a child process of their own, torch's default OpenMP settings).
"""
from __future__ import annotations

import math
import os
import pickle
import statistics
import subprocess
import sys
import time
from typing import Callable, Sequence

import numpy as np

from ..errors import TlmirError
from .base import OpDef

FRAMEWORKS = ("torch", "onednn", "numpy")

_F32 = np.float32


def _pair(v) -> tuple[int, int]:
    if isinstance(v, (tuple, list)):
        return int(v[0]), int(v[1])
    return int(v), int(v)


# ------------------------------------------------------------------ numpy helpers

def _np_erfc_pos(a: np.ndarray) -> np.ndarray:
    """erfc(a) for a >= 0, float32 (Numerical Recipes' erfcc: relative error < 1.2e-7,
    so the tail stays accurate where 1 + erf(-a) would cancel)."""
    t = _F32(1.0) / (_F32(1.0) + _F32(0.5) * a)
    p = _F32(0.17087277)
    for c in (-0.82215223, 1.48851587, -1.13520398, 0.27886807, -0.18628806, 0.09678418,
              0.37409196, 1.00002368, -1.26551223):
        p = p * t + _F32(c)
    return t * np.exp(p - a * a)


def _np_gelu(x: np.ndarray) -> np.ndarray:
    """Exact (erf) GELU of a float32 array, as a new array: 0.5 * x * (1 + erf(x / sqrt(2)))
    computed as 0.5 * x * erfc(-x / sqrt(2)) so both tails stay accurate."""
    z = x * _F32(1.0 / math.sqrt(2.0))
    e = _np_erfc_pos(np.abs(z))                      # erfc(|z|)
    one_plus_erf = np.where(z >= 0, _F32(2.0) - e, e)   # erfc(-z) = 1 + erf(z)
    one_plus_erf *= x
    one_plus_erf *= _F32(0.5)
    return one_plus_erf


def _numpy_fn(op: OpDef) -> Callable | None:
    p = op.params
    name = op.name
    if name == "matmul":
        return np.matmul
    if name == "batch_matmul":
        return np.matmul
    if name == "dense":
        bias, act = p.get("bias", False), p.get("act")

        def dense(x, w, *rest):
            r = x @ w.T                                  # sgemm with a transposed operand
            if bias:
                r += rest[0]
            if act == "relu":
                np.maximum(r, _F32(0.0), out=r)
            elif act == "gelu":
                r = _np_gelu(r)
            return r
        return dense
    if name == "softmax":
        def softmax(x):
            e = x - x.max(axis=-1, keepdims=True)
            np.exp(e, out=e)
            e /= e.sum(axis=-1, keepdims=True)
            return e
        return softmax
    if name == "layernorm":
        eps = _F32(p["eps"])

        def layernorm(x, g, b):
            d = x - x.mean(axis=-1, keepdims=True)
            var = np.mean(d * d, axis=-1, keepdims=True)
            d *= _F32(1.0) / np.sqrt(var + eps)
            d *= g
            d += b
            return d
        return layernorm
    if name == "rmsnorm":
        eps = _F32(p["eps"])

        def rmsnorm(x, g):
            ms = np.mean(x * x, axis=-1, keepdims=True)
            r = x * (_F32(1.0) / np.sqrt(ms + eps))
            r *= g
            return r
        return rmsnorm
    if name == "add":
        return np.add
    if name == "add_relu":
        def add_relu(a, b):
            r = a + b
            np.maximum(r, _F32(0.0), out=r)
            return r
        return add_relu
    if name == "bias_add_gelu":
        def bias_add_gelu(x, b):
            return _np_gelu(x + b)
        return bias_add_gelu
    if name == "scale_shift_tanh":
        def scale_shift_tanh(x, g, b):
            r = x * g
            r += b
            np.tanh(r, out=r)
            return r
        return scale_shift_tanh
    if name == "silu_mul":
        def silu_mul(a, b):
            # a * sigmoid(a) with sigmoid(a) = 0.5 * (1 + tanh(a / 2)): no exp overflow
            s = a * _F32(0.5)
            np.tanh(s, out=s)
            s += _F32(1.0)
            s *= _F32(0.5)
            s *= a
            s *= b
            return s
        return silu_mul
    return None        # conv / pool: numpy has no fast path


# ------------------------------------------------------------------ torch

def _torch_fn(op: OpDef) -> Callable | None:
    import torch
    import torch.nn.functional as F

    p = op.params
    name = op.name
    if name == "matmul":
        return torch.matmul
    if name == "batch_matmul":
        return torch.bmm
    if name == "dense":
        bias, act = p.get("bias", False), p.get("act")

        def dense(x, w, *rest):
            r = F.linear(x, w, rest[0] if bias else None)
            if act == "relu":
                r = torch.relu_(r)
            elif act == "gelu":
                r = F.gelu(r)
            return r
        return dense
    if name in ("conv2d_nchw", "conv2d_bias_relu"):
        st, pd, dl = _pair(p["stride"]), _pair(p["padding"]), _pair(p["dilation"])
        groups = p["groups"]
        if name == "conv2d_nchw":
            return lambda x, w: F.conv2d(x, w, None, st, pd, dl, groups)
        return lambda x, w, b: torch.relu_(F.conv2d(x, w, b, st, pd, dl, groups))
    if name == "conv2d_nhwc":
        st, pd, dl = _pair(p["stride"]), _pair(p["padding"]), _pair(p["dilation"])
        groups = p["groups"]

        def conv2d_nhwc(x, w):
            # NHWC input seen as a channels_last NCHW tensor, HWIO weight as KCRS: views only;
            # the channels_last output permuted back is a contiguous NHWC tensor
            y = F.conv2d(x.permute(0, 3, 1, 2), w.permute(3, 2, 0, 1), None, st, pd, dl, groups)
            return y.permute(0, 2, 3, 1)
        return conv2d_nhwc
    if name == "conv2d_bias":
        st, pd, dl = _pair(p["stride"]), _pair(p["padding"]), _pair(p["dilation"])
        groups, act = p["groups"], p.get("act")
        if act == "relu6":
            return lambda x, w, b: F.relu6(F.conv2d(x, w, b, st, pd, dl, groups), inplace=True)
        return lambda x, w, b: F.conv2d(x, w, b, st, pd, dl, groups)
    if name == "depthwise_conv2d_nchw":
        st, pd, dl = _pair(p["stride"]), _pair(p["padding"]), _pair(p["dilation"])
        C, m, R, S = p["C"], p["multiplier"], p["R"], p["S"]
        act = {None: lambda r: r, "relu": torch.relu_,
               "relu6": lambda r: F.relu6(r, inplace=True)}[p.get("act")]
        if p.get("bias"):
            return lambda x, w, b: act(F.conv2d(x, w.reshape(C * m, 1, R, S), b, st, pd, dl, C))
        return lambda x, w: act(F.conv2d(x, w.reshape(C * m, 1, R, S), None, st, pd, dl, C))
    if name == "conv2d_transpose_nchw":
        st, pd = _pair(p["stride"]), _pair(p["padding"])
        opd = _pair(p["output_padding"])
        bias, act = p.get("bias", False), p.get("act")

        def conv2d_transpose(x, w, *rest):
            r = F.conv_transpose2d(x, w, rest[0] if bias else None, st, pd, opd)
            if act == "relu":
                r = torch.relu_(r)
            elif act == "tanh":
                r = torch.tanh_(r)
            return r
        return conv2d_transpose
    if name in ("max_pool2d", "avg_pool2d"):
        k, st, pd = _pair(p["kernel"]), _pair(p["stride"]), _pair(p["padding"])
        if name == "max_pool2d":
            return lambda x: F.max_pool2d(x, k, st, pd)
        return lambda x: F.avg_pool2d(x, k, st, pd, ceil_mode=False, count_include_pad=True)
    if name == "softmax":
        return lambda x: F.softmax(x, dim=-1)
    if name == "layernorm":
        N, eps = p["N"], p["eps"]
        return lambda x, g, b: F.layer_norm(x, (N,), g, b, eps)
    if name == "rmsnorm":
        N, eps = p["N"], p["eps"]
        if hasattr(torch, "rms_norm"):
            return lambda x, g: torch.rms_norm(x, (N,), g, eps)
        return lambda x, g: x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * g
    if name == "add":
        return torch.add
    if name == "add_relu":
        return lambda a, b: torch.relu_(torch.add(a, b))
    if name == "bias_add_gelu":
        return lambda x, b: F.gelu(x + b)
    if name == "scale_shift_tanh":
        return lambda x, g, b: torch.tanh_(torch.addcmul(b, x, g))
    if name == "silu_mul":
        return lambda a, b: F.silu(a).mul_(b)
    return None


def _onednn_fn(op: OpDef) -> Callable | None:
    """PyTorch's oneDNN linear for dense / matmul, where this torch build has it."""
    import torch

    linear = getattr(getattr(torch.ops, "mkldnn", None), "_linear_pointwise", None)
    if linear is None or not torch.backends.mkldnn.is_available():
        return None
    if op.name == "matmul":
        return lambda a, b: linear(a, b.t(), None, "none", [], "")
    # dense's activation -> the fused post-op: attr, scalars, algorithm ("none": exact erf GELU)
    post_ops = {None: ("none", [], ""), "relu": ("relu", [], ""), "gelu": ("gelu", [None], "none")}
    if op.name == "dense" and op.params.get("act") in post_ops:
        bias, post = op.params.get("bias", False), post_ops[op.params.get("act")]
        return lambda x, w, *rest: linear(x, w, rest[0] if bias else None, *post)
    return None


# ------------------------------------------------------------------ public API

def baselines(op: OpDef) -> dict[str, Callable]:
    """{"torch": fn, "onednn": fn, "numpy": fn} for `op` (frameworks without a fast path
    left out; {} for an unknown op). Each fn takes the inputs in `op.inputs` order - as
    prepared by `prepare(op, arrays, framework)` - and returns the op's output (all ops
    have one)."""
    out: dict[str, Callable] = {}
    fn = _torch_fn(op)
    if fn is not None:
        out["torch"] = fn
    fn = _onednn_fn(op)
    if fn is not None:
        out["onednn"] = fn
    fn = _numpy_fn(op)
    if fn is not None:
        out["numpy"] = fn
    return out


def prepare(op: OpDef, arrays: Sequence[np.ndarray], framework: str) -> list:
    """The inputs converted once for `framework`: contiguous arrays of each input's dtype
    (float32), wrapped with torch.from_numpy (no copy when already so) for "torch" and
    "onednn"."""
    if len(arrays) != len(op.inputs):
        raise ValueError(f"{op.name}: expected {len(op.inputs)} inputs, got {len(arrays)}")
    arrs = [np.ascontiguousarray(a, dtype=t.dtype) for a, t in zip(arrays, op.inputs)]
    if framework == "numpy":
        return arrs
    if framework in ("torch", "onednn"):
        import torch
        return [torch.from_numpy(a) for a in arrs]
    raise ValueError(f"unknown framework {framework!r}; known: {', '.join(FRAMEWORKS)}")


def time_baseline(fn: Callable, args: Sequence, repeat: int = 10,
                  min_sample_s: float = 1e-3) -> float:
    """Median seconds per call of fn(*args): one warm-up call, then `repeat` samples of n
    back-to-back calls each, n chosen so a sample lasts about `min_sample_s` (1 ms)."""
    args = list(args)
    fn(*args)                                            # warm-up (allocations, dispatch)
    n = 1
    while True:                                          # calibrate the inner count
        t0 = time.perf_counter()
        for _ in range(n):
            fn(*args)
        dt = time.perf_counter() - t0
        if dt >= min_sample_s:
            break
        n = n * 2 if dt <= 0 else max(n + 1, min(n * 10, int(n * min_sample_s * 1.2 / dt)))
    samples = []
    for _ in range(max(1, int(repeat))):
        t0 = time.perf_counter()
        for _ in range(n):
            fn(*args)
        samples.append((time.perf_counter() - t0) / n)
    return statistics.median(samples)


def baseline_times(op: OpDef, inputs: Sequence[np.ndarray], threads: int,
                   repeat: int = 10) -> dict[str, float]:
    """Median seconds per call of each available baseline on `inputs` (numpy arrays in
    op.inputs order). torch runs with `threads` intra-op threads (the previous count is
    restored afterwards); numpy uses the BLAS thread count the process started with
    (OPENBLAS_NUM_THREADS etc.; it cannot be changed at run time without threadpoolctl)."""
    import torch

    fns = baselines(op)
    times: dict[str, float] = {}
    prev = torch.get_num_threads()
    try:
        torch.set_num_threads(max(1, int(threads)))
        with torch.inference_mode():
            for fw, fn in fns.items():
                times[fw] = time_baseline(fn, prepare(op, inputs, fw), repeat)
    finally:
        torch.set_num_threads(prev)
    return times


def _isolated_child(cases: list, threads: Sequence[int], repeat: int,
                    tries: int) -> list[dict[int, dict[str, float]]]:
    os.environ.pop("OMP_WAIT_POLICY", None)  # torch with its own defaults (before it loads)
    from . import make
    out = []
    for name, params in cases:
        op = make(name, **params)
        inputs = op.random_inputs(0)
        per = {}
        for t in threads:
            runs = [baseline_times(op, inputs, t, repeat) for _ in range(tries)]
            per[t] = {fw: [r[fw] for r in runs] for fw in runs[0]}
        out.append(per)
    return out


def baselines_isolated(ops: Sequence[OpDef], threads: Sequence[int], repeat: int = 10,
                       tries: int = 3, processes: int = 2, spread: bool = False) -> list[dict]:
    """baseline_times of each op on `op.random_inputs(0)` (the arrays `Task.random_inputs(0)`
    gives its task) at each thread count, timed in fresh Python processes with torch's
    default OpenMP settings: [{threads: {framework: seconds}}], in `ops` order; with
    `spread`, {framework: (fastest, median, slowest)} of the tries x processes medians instead.

    Each time is the fastest of `tries` medians in each of `processes` processes: on this
    shared machine torch's 2-thread time of a 15-us op was now and then 7.5 ms for a whole
    measurement, a whole fresh process sometimes ran its 2-thread conv at half speed, and
    a stall is not PyTorch's speed. The child draws the arrays itself: on arrays sent to
    it by pickle torch's conv ran 30% (1 thread) to 45% (2 threads) slower; and it is a
    plain interpreter, as in a multiprocessing child the 2-thread conv ran 25% slower.

    Why not in the caller's process: there the two OpenMP runtimes (torch's and the one
    tlmir's kernels use) compete for the cores, threads of one spinning after its parallel
    region slowing the other; and OMP_WAIT_POLICY=PASSIVE, which stops that, puts
    torch's threads to sleep between parallel regions: its 2-thread batch_matmul
    12x128x128x64 then ran no faster than 1 thread (151 against 323 GFLOP/s)."""
    jobs = [(op.name, dict(op.params)) for op in ops]
    if not jobs:
        return []
    code = ("import pickle, sys; from tlmir.ops.baselines import _isolated_child; "
            "sys.stdout.buffer.write(pickle.dumps(_isolated_child(*pickle.load(sys.stdin.buffer))))")
    payload = pickle.dumps((jobs, list(threads), repeat, tries))
    runs = []
    for _ in range(max(1, processes)):
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, input=payload)
        if done.returncode != 0:
            raise TlmirError(f"timing the baselines in a child process failed: "
                             f"{done.stderr.decode(errors='replace')[-800:]}")
        runs.append(pickle.loads(done.stdout))
    def summary(medians: list[float]):
        return (min(medians), statistics.median(medians), max(medians)) if spread else min(medians)
    return [{t: {fw: summary([m for r in runs for m in r[c][t][fw]]) for fw in runs[0][c][t]}
             for t in runs[0][c]} for c in range(len(jobs))]


def baseline_times_isolated(op: OpDef, threads: Sequence[int], repeat: int = 10, tries: int = 3,
                            processes: int = 2) -> dict[int, dict[str, float]]:
    """baselines_isolated for one op: {threads: {framework: seconds}}."""
    return baselines_isolated([op], threads, repeat, tries, processes)[0]


__all__ = ["FRAMEWORKS", "baselines", "prepare", "time_baseline", "baseline_times",
           "baselines_isolated", "baseline_times_isolated"]
