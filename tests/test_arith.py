"""Tests for tlmir.ir.arith: canonical forms, div/mod rules, bounds, and a random
equivalence check (simplified expressions must evaluate like the originals)."""
from __future__ import annotations

import math

import pytest
from hypothesis import given, settings, strategies as st

from tlmir.errors import LowerError
from tlmir.ir.arith import (const_bound, evaluate, linear_coeff, prove, simplify,
                            symbolic_bound)
from tlmir.ir.expr import (Call, Cast, Const, FloorDiv, FloorMod, Load, Max, Min, Not, Select,
                           Var, const, same)
from tlmir.ir.stmt import Buffer

i, j, k, x, y, n = (Var(s) for s in "ijkxyn")
io, ii, ki, fo, fi, f = (Var(s) for s in ("io", "ii", "ki", "fo", "fi", "f"))


def s(e, ranges=None) -> str:
    return str(simplify(e, ranges))


def c(v):
    return const(v)


# ---------------------------------------------------------------- canonical linear form

def test_linear_canonical():
    assert s((i * 4 + j) - i * 4) == "j"
    assert s((x + 3) - (x + 1)) == "2"
    assert s(x * 2 * 3) == "x * 6"
    assert s(j + i * 32) == "i * 32 + j"
    assert s(3 + j + i * 32 - 1) == "i * 32 + j + 2"
    assert s(x - y * 2 + 5 - x * 3) == "5 - x * 2 - y * 2"
    assert s(0 - x) == "x * -1"
    assert s(x * 0 + 7) == "7"
    assert s((x + 1) * 3 - 3) == "x * 3"


def test_constant_folding():
    assert simplify(c(7) // 2).value == 3
    assert simplify(c(-7) // 2).value == -4
    assert simplify(c(-7) % 2).value == 1
    folded = simplify(c(1.5) * 2.0)
    assert isinstance(folded, Const) and folded.value == 3.0 and folded.dtype == "float32"
    assert simplify(Min(c(3), c(5))).value == 3
    assert simplify(c(3) < c(5)).value is True
    assert simplify(Cast("int32", c(3.7))).value == 3
    assert s(c(5) // 0) == "5 // 0"   # left alone, not folded


def test_deterministic_and_idempotent():
    e = (y * 3 + x) * 2 - FloorDiv(x * 4 + 2, c(4)) + Min(x, y)
    a, b = simplify(e), simplify(e)
    assert same(a, b)
    assert same(simplify(a), a)
    assert same(simplify(x + y), simplify(y + x))
    assert same(simplify(x * y), simplify(y * x))
    assert s(x * y * 2 + y * x) == "x * y * 3"


# ---------------------------------------------------------------- floor div / mod

def test_div_mod_rules():
    assert s((i * 8 + j) // 8) == "i + j // 8"
    assert s((i * 8 + j) % 8) == "j % 8"
    assert s((i * 8 + j) // 8, {j: (0, 7)}) == "i"
    assert s((i * 8 + j) % 8, {j: (0, 7)}) == "j"
    assert s((i * 8 + 11) // 4) == "i * 2 + 2"
    assert s(x // 1) == "x" and s(x % 1) == "0"
    assert s((x // 4) // 2) == "x // 8"
    assert s((x % 16) % 8) == "x % 8"
    assert s((x * 4) // 8) == "x // 2"
    assert s((x * 4 + 3) // 8) == "x // 2"
    assert s(x // 8, {x: (0, 7)}) == "0"
    assert s(x % 8, {x: (0, 7)}) == "x"
    assert s(x % 8, {x: (8, 15)}) == "x - 8"


def test_fuse_split_roundtrip():
    assert s((f // 8) * 8 + f % 8) == "f"
    assert s(((f // 3) // 4) * 12 + ((f // 3) % 4) * 3 + f % 3) == "f"
    assert s((f // 8) * 16 + (f % 8) * 2 + 1) == "f * 2 + 1"


# ---------------------------------------------------------------- min/max, logic, guards

def test_min_max():
    assert s(Min(x, x)) == "x"
    assert s(Min(x + 1, x)) == "x"
    assert s(Max(x + 1, x)) == "x + 1"
    assert s(Max(i, c(5)), {i: (0, 4)}) == "5"
    assert s(Min(i, c(5)), {i: (0, 9)}) == "min(i, 5)"


def test_comparisons():
    r = {i: (0, 2), j: (0, 31)}
    assert simplify(i * 32 + j < 100, r).value is True
    assert simplify(i * 32 + j < 0, r).value is False
    assert s(i * 32 + j < 100, {i: (0, 3), j: (0, 31)}) == "i * 32 + j < 100"
    assert s(i - 1 >= 0) == "1 <= i"
    assert s(x + 3 < y + 1) == "x + 2 < y"
    assert simplify((x + 1) == (x + 1)).value is True
    assert simplify((x + 1) != x).value is True
    assert s(Not(i < j)) == "j <= i"


def test_logic_and_select():
    r = {i: (0, 3)}
    assert s((i < 10) & (x < y), r) == "x < y"
    assert simplify((i < 10) | (x < y), r).value is True
    assert simplify((i > 10) & (x < y), r).value is False
    assert s(Select(i < 100, x, y), r) == "x"
    assert s(Select(x < y, i + 1, 1 + i)) == "i + 1"
    assert s(Not(Not(x < y))) == "x < y"


def test_non_integer_parts_kept():
    a = Var("a", "float32")
    buf = Buffer("B", (16,), "float32")
    e = Call("exp", [Load(buf, i * 4 + j - i * 4) + a * 1.0], "float32")
    assert s(e) == "exp(B[j] + a * 1.0)"
    assert s(a + 1.0 + 2.0) == "a + 1.0 + 2.0"
    ib = Buffer("I", (8,), "int64")
    assert s(Load(ib, x) + 1 - 1) == "I[x]"


# ---------------------------------------------------------------- bounds

def test_const_bound():
    assert const_bound(i * 8 + j, {i: (0, 3), j: (0, 7)}) == (0, 31)
    assert const_bound((i * 8 + j) - i * 8, {i: (0, 3), j: (0, 7)}) == (0, 7)
    assert const_bound((i * 8 + j) // 3, {i: (0, 3), j: (0, 7)}) == (0, 10)
    assert const_bound(x % 5, {}) == (0, 4)
    assert const_bound(x * y, {x: (-2, 3), y: (0, 4)}) == (-8, 12)
    assert const_bound(x + 1, {}) == (-math.inf, math.inf)
    assert const_bound(Select(x < 0, c(2), c(9)), {}) == (2, 9)
    assert const_bound(Min(x, c(4)), {x: (0, 10)}) == (0, 4)


def test_prove():
    r = {i: (0, 9)}
    assert prove((i >= 0) & (i < 10), r)
    assert not prove(i < 9, r)
    assert not prove(x < 3, r)
    assert prove((x < 3) | (i < 10), r)
    assert prove(Not(i > 9), r)


def test_symbolic_bound():
    lo, hi = symbolic_bound(io * 8 + ii + ki, {ii: (0, 3), ki: (0, 2)})
    assert (str(lo), str(hi)) == ("io * 8", "io * 8 + 5")
    assert simplify(hi - lo).value == 5
    lo, hi = symbolic_bound((fo * 16 + fi) // 8, {fi: (0, 15)})
    assert (str(lo), str(hi)) == ("fo * 2", "fo * 2 + 1")
    lo, hi = symbolic_bound((fo * 8 + fi) % 16, {fi: (0, 7)})
    assert simplify(hi - lo).value == 7
    lo, hi = symbolic_bound((fo * 16 + fi) % 8, {fi: (0, 15)})
    assert (str(lo), str(hi)) == ("0", "7")
    lo, hi = symbolic_bound(io * 4 - ii, {ii: (0, n - 1)})
    assert (str(lo), str(hi)) == ("io * 4 - n + 1", "io * 4")
    lo, hi = symbolic_bound(Min(io * 4 + ii, n), {ii: (0, 3)})
    assert (str(lo), str(hi)) == ("min(io * 4, n)", "min(io * 4 + 3, n)")
    buf = Buffer("I", (8,), "int64")
    with pytest.raises(LowerError):
        symbolic_bound(Load(buf, ii), {ii: (0, n)})


def test_linear_coeff():
    assert linear_coeff(i * 4 + j * 2 - i, i) == 3
    assert linear_coeff(j + 1, i) == 0
    assert linear_coeff(i * i, i) is None
    assert linear_coeff((i * 8 + j) // 8, i) == 1   # i + j // 8
    assert linear_coeff((i * 8 + j) // 8, j) is None


def test_evaluate():
    env = {x: -7, y: 2}
    assert evaluate(x // y, env) == -4 and evaluate(x % y, env) == 1
    assert evaluate(Select(x < y, x, y), env) == -7
    assert evaluate(Cast("int64", c(-2.5)), env) == -2
    assert evaluate(Max(x, y) + Min(x, y), env) == -5
    assert not evaluate(Not(x < y), env)


# ---------------------------------------------------------------- random equivalence

RANGES = {x: (0, 15), y: (-4, 9), i: (0, 3), n: (1, 4)}
FREE = Var("w")   # never given a range: simplify must treat it as unknown
ALL_VARS = list(RANGES) + [FREE]

leaf = st.one_of(st.sampled_from(ALL_VARS), st.integers(-6, 12).map(c))


def _grow(sub):
    pos = st.integers(1, 8).map(c)
    return st.one_of(
        st.tuples(sub, sub).map(lambda t: t[0] + t[1]),
        st.tuples(sub, sub).map(lambda t: t[0] - t[1]),
        st.tuples(sub, st.integers(-3, 4)).map(lambda t: t[0] * t[1]),
        st.tuples(sub, sub).map(lambda t: t[0] * t[1]),
        st.tuples(sub, pos).map(lambda t: FloorDiv(t[0], t[1])),
        st.tuples(sub, pos).map(lambda t: FloorMod(t[0], t[1])),
        sub.map(lambda e: FloorDiv(e, n)),
        sub.map(lambda e: FloorMod(e, n)),
        st.tuples(sub, sub).map(lambda t: Min(t[0], t[1])),
        st.tuples(sub, sub).map(lambda t: Max(t[0], t[1])),
        st.tuples(sub, sub, sub, sub).map(lambda t: Select(t[0] < t[1], t[2], t[3])),
    )


exprs = st.recursive(leaf, _grow, max_leaves=10)
points = st.fixed_dictionaries({v: st.integers(lo, hi) for v, (lo, hi) in RANGES.items()}
                               | {FREE: st.integers(-20, 20)})


@settings(max_examples=400, deadline=None)
@given(exprs, points)
def test_simplify_preserves_value(e, env):
    want = evaluate(e, env)
    got = simplify(e, RANGES)
    assert evaluate(got, env) == want, f"{e}  ->  {got}"
    assert evaluate(simplify(e), env) == want
    assert same(simplify(got, RANGES), got), f"not idempotent: {got} -> {simplify(got, RANGES)}"
    lo, hi = const_bound(e, RANGES)
    assert lo <= want <= hi


@settings(max_examples=300, deadline=None)
@given(exprs, exprs, points)
def test_prove_is_sound(a, b, env):
    for cond in (a < b, a <= b, a == b, a != b, (a < b) | (b <= a)):
        if prove(cond, RANGES):
            assert evaluate(cond, env), f"proved false fact {cond}"


@settings(max_examples=200, deadline=None)
@given(exprs, points)
def test_symbolic_bound_contains_all_values(e, env):
    relax = {x: (c(0), c(15)), i: (c(0), c(3))}
    lo, hi = symbolic_bound(e, relax, {y: RANGES[y], n: RANGES[n]})
    lo_v, hi_v = evaluate(lo, env), evaluate(hi, env)
    for xv in range(0, 16, 3):
        for iv in range(4):
            v = evaluate(e, {**env, x: xv, i: iv})
            assert lo_v <= v <= hi_v, f"{e} = {v} outside [{lo}, {hi}]"
