"""Inline float32 exp/log/tanh/erf/sigmoid (tlmir/codegen_cpu/vecmath.py), vector and scalar,
against numpy in float64 over their whole float32 domain, edge cases included."""
from __future__ import annotations

import math
import re

import llvmlite.binding as llvm
import numpy as np
import pytest

from tlmir.codegen_cpu import compile_func
from tlmir.ir.expr import Call, Const, Load, Var
from tlmir.ir.stmt import Buffer, For, PrimFunc, Store

RNG = np.random.default_rng(1234)
LANES = 16
FLT_MIN = float(np.finfo(np.float32).tiny)  # smallest normal
SUB_ULP = 2.0 ** -149                       # smallest subnormal
REL_TOL = ABS_TOL = 2e-6
KINDS = ("vectorized", "serial")


def c(v: int) -> Const:
    return Const(v, "int64")


def unary_kernel(op: str, kind: str, n: int):
    """out[i] = op(x[i]): a serial loop, or serial chunks around a 16-lane vectorized loop."""
    assert n % LANES == 0
    X, O = Buffer("X", (n,), "float32"), Buffer("O", (n,), "float32")
    if kind == "vectorized":
        io, ii = Var("io"), Var("ii")
        idx = io * LANES + ii
        body = For(io, c(0), c(n // LANES), "serial",
                   For(ii, c(0), c(LANES), "vectorized", Store(O, idx, Call(op, [Load(X, idx)], "float32"))))
    else:
        i = Var("i")
        body = For(i, c(0), c(n), "serial", Store(O, i, Call(op, [Load(X, i)], "float32")))
    return compile_func(PrimFunc(f"vm_{op}_{kind}", [X, O], body))


def run(op: str, kind: str, x: np.ndarray) -> np.ndarray:
    pad = -len(x) % LANES
    xp = np.concatenate([x, np.ones(pad, np.float32)]).astype(np.float32)
    out = np.full_like(xp, 12345.0)
    unary_kernel(op, kind, len(xp))(xp, out)
    return out[:len(x)]


def f32(*vals) -> np.ndarray:
    return np.array(vals, dtype=np.float32)


def all_floats(n: int) -> np.ndarray:
    """Random bit patterns: every exponent (subnormals, inf, NaN) equally likely."""
    return RNG.integers(0, 2 ** 32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)


def signed_logspace(n: int, lo: float, hi: float) -> np.ndarray:
    mag = 10.0 ** RNG.uniform(lo, hi, n)
    return (mag * RNG.choice([-1.0, 1.0], n)).astype(np.float32)


def check_against(out: np.ndarray, ref64: np.ndarray, x: np.ndarray, op: str, *,
                  abs_tol: float | None = None, subnormal: bool = True) -> None:
    """Results whose float32 rounding is a normal number: relative error <= REL_TOL (and
    absolute <= abs_tol if given); subnormal or zero: within one subnormal ulp (if
    `subnormal`); inf and NaN results must match exactly."""
    with np.errstate(all="ignore"):
        want = ref64.astype(np.float32)
    normal = np.isfinite(want) & (np.abs(want) >= FLT_MIN)
    tiny = np.isfinite(want) & (np.abs(want) < FLT_MIN)
    special = ~np.isfinite(want)
    np.testing.assert_array_equal(np.isnan(out), np.isnan(want), err_msg=f"{op}: NaN pattern")
    np.testing.assert_array_equal(out[special], want[special], err_msg=f"{op}: inf/nan results")
    err = np.abs(out[normal].astype(np.float64) - ref64[normal])
    r = err / np.abs(ref64[normal])
    k = int(np.argmax(r))
    assert r[k] <= REL_TOL, f"{op}: rel err {r[k]:.3g} at x={x[normal][k]!r}: got {out[normal][k]!r}, want {ref64[normal][k]!r}"
    if abs_tol is not None:
        k = int(np.argmax(err))
        assert err[k] <= abs_tol, f"{op}: abs err {err[k]:.3g} at x={x[normal][k]!r}"
    if subnormal and tiny.any():
        e = np.abs(out[tiny].astype(np.float64) - ref64[tiny])
        assert e.max() <= SUB_ULP, f"{op}: subnormal result off by {e.max() / SUB_ULP:.2f} ulp"


@pytest.fixture(scope="module")
def results():
    """op -> (x, {kind: out}), compiled and run once per module."""
    edges = f32(0.0, -0.0, 1.0, -1.0, 1e-45, -1e-45, 1e-38, 1e-30, -1e-30, 1e-8, -1e-8, 0.5, -0.5,
                3.0, -3.0, 10.0, -10.0, 88.72283, 88.72284, 88.8, -87.3, -88.0, -100.0, -103.97,
                -104.0, -110.0, 1e10, -1e10, 3.4e38, -3.4e38, np.inf, -np.inf, np.nan,
                1.0000001, 0.99999994, 2.0, math.e, 0.7071068, 1.4142135)
    domains = {
        "exp": [all_floats(40000), RNG.uniform(-110, 95, 40000).astype(np.float32),
                signed_logspace(20000, -40, 2)],
        "log": [all_floats(40000), np.abs(all_floats(20000)),
                RNG.uniform(0.5, 2.0, 30000).astype(np.float32),
                (1 + RNG.uniform(-1e-5, 1e-5, 10000)).astype(np.float32)],
        "tanh": [RNG.uniform(-12, 12, 50000).astype(np.float32), signed_logspace(30000, -40, 3),
                 all_floats(20000)],
        "erf": [RNG.uniform(-6, 6, 50000).astype(np.float32), signed_logspace(30000, -40, 3),
                all_floats(20000)],
        "sigmoid": [RNG.uniform(-100, 100, 50000).astype(np.float32), signed_logspace(30000, -40, 3),
                    all_floats(20000)],
    }
    res = {}
    for op, parts in domains.items():
        x = np.concatenate([edges, *parts]).astype(np.float32)
        res[op] = x, {kind: run(op, kind, x) for kind in KINDS}
    return res


def reference(op: str, x: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        x64 = x.astype(np.float64)
        if op == "exp":
            return np.exp(x64)
        if op == "log":
            return np.log(x64)
        if op == "tanh":
            return np.tanh(x64)
        if op == "erf":
            return np.array([math.erf(v) for v in x64.tolist()])
        return 1.0 / (1.0 + np.exp(-x64))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("op", ["exp", "log", "tanh", "erf", "sigmoid"])
def test_accuracy(results, op, kind):
    x, outs = results[op]
    out, ref = outs[kind], reference(op, x)
    bounded = op in ("tanh", "erf", "sigmoid")
    # sigmoid is 1/(1 + exp(-x)): exp(-x) overflows below x = -88.7, so its subnormal
    # results are 0 (as with numpy's float32 1/(1+np.exp(-x)))
    check_against(out, ref, x, op, abs_tol=ABS_TOL if bounded else None, subnormal=op != "sigmoid")
    if bounded:  # also absolutely close everywhere, tiny results included
        fin = ~np.isnan(ref)
        assert np.abs(out[fin] - ref[fin]).max() <= ABS_TOL


def test_vector_and_scalar_loops_agree_bitwise(results):
    for op, (x, outs) in results.items():
        np.testing.assert_array_equal(outs["vectorized"], outs["serial"], err_msg=op)


@pytest.mark.parametrize("kind", KINDS)
def test_special_values(kind):
    inf, nan = np.inf, np.nan
    x = f32(-inf, inf, nan, 0.0, -0.0, 88.8, 1000.0, -104.0, -1000.0, -87.0, -100.0)
    got = run("exp", kind, x)
    np.testing.assert_array_equal(got[:2], [0.0, inf])
    assert np.isnan(got[2])
    np.testing.assert_array_equal(got[3:9], [1.0, 1.0, inf, inf, 0.0, 0.0])
    assert 0 < got[9] < 2 * FLT_MIN and 0 < got[10] < FLT_MIN  # gradual underflow, not flushed

    got = run("log", kind, f32(0.0, -0.0, -1.0, -inf, inf, nan, 1.0, 1e-45, 3.4028235e38))
    np.testing.assert_array_equal(got[:2], [-inf, -inf])
    assert np.isnan(got[2]) and np.isnan(got[3]) and np.isnan(got[5])
    assert got[4] == inf and got[6] == 0.0
    np.testing.assert_allclose(got[7:], [math.log(1.401298464324817e-45), math.log(3.4028235e38)], rtol=1e-6)

    for op, ref in (("tanh", math.tanh), ("erf", math.erf)):
        pts = f32(1e-8, -1e-8, 0.5, -0.5, 3.0, -3.0, 10.0, -10.0, inf, -inf, 0.0, -0.0)
        got = run(op, kind, np.concatenate([pts, f32(nan)]))
        np.testing.assert_allclose(got[:-1], [ref(float(v)) for v in pts], rtol=2e-7, atol=0, err_msg=op)
        assert np.isnan(got[-1])
        assert np.signbit(got[-2]) and not np.signbit(got[-3])  # f(-0) = -0

    got = run("sigmoid", kind, f32(-inf, inf, nan, 0.0, -200.0, 200.0))
    np.testing.assert_array_equal(got[[0, 1, 3, 4, 5]], [0.0, 1.0, 0.5, 0.0, 1.0])
    assert np.isnan(got[2])


def _host_has(*features: str) -> bool:
    try:
        have = llvm.get_host_cpu_features()
    except RuntimeError:
        return False
    return all(have.get(f, False) for f in features)


def test_vectorized_exp_is_inline_simd():
    k = unary_kernel("exp", "vectorized", 256)
    assert "expf" not in k.llvm_ir and "llvm.exp" not in k.llvm_ir
    asm = k.assembly
    assert not re.search(r"\bcall\w*\s+\S*expf", asm)
    assert "expf" not in asm
    if not _host_has("avx", "fma"):
        pytest.skip("host has no AVX+FMA: SIMD fma instructions not expected")
    assert re.search(r"vfmadd\w*\s+[^\n]*%[yz]mm", asm), "expected ymm/zmm fused multiply-adds"


def test_float64_and_float16_still_work():
    """float64 keeps libm / llvm intrinsics; float16 computes through the float32 routines."""
    for dtype in ("float64", "float16"):
        n = 32
        X, O = Buffer("X", (n,), dtype), Buffer("O", (n,), dtype)
        i = Var("i")
        f = PrimFunc(f"vm_{dtype}", [X, O], For(i, c(0), c(n), "vectorized",
                                                Store(O, i, Call("exp", [Load(X, i)], dtype))))
        x = np.linspace(-3, 3, n).astype(dtype)
        out = np.zeros(n, dtype)
        compile_func(f)(x, out)
        np.testing.assert_allclose(out, np.exp(x.astype(np.float64)), rtol=1e-3 if dtype == "float16" else 1e-12)
