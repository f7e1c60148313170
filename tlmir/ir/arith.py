"""Integer simplification and bound analysis for index arithmetic.

Lowering uses this to drop guards that loop ranges prove always true, to infer the
extents of loops attached with compute_at (`symbolic_bound`), and to print index math
in one canonical form.

Integer Add/Sub/Mul trees are flattened into a linear form `sum(coeff*atom) + const`
(atoms: variables, floor div/mod, min/max, non-linear products, loads, ...), like terms
are merged by structural key, and the sum is rebuilt in a fixed order (positive terms
first, larger coefficients first, then by printed text), so equal sums print equally.
Bounds are interval arithmetic over that form: exact for linear expressions over
independent ranged variables, conservative elsewhere. Nothing is cached across calls.
"""
from __future__ import annotations

import math
import operator
from typing import Callable, Union

from ..errors import LowerError
from .expr import (INT_DTYPES, Add, And, Binary, Call, Cast, Compare, Const, Div, EQ, Expr,
                   FloorDiv, FloorMod, LE, LT, Max, Min, Mul, NE, Not, Or, Select, Sub, Var,
                   const, is_float, walk)

Ranges = dict[Var, tuple[int, int]]
Num = Union[int, float]
INF = math.inf

_OPS: dict[type, Callable] = {
    Add: operator.add, Sub: operator.sub, Mul: operator.mul, Div: operator.truediv,
    FloorDiv: operator.floordiv, FloorMod: operator.mod, Min: min, Max: max,
    LT: operator.lt, LE: operator.le, EQ: operator.eq, NE: operator.ne,
    And: lambda a, b: bool(a and b), Or: lambda a, b: bool(a or b)}
_NEGATE = {LT: lambda a, b: (LE, b, a), LE: lambda a, b: (LT, b, a),
           EQ: lambda a, b: (NE, a, b), NE: lambda a, b: (EQ, a, b)}


def _is_int(dtype: str) -> bool:
    return dtype in INT_DTYPES


def _fdiv(x: Num, y: int) -> Num:
    """Floor division that lets an infinite numerator through."""
    if math.isinf(x):
        return x if y > 0 else -x
    return x // y


def _text(t: Expr) -> str:
    """Printed form, the tie-breaking sort key for terms and factors."""
    return t.name if isinstance(t, Var) else str(t)


def _imul(x: Num, y: Num) -> Num:
    """Interval-end product where 0 * inf is 0 (the variable really is 0)."""
    return 0 if x == 0 or y == 0 else x * y


class _Lin:
    """sum(coeff * term) + const over integer atoms; terms keyed by structural key."""
    __slots__ = ("terms", "const", "dtype")

    def __init__(self, dtype: str, const: int = 0):
        self.terms: dict[tuple, list] = {}
        self.const, self.dtype = const, dtype

    def add_term(self, term: Expr, coeff: int) -> None:
        if coeff:
            k = term.key()
            slot = self.terms.get(k)
            if slot is None:
                self.terms[k] = [term, coeff]
            else:
                slot[1] += coeff

    def add(self, other: "_Lin", scale: int = 1) -> "_Lin":
        """In place: self += scale * other. Returns self."""
        self.const += scale * other.const
        for t, c in other.items():
            self.add_term(t, c * scale)
        return self

    def items(self) -> list[tuple[Expr, int]]:
        return [(t, c) for t, c in self.terms.values() if c]

    def is_const(self) -> bool:
        return not any(c for _, c in self.terms.values())


class _Simplifier:
    """One simplification context: the variable ranges plus the rewriting rules."""

    def __init__(self, ranges: Ranges | None):
        self.ranges = ranges or {}

    # ------------------------------------------------------------ linear form
    def lin(self, e: Expr, parsed: bool = False) -> _Lin:
        """Linear form of integer `e`. parsed=True: `e` is already simplified, so its
        atoms are taken as they are (cheap re-reading of a simplifier output)."""
        acc = _Lin(e.dtype)
        self._collect(e, 1, acc, parsed)
        if not parsed:
            self._merge_divmod(acc)
        return acc

    def _collect(self, e: Expr, scale: int, acc: _Lin, parsed: bool) -> None:
        if isinstance(e, Const):
            acc.const += scale * int(e.value)
        elif isinstance(e, Add):
            self._collect(e.a, scale, acc, parsed)
            self._collect(e.b, scale, acc, parsed)
        elif isinstance(e, Sub):
            self._collect(e.a, scale, acc, parsed)
            self._collect(e.b, -scale, acc, parsed)
        elif isinstance(e, Mul) and isinstance(e.b, Const):   # fast path: x * 4
            self._collect(e.a, scale * int(e.b.value), acc, parsed)
        elif isinstance(e, Mul) and isinstance(e.a, Const):
            self._collect(e.b, scale * int(e.a.value), acc, parsed)
        elif isinstance(e, Mul):
            la, lb = self.lin(e.a, parsed), self.lin(e.b, parsed)
            if lb.is_const():
                acc.add(la, scale * lb.const)
            elif la.is_const():
                acc.add(lb, scale * la.const)
            else:
                ia, ib = la.items(), lb.items()
                if len(ia) == 1 and len(ib) == 1 and la.const == 0 and lb.const == 0:
                    (ta, ca), (tb, cb) = ia[0], ib[0]
                    acc.add_term(self._product(ta, tb), scale * ca * cb)
                else:
                    acc.add_term(self._product(self.build(la), self.build(lb)), scale)
        elif parsed:
            acc.add_term(e, scale)
        elif isinstance(e, (FloorDiv, FloorMod)):
            num, den = self.lin(e.a), self.simp(e.b)
            acc.add(self._div(num, den) if isinstance(e, FloorDiv) else self._mod(num, den), scale)
        else:
            s = self._simp_node(e)
            if isinstance(s, (Const, Add, Sub, Mul)) and _is_int(s.dtype):
                self._collect(s, scale, acc, True)
            else:
                acc.add_term(s, scale)

    @staticmethod
    def _product(a: Expr, b: Expr) -> Expr:
        """Non-linear product with its factors in printed order (x*y == y*x)."""
        factors: list[Expr] = []
        for f in (a, b):
            stack = [f]
            while stack:
                x = stack.pop()
                if isinstance(x, Mul) and not isinstance(x.a, Const) and not isinstance(x.b, Const):
                    stack += [x.b, x.a]
                else:
                    factors.append(x)
        factors.sort(key=_text)
        out = factors[0]
        for f in factors[1:]:
            out = Mul(out, f)
        return out

    def build(self, lin: _Lin) -> Expr:
        """Expression for a linear form, e.g. `i*32 + j - k + 3`."""
        dt = lin.dtype
        items = sorted(lin.items(), key=lambda tc: (tc[1] < 0, -abs(tc[1]), _text(tc[0])))
        c0, out = lin.const, None

        def scaled(t: Expr, c: int) -> Expr:
            return t if c == 1 else Mul(t, Const(c, dt))

        for t, c in items:
            if c > 0:
                out = scaled(t, c) if out is None else Add(out, scaled(t, c))
                continue
            if out is None and c0 > 0:
                out, c0 = Const(c0, dt), 0
            out = scaled(t, c) if out is None else Sub(out, scaled(t, -c))
        if out is None:
            return Const(c0, dt)
        if c0:
            out = Add(out, Const(c0, dt)) if c0 > 0 else Sub(out, Const(-c0, dt))
        return out

    def _merge_divmod(self, acc: _Lin) -> None:
        """Undo fuse-style index splits: (x//d)*d*c + (x%d)*c -> x*c and
        (x//a % b)*a*c + (x%a)*c -> (x % (a*b))*c."""
        while True:
            mods = {(t.a.key(), t.b.value): k for k, (t, c) in acc.terms.items()
                    if c and isinstance(t, FloorMod) and isinstance(t.b, Const) and t.b.value > 0}
            if not mods:
                return
            for k, (t, c) in list(acc.terms.items()):
                if not c or not isinstance(t, (FloorDiv, FloorMod)) or not isinstance(t.b, Const):
                    continue
                if isinstance(t, FloorDiv):
                    x, a, b = t.a, t.b.value, None
                elif isinstance(t.a, FloorDiv) and isinstance(t.a.b, Const) and t.a.b.value > 0:
                    x, a, b = t.a.a, t.a.b.value, t.b.value
                else:
                    continue
                mk = mods.get((x.key(), a))
                cm = acc.terms[mk][1] if mk is not None else 0
                if not cm or cm * a != c:
                    continue
                acc.terms[k][1] = acc.terms[mk][1] = 0
                merged = self.lin(x, True) if b is None else self._mod(self.lin(x, True), Const(a * b, x.dtype))
                acc.add(merged, cm)
                break
            else:
                return

    # ------------------------------------------------------------ floor div / mod
    def _div(self, num: _Lin, den: Expr) -> _Lin:
        dt = num.dtype
        d = den.value if isinstance(den, Const) else 0
        if d <= 0:
            if d and num.is_const():
                return _Lin(dt, num.const // d)
            return self._atom(FloorDiv(self.build(num), den))
        q, rest = _Lin(dt, num.const // d), _Lin(dt, num.const % d)
        for t, c in num.items():
            if c % d == 0:
                q.add_term(t, c // d)
            else:
                rest.add_term(t, c)
        while True:   # rest.const is in [0, d)
            if rest.is_const():
                return q
            lo, hi = self.bound(rest)
            if lo > -INF and hi < INF and lo // d == hi // d:
                q.const += lo // d
                return q
            g = math.gcd(d, *(c for _, c in rest.items()))
            if g == 1 or rest.const >= g:
                break
            # (g*y + r) // (g*e) == y // e  for 0 <= r < g
            small = _Lin(dt)
            for t, c in rest.items():
                small.add_term(t, c // g)
            rest, d = small, d // g
            if d == 1:
                return q.add(rest)
        items = rest.items()
        if len(items) == 1 and items[0][1] == 1 and rest.const == 0:
            t = items[0][0]
            if isinstance(t, FloorDiv) and isinstance(t.b, Const) and t.b.value > 0:
                # (x // a) // d -> x // (a*d)
                return q.add(self._div(self.lin(t.a, True), Const(t.b.value * d, dt)))
        return q.add(self._atom(FloorDiv(self.build(rest), Const(d, dt))))

    def _mod(self, num: _Lin, den: Expr) -> _Lin:
        dt = num.dtype
        d = den.value if isinstance(den, Const) else 0
        if d <= 0:
            if d and num.is_const():
                return _Lin(dt, num.const % d)
            return self._atom(FloorMod(self.build(num), den))
        rest = _Lin(dt, num.const % d)
        for t, c in num.items():
            if c % d:
                rest.add_term(t, c)
        if rest.is_const():
            return rest
        lo, hi = self.bound(rest)
        if lo > -INF and hi < INF and lo // d == hi // d:
            rest.const -= (lo // d) * d
            return rest
        g = math.gcd(d, *(c for _, c in rest.items()))
        if g > 1 and rest.const < g:   # (g*y + r) % (g*e) == g*(y % e) + r  for 0 <= r < g
            small = _Lin(dt)
            for t, c in rest.items():
                small.add_term(t, c // g)
            return _Lin(dt, rest.const).add(self._mod(small, Const(d // g, dt)), g)
        items = rest.items()
        if len(items) == 1 and items[0][1] == 1 and rest.const == 0:
            t = items[0][0]
            if isinstance(t, FloorMod) and isinstance(t.b, Const) and t.b.value % d == 0:
                return self._mod(self.lin(t.a, True), den)   # (x % (k*d)) % d -> x % d
        return self._atom(FloorMod(self.build(rest), Const(d, dt)))

    @staticmethod
    def _atom(t: Expr) -> _Lin:
        out = _Lin(t.dtype)
        out.add_term(t, 1)
        return out

    # ------------------------------------------------------------ other nodes
    def simp(self, e: Expr) -> Expr:
        if isinstance(e, (Const, Var)):
            return e
        if _is_int(e.dtype) and isinstance(e, (Add, Sub, Mul, FloorDiv, FloorMod)):
            return self.build(self.lin(e))
        return self._simp_node(e)

    def _simp_node(self, e: Expr) -> Expr:
        if isinstance(e, (Const, Var)):
            return e
        if isinstance(e, (Min, Max)):
            return self._minmax(type(e), self.simp(e.a), self.simp(e.b))
        if isinstance(e, Compare):
            return self._compare(type(e), self.simp(e.a), self.simp(e.b))
        if isinstance(e, (And, Or)):
            return self._andor(type(e), self.simp(e.a), self.simp(e.b))
        if isinstance(e, Not):
            return self._not(self.simp(e.a))
        if isinstance(e, Select):
            c = self.simp(e.cond)
            if isinstance(c, Const):
                return self.simp(e.t if c.value else e.f)
            t, f = self.simp(e.t), self.simp(e.f)
            return t if t.dtype == f.dtype and t.key() == f.key() else Select(c, t, f)
        if isinstance(e, Cast):
            v = self.simp(e.value)
            if v.dtype == e.dtype:
                return v
            if isinstance(v, Const) and math.isfinite(v.value):
                return Const(v.value, e.dtype)
            return e if v is e.value else Cast(e.dtype, v)
        ch = e.children()
        new = tuple(self.simp(c) for c in ch)
        if isinstance(e, Binary) and all(isinstance(c, Const) for c in new):
            folded = self._fold(type(e), new[0], new[1], e.dtype)
            if folded is not None:
                return folded
        return e.with_children(new) if any(n is not o for n, o in zip(new, ch)) else e

    @staticmethod
    def _fold(cls: type, a: Const, b: Const, dtype: str) -> Const | None:
        try:
            return Const(_OPS[cls](a.value, b.value), dtype)
        except (ZeroDivisionError, KeyError, OverflowError, ValueError):
            return None

    def _diff_bound(self, a: Expr, b: Expr) -> tuple[_Lin, Num, Num]:
        d = self.lin(a, True).add(self.lin(b, True), -1)
        return (d,) + self.bound(d)

    def _minmax(self, cls: type, a: Expr, b: Expr) -> Expr:
        if isinstance(a, Const) and isinstance(b, Const):
            return Const(_OPS[cls](a.value, b.value), a.dtype)
        if a.key() == b.key():
            return a
        if _is_int(a.dtype) and a.dtype == b.dtype:
            _, lo, hi = self._diff_bound(a, b)
            if hi <= 0:
                return a if cls is Min else b
            if lo >= 0:
                return b if cls is Min else a
        return cls(a, b)

    def _compare(self, cls: type, a: Expr, b: Expr) -> Expr:
        if isinstance(a, Const) and isinstance(b, Const):
            return Const(_OPS[cls](a.value, b.value), "bool")
        if not (_is_int(a.dtype) and a.dtype == b.dtype):
            return cls(a, b)
        d, lo, hi = self._diff_bound(a, b)   # decide on a - b
        true, false = {LT: (hi < 0, lo >= 0), LE: (hi <= 0, lo > 0),
                       EQ: (lo == hi == 0, lo > 0 or hi < 0),
                       NE: (lo > 0 or hi < 0, lo == hi == 0)}[cls]
        if true or false:
            return Const(bool(true), "bool")
        left, right = _Lin(d.dtype, max(d.const, 0)), _Lin(d.dtype, max(-d.const, 0))
        for t, c in d.items():
            (left if c > 0 else right).add_term(t, abs(c))
        return cls(self.build(left), self.build(right))

    def _andor(self, cls: type, a: Expr, b: Expr) -> Expr:
        for x, y in ((a, b), (b, a)):
            if isinstance(x, Const):
                if cls is And:
                    return y if x.value else Const(False, "bool")
                return Const(True, "bool") if x.value else y
        return a if a.key() == b.key() else cls(a, b)

    def _not(self, a: Expr) -> Expr:
        if isinstance(a, Const):
            return Const(not a.value, "bool")
        if isinstance(a, Not):
            return a.a
        if isinstance(a, Compare) and _is_int(a.a.dtype):
            cls, x, y = _NEGATE[type(a)](a.a, a.b)
            return self._compare(cls, x, y)
        return Not(a)

    # ------------------------------------------------------------ constant bounds
    def bound(self, lin: _Lin) -> tuple[Num, Num]:
        lo = hi = lin.const
        for t, c in lin.items():
            tl, th = self.atom_bound(t)
            if c > 0:
                lo, hi = lo + c * tl, hi + c * th
            else:
                lo, hi = lo + c * th, hi + c * tl
        return lo, hi

    def expr_bound(self, e: Expr) -> tuple[Num, Num]:
        return self.bound(self.lin(e, True)) if _is_int(e.dtype) else self.atom_bound(e)

    def atom_bound(self, t: Expr) -> tuple[Num, Num]:
        if isinstance(t, Var):
            return self.ranges.get(t, (-INF, INF))
        if isinstance(t, Const):
            return (int(t.value),) * 2 if not is_float(t.dtype) else (-INF, INF)
        if t.dtype == "bool":
            return 0, 1
        if not _is_int(t.dtype):
            return -INF, INF
        if isinstance(t, (FloorDiv, FloorMod)):
            (lo, hi), (dl, dh) = self.expr_bound(t.a), self.expr_bound(t.b)
            if isinstance(t, FloorDiv):
                if (dl > 0 and dh < INF) or (dh < 0 and dl > -INF):
                    cands = [_fdiv(x, y) for x in (lo, hi) for y in (dl, dh)]
                    return min(cands), max(cands)
            elif dl > 0:
                if dl == dh and lo > -INF and hi < INF and lo // dl == hi // dl:
                    return lo % dl, hi % dl
                if lo >= 0:
                    return (lo if hi < dl else 0), min(hi, dh - 1)
                return 0, dh - 1
            elif dh < 0:
                return dl + 1, 0
            return -INF, INF
        if isinstance(t, (Min, Max)):
            (la, ha), (lb, hb) = self.expr_bound(t.a), self.expr_bound(t.b)
            f = min if isinstance(t, Min) else max
            return f(la, lb), f(ha, hb)
        if isinstance(t, Mul):
            (la, ha), (lb, hb) = self.expr_bound(t.a), self.expr_bound(t.b)
            cands = [_imul(x, y) for x in (la, ha) for y in (lb, hb)]
            return min(cands), max(cands)
        if isinstance(t, Select):
            (la, ha), (lb, hb) = self.expr_bound(t.t), self.expr_bound(t.f)
            return min(la, lb), max(ha, hb)
        if isinstance(t, Cast) and (_is_int(t.value.dtype) or t.value.dtype == "bool"):
            return self.expr_bound(t.value)
        return -INF, INF

    # ------------------------------------------------------------ symbolic bounds
    @staticmethod
    def _relaxed(e: Expr, rel: dict) -> bool:
        return any(isinstance(n, Var) and n in rel for n in walk(e))

    def sym(self, lin: _Lin, rel: dict) -> tuple[_Lin, _Lin]:
        lo, hi = _Lin(lin.dtype, lin.const), _Lin(lin.dtype, lin.const)
        for t, c in lin.items():
            if not self._relaxed(t, rel):
                lo.add_term(t, c)
                hi.add_term(t, c)
                continue
            tl, th = self.sym_atom(t, rel)
            if c < 0:
                tl, th = th, tl
            lo.add(self.lin(tl, True), c)
            hi.add(self.lin(th, True), c)
        self._merge_divmod(lo)
        self._merge_divmod(hi)
        return lo, hi

    def sym_expr(self, e: Expr, rel: dict) -> tuple[Expr, Expr]:
        lo, hi = self.sym(self.lin(e, True), rel)
        return self.build(lo), self.build(hi)

    def sym_atom(self, t: Expr, rel: dict) -> tuple[Expr, Expr]:
        if isinstance(t, Var):
            return rel[t]
        if isinstance(t, (FloorDiv, FloorMod)) and not self._relaxed(t.b, rel) \
                and self.expr_bound(t.b)[0] > 0:
            lo, hi = self.sym(self.lin(t.a, True), rel)
            ql, qh = self._div(lo, t.b), self._div(hi, t.b)
            if isinstance(t, FloorDiv):
                return self.build(ql), self.build(qh)
            if self.bound(_Lin(t.dtype).add(qh).add(ql, -1)) == (0, 0):   # one period
                return self.build(self._mod(lo, t.b)), self.build(self._mod(hi, t.b))
            return Const(0, t.dtype), self.build(self.lin(t.b, True).add(_Lin(t.dtype, -1)))
        if isinstance(t, (Min, Max)):
            (la, ha), (lb, hb) = self.sym_expr(t.a, rel), self.sym_expr(t.b, rel)
            return self._minmax(type(t), la, lb), self._minmax(type(t), ha, hb)
        if isinstance(t, Select) and _is_int(t.dtype):
            (la, ha), (lb, hb) = self.sym_expr(t.t, rel), self.sym_expr(t.f, rel)
            return self._minmax(Min, la, lb), self._minmax(Max, ha, hb)
        if isinstance(t, Mul):
            (la, ha), (lb, hb) = self.sym_expr(t.a, rel), self.sym_expr(t.b, rel)
            for fixed, lo, hi in ((t.a, lb, hb), (t.b, la, ha)):
                if not self._relaxed(fixed, rel):
                    fl, fh = self.expr_bound(fixed)
                    if fl >= 0:
                        return self.simp(Mul(fixed, lo)), self.simp(Mul(fixed, hi))
                    if fh <= 0:
                        return self.simp(Mul(fixed, hi)), self.simp(Mul(fixed, lo))
            ps = [self.simp(Mul(x, y)) for x in (la, ha) for y in (lb, hb)]
            return (self._minmax(Min, self._minmax(Min, ps[0], ps[1]), self._minmax(Min, ps[2], ps[3])),
                    self._minmax(Max, self._minmax(Max, ps[0], ps[1]), self._minmax(Max, ps[2], ps[3])))
        # Fallback: constant bounds when every relaxed range is constant.
        if all(isinstance(lo, Const) and isinstance(hi, Const) for lo, hi in rel.values()):
            ranges = dict(self.ranges)
            ranges.update({v: (lo.value, hi.value) for v, (lo, hi) in rel.items()})
            lo, hi = _Simplifier(ranges).atom_bound(t)
            if lo > -INF and hi < INF:
                return Const(lo, t.dtype), Const(hi, t.dtype)
        raise LowerError(f"cannot bound {t} over relaxed variables "
                         f"{sorted(v.name for v in rel)}")


# ---------------------------------------------------------------- public API

def simplify(e: Expr, ranges: Ranges | None = None) -> Expr:
    """Canonical, constant-folded form of `e`; `ranges` (inclusive) let guards and
    div/mod/min/max fold where they are provably decided."""
    return _Simplifier(ranges).simp(e)


def const_bound(e: Expr, ranges: Ranges) -> tuple[Num, Num]:
    """Inclusive [lo, hi] of integer `e` (±math.inf where unbounded)."""
    s = _Simplifier(ranges)
    if _is_int(e.dtype):
        return s.bound(s.lin(e))
    return s.atom_bound(s.simp(e))


def prove(cond: Expr, ranges: Ranges) -> bool:
    """True only if `cond` holds for every assignment within `ranges`."""
    c = _Simplifier(ranges).simp(cond)
    return isinstance(c, Const) and bool(c.value)


def symbolic_bound(e: Expr, relax: dict[Var, tuple[Expr, Expr]],
                   ranges: Ranges | None = None) -> tuple[Expr, Expr]:
    """Inclusive [lo, hi] of integer `e` as expressions, when each var in `relax` ranges
    over its (symbolic, inclusive) interval and all other vars stay fixed. Raises
    LowerError for a relaxed var under a node it cannot bound (e.g. a Load index)."""
    s = _Simplifier(ranges)
    rel = {v: (s.simp(const(lo, v.dtype)), s.simp(const(hi, v.dtype)))
           for v, (lo, hi) in relax.items()}
    if not _is_int(e.dtype):
        raise LowerError(f"symbolic_bound needs an integer expression, got {e.dtype}: {e}")
    lo, hi = s.sym(s.lin(e), rel)
    return s.build(lo), s.build(hi)


def linear_coeff(e: Expr, v: Var) -> int | None:
    """c if simplified `e` == c*v + rest with rest free of v (0 if v is absent), else None."""
    if not _is_int(e.dtype):
        return None
    coeff = 0
    for t, c in _Simplifier(None).lin(e).items():
        if t is v:
            coeff = c
        elif any(n is v for n in walk(t)):
            return None
    return coeff


_MATH: dict[str, Callable[[float], float]] = {
    "exp": math.exp, "log": math.log, "sqrt": math.sqrt, "rsqrt": lambda x: 1.0 / math.sqrt(x),
    "tanh": math.tanh, "erf": math.erf, "sigmoid": lambda x: 1.0 / (1.0 + math.exp(-x)),
    "abs": abs}


def evaluate(e: Expr, env: dict[Var, Num]) -> Num | bool:
    """Value of a pure expression (floor div/mod, C-style truncating float->int casts)."""
    if isinstance(e, Const):
        return e.value
    if isinstance(e, Var):
        if e not in env:
            raise ValueError(f"no value for variable {e.name}")
        return env[e]
    if isinstance(e, Select):
        return evaluate(e.t if evaluate(e.cond, env) else e.f, env)
    if isinstance(e, And):
        return bool(evaluate(e.a, env)) and bool(evaluate(e.b, env))
    if isinstance(e, Or):
        return bool(evaluate(e.a, env)) or bool(evaluate(e.b, env))
    if isinstance(e, Not):
        return not evaluate(e.a, env)
    if isinstance(e, Cast):
        v = evaluate(e.value, env)
        return float(v) if is_float(e.dtype) else (bool(v) if e.dtype == "bool" else int(v))
    if isinstance(e, Call):
        return _MATH[e.op](*(evaluate(a, env) for a in e.args))
    if isinstance(e, Binary):
        return _OPS[type(e)](evaluate(e.a, env), evaluate(e.b, env))
    raise ValueError(f"cannot evaluate {type(e).__name__} (not a pure expression): {e}")
