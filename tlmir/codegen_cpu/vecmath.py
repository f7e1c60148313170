"""Inline float32 exp / log / tanh / erf / sigmoid for scalars and `<L x float>` vectors.

LLVM has no vector libm to call for `llvm.exp.v16f32` and friends: it scalarises them into
one `expf` call per lane, which makes exp-heavy kernels (softmax, GELU) several times slower
than numpy's SIMD loops. These routines are straight-line LLVM IR (fma polynomials, integer
exponent tricks, selects for the special cases), so a vector input stays a vector end to end.

The same code is used for scalar float32 calls. glibc's `expf`/`logf` are accurate and
reasonably fast, but using one implementation for both keeps a vectorized loop and its
serial fallback (or tail) bit-for-bit consistent, and leaves serial loops free of calls, so
LLVM's own loop vectoriser can still widen them. float64 keeps using libm / llvm intrinsics.

Method (polynomial coefficients are our own near-minimax fits, Lawson's algorithm on
Chebyshev nodes in float64, rounded to float32; the error figures are of the approximation
alone; results are measured against numpy in float64 in tests/test_vecmath.py):

exp(x)   x clamped to [-104, 88.76] (NaN passes through); n = rint(x*log2e) by the
         1.5*2^23 shifter, r = x - n*ln2 in two fma steps (Cody-Waite, ln2 = hi + lo);
         exp(r) = 1 + r + r^2*(c2 + ... + c6 r^4) on |r| <= ln2/2 (rel. err 4e-9);
         the result is p * 2^(n>>1) * 2^(n - (n>>1)), each factor built by writing the
         exponent bits, so results overflow to inf above ln(FLT_MAX) ~ 88.72 and round
         gradually into subnormals down to 0 below ~ -103.97 (no flush to zero).
         exp(+inf) = inf, exp(-inf) = 0, exp(nan) = nan. Max rel. error ~ 1.5 ulp for
         normal results; subnormal results are within 1 subnormal ulp.
log(x)   subnormal x is scaled by 2^23 first; x = m * 2^k with m in [sqrt(1/2), sqrt(2))
         by integer arithmetic on the bits (offset by the bits of sqrt(1/2), so no
         compare is needed); f = m - 1 (exact); log1p(f) = f - f^2/2 + f^3 P(f), deg(P) = 7
         (rel. err 6e-9); log x = k*ln2_hi + (k*ln2_lo + log1p(f)).
         log(0) = -inf, log(x < 0) = nan, log(+inf) = inf, log(nan) = nan.
tanh(x)  |x| < 0.625: x + x^3 P(x^2), deg(P) = 4 (rel. err 9e-9); otherwise
         sign(x) * (1 - 2/(exp(2|x|) + 1)), saturating to +-1 for |x| > 9.
erf(x)   |x| < 1: x + x Q(x^2), deg(Q) = 6 (rel. err 3e-9, keeps erf(tiny) accurate);
         otherwise sign(x) * min(P(a - 2.5), 1) with a = min(|x|, 4) and P a degree-12
         fit of erf itself on [1, 4] (abs. err 8e-8; float32's spacing just below 1 is
         6e-8; a least-squares fit at Chebyshev nodes); erf(+-4) rounds to +-1. Both branches
         run for every vector lane; the form 1 - exp(-a^2) G(a - 2.5) is not used, as its exp
         makes GELU's epilogue cost 5% of a dense kernel (0.2 ms of 4.2 ms).
sigmoid  1 / (1 + exp(-x)) with the exp above.
"""
from __future__ import annotations

import math
from typing import Callable

from llvmlite import ir

I32 = ir.IntType(32)
F32 = ir.FloatType()

#: Call ops that get an inline float32 implementation.
FAST_F32 = frozenset({"exp", "log", "tanh", "erf", "sigmoid"})

LOG2E = 1.44269504088896341
LN2_HI = 0.693147182464599609375   # float32(ln 2)
LN2_LO = -1.9046542121259336e-09   # float32(ln 2 - LN2_HI)
SHIFTER = 12582912.0               # 1.5 * 2^23: x + SHIFTER rounds x to an integer
EXP_HI, EXP_LO = 88.76, -104.0     # beyond these exp(x) is inf / 0 in float32
FLT_MIN = 1.1754943508222875e-38   # 2^-126, smallest normal

# exp(r) = 1 + r + r^2 (c2 + c3 r + ... + c6 r^4), |r| <= ln2/2
EXP_C = (0.49999994, 0.16666521, 0.04166839, 0.008368717, 0.0013814599)
# log1p(f) = f - f^2/2 + f^3 (c0 + c1 f + ... + c7 f^7), f in [sqrt(1/2) - 1, sqrt(2) - 1]
LOG_C = (0.3333333, -0.2500082, 0.20001227, -0.16623357, 0.14201757, -0.13160183,
         0.12761576, -0.07634497)
# tanh(x) = x + x^3 (c0 + c1 x^2 + ... + c4 x^8), |x| <= 0.625
TANH_C = (-0.3333328, 0.13331442, -0.053739715, 0.020639088, -0.0057049873)
TANH_SMALL, TANH_SAT = 0.625, 9.0
# erf(x) = x + x (c0 + c1 x^2 + ... + c6 x^12), |x| <= 1
ERF_C = (0.12837917, -0.37612626, 0.112835854, -0.026853813, 0.005188329, -0.00080102036,
         7.853892e-05)
# erf(a) = p0 + p1 t + ... + p12 t^12, t = a - 2.5, a in [1, 4]
ERF_P = (0.9995930790901184, 0.0021779793314635754, -0.005447070114314556, 0.008354324847459793,
         -0.008612779900431633, 0.0061000254936516285, -0.0028237542137503624,
         0.0005742026842199266, 0.0002919994294643402, -0.00028087192913517356,
         5.941381095908582e-05, 2.1406009182101116e-05, -8.709440407983493e-06)
ERF_SMALL, ERF_SAT, ERF_CENTER = 1.0, 4.0, 2.5

Declare = Callable[[str, ir.Type, list], ir.Function]


class F32Math:
    """Builds float32 math on values of one shape: a scalar float or `<n x float>`."""

    def __init__(self, builder: ir.IRBuilder, declare: Declare, lanes: int | None):
        self.b, self.declare, self.n = builder, declare, lanes
        self.ft = F32 if lanes is None else ir.VectorType(F32, lanes)
        self.it = I32 if lanes is None else ir.VectorType(I32, lanes)
        self._suffix = "f32" if lanes is None else f"v{lanes}f32"

    # ------------------------------------------------------------ building blocks

    def f(self, v: float) -> ir.Constant:
        c = ir.Constant(F32, v)
        return c if self.n is None else ir.Constant(self.ft, [c] * self.n)

    def i(self, v: int) -> ir.Constant:
        c = ir.Constant(I32, v)
        return c if self.n is None else ir.Constant(self.it, [c] * self.n)

    def call(self, name: str, *args: ir.Value) -> ir.Value:
        fn = self.declare(f"llvm.{name}.{self._suffix}", self.ft, [self.ft] * len(args))
        return self.b.call(fn, args)

    def fma(self, a: ir.Value, b: ir.Value, c: ir.Value) -> ir.Value:
        return self.call("fma", a, b, c)

    def horner(self, x: ir.Value, coeffs) -> ir.Value:
        """c0 + c1 x + ... + ck x^k, one fma per coefficient."""
        p = self.f(coeffs[-1])
        for c in reversed(coeffs[:-1]):
            p = self.fma(p, x, self.f(c))
        return p

    def gt(self, a: ir.Value, v: float) -> ir.Value:
        return self.b.fcmp_ordered(">", a, self.f(v))

    def lt(self, a: ir.Value, v: float) -> ir.Value:
        return self.b.fcmp_ordered("<", a, self.f(v))

    def pow2(self, k: ir.Value) -> ir.Value:
        """2^k as a float for integer k in [-126, 127]: the exponent bits written directly."""
        return self.b.bitcast(self.b.shl(self.b.add(k, self.i(127)), self.i(23)), self.ft)

    # ------------------------------------------------------------ functions

    def exp(self, x: ir.Value) -> ir.Value:
        b = self.b
        # clamp; the compares are false for NaN, which therefore flows through
        x = b.select(self.gt(x, EXP_HI), self.f(EXP_HI), x)
        x = b.select(self.lt(x, EXP_LO), self.f(EXP_LO), x)
        t = self.fma(x, self.f(LOG2E), self.f(SHIFTER))      # SHIFTER + rint(x log2e), exact
        n_f = b.fsub(t, self.f(SHIFTER))
        n = b.sub(b.bitcast(t, self.it), self.i(0x4B400000))  # the integer in t's mantissa
        r = self.fma(n_f, self.f(-LN2_HI), x)                 # exact (Sterbenz)
        r = self.fma(n_f, self.f(-LN2_LO), r)
        p = self.horner(r, EXP_C)
        p = self.fma(p, r, self.f(1.0))
        p = self.fma(p, r, self.f(1.0))
        # n in [-150, 128]: two factors 2^(n>>1) * 2^(n - n>>1), both normal; the second
        # product rounds once into inf or the subnormals
        n1 = b.ashr(n, self.i(1))
        n2 = b.sub(n, n1)
        return b.fmul(b.fmul(p, self.pow2(n1)), self.pow2(n2))

    def log(self, x: ir.Value) -> ir.Value:
        b = self.b
        tiny = self.lt(x, FLT_MIN)  # subnormal (or <= 0: overridden below)
        xs = b.select(tiny, b.fmul(x, self.f(8388608.0)), x)
        k_adj = b.select(tiny, self.i(-23), self.i(0))
        ix = b.sub(b.bitcast(xs, self.it), self.i(0x3F3504F3))  # bits(x) - bits(sqrt(1/2))
        k = b.add(b.ashr(ix, self.i(23)), k_adj)
        m = b.bitcast(b.add(b.and_(ix, self.i(0x007FFFFF)), self.i(0x3F3504F3)), self.ft)
        f = b.fsub(m, self.f(1.0))                                # exact: m in [0.707, 1.414)
        f2 = b.fmul(f, f)
        y = self.fma(b.fmul(f2, f), self.horner(f, LOG_C), b.fmul(f2, self.f(-0.5)))
        l1p = b.fadd(f, y)
        kf = b.sitofp(k, self.ft)
        res = self.fma(kf, self.f(LN2_HI), self.fma(kf, self.f(LN2_LO), l1p))
        res = b.select(b.fcmp_ordered("==", x, self.f(math.inf)), self.f(math.inf), res)
        res = b.select(b.fcmp_ordered("==", x, self.f(0.0)), self.f(-math.inf), res)
        return b.select(b.fcmp_unordered("<", x, self.f(0.0)), self.f(math.nan), res)

    def tanh(self, x: ir.Value) -> ir.Value:
        b = self.b
        ax = self.call("fabs", x)  # odd function: work on |x|, copy the sign back (tanh(-0) = -0)
        x2 = b.fmul(ax, ax)
        small = self.fma(b.fmul(ax, x2), self.horner(x2, TANH_C), ax)
        e = self.exp(b.fmul(ax, self.f(2.0)))
        big = b.fsub(self.f(1.0), b.fdiv(self.f(2.0), b.fadd(e, self.f(1.0))))
        big = b.select(self.gt(ax, TANH_SAT), self.f(1.0), big)  # NaN stays NaN
        return self.call("copysign", b.select(self.lt(ax, TANH_SMALL), small, big), x)

    def erf(self, x: ir.Value) -> ir.Value:
        b = self.b
        ax = self.call("fabs", x)  # odd function: work on |x|, copy the sign back
        small = self.fma(ax, self.horner(b.fmul(ax, ax), ERF_C), ax)
        a = b.select(self.gt(ax, ERF_SAT), self.f(ERF_SAT), ax)  # NaN stays NaN
        p = self.horner(b.fsub(a, self.f(ERF_CENTER)), ERF_P)
        big = b.select(self.gt(p, 1.0), self.f(1.0), p)  # NaN stays NaN
        return self.call("copysign", b.select(self.lt(ax, ERF_SMALL), small, big), x)

    def sigmoid(self, x: ir.Value) -> ir.Value:
        one = self.f(1.0)
        return self.b.fdiv(one, self.b.fadd(one, self.exp(self.b.fneg(x))))


def emit_f32(op: str, builder: ir.IRBuilder, declare: Declare, x: ir.Value) -> ir.Value:
    """Inline float32 `op(x)` (op in FAST_F32) for a float or `<n x float>` value x."""
    lanes = x.type.count if isinstance(x.type, ir.VectorType) else None
    return getattr(F32Math(builder, declare, lanes), op)(x)
