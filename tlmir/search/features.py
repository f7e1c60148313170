"""Program features for the learned cost model (Ansor-style, one walk of the loop IR).

`program_features(func)` turns a lowered PrimFunc into a fixed-length float32 vector.
The unit of analysis is the *store*: every `Store` statement together with its loop
context (the enclosing `For` loops, outermost first) and the enclosing guards. For each
store we compute the per-store features in `STORE_FEATURES` (arithmetic counts weighted by
the iteration count, vectorization / unrolling / parallel annotations, and, for the
buffer written and every buffer read, strides, reuse and footprints). The program vector
is

    [ weighted mean over stores of STORE_FEATURES   (prefix "mean.")
    , max over stores of STORE_FEATURES             (prefix "max.")
    , PROGRAM_FEATURES                              (prefix "prog.") ]

where a store's weight is its share of the program's work (iterations x (1 + float
ops per iteration)). Counts, extents and byte sizes are log1p-transformed before the
aggregation (the `log` flag of each entry); fractions and flags stay raw.
`FEATURE_NAMES[k]` names entry k; `NUM_FEATURES == len(FEATURE_NAMES)`.

Access analysis: an index expression is decomposed into per-loop-variable coefficients
(exact for affine indices, as `arith.linear_coeff` would give; `x // c` contributes
coeff/c and `x % c` keeps the coefficients of `x` that are not multiples of c, i.e. the
*average* stride of div/mod indices; anything else — products of variables, loads,
min/max over two varying sides — marks the variable as unknown, treated as a dependence
with an irregular stride). From the coefficients of one access:
- stride of the innermost loop variable (0 = reuse, 1 = contiguous, large = strided),
  and of the innermost loop that is not unrolled (the `eff_*` features: unrolled loops
  become straight-line code, so that loop is the one LLVM auto-vectorizes);
- reuse: the product of extents of loops the index does not depend on (`reuse_ct`),
  and the bytes all the store's accesses touch inside the innermost such loop (the reuse
  distance, `reuse_dis_bytes`);
- unique elements / cache lines touched by the innermost k loops, for every k (a
  footprint: min(product of the dependent extents, address span), in 64-byte lines).
Summing footprints over a store's accesses gives, per loop level, the bytes one
iteration of that level touches; the deepest level fitting in the target's L1 / L2
(`HardwareParams.l1_kb` / `l2_kb`; 32 KiB / 1 MiB without a target) gives the traffic estimates `traffic_l1` / `traffic_l2` (that level's footprint times
the iterations of the loops outside it).
"""
from __future__ import annotations

import math

import numpy as np

from ..ir import expr as E
from ..ir import stmt as S
from ..ir.analysis import match_reduce_loop
from ..runtime.target import HardwareParams

DEFAULT_HW = HardwareParams(vector_lanes=16, l1_kb=32, l2_kb=1024)   # features without a target
LINE_BYTES = 64

# (name, log1p?) per store.
STORE_FEATURES: tuple[tuple[str, bool], ...] = (
    # arithmetic, each count x the store's iteration count
    ("float_addsub", True),
    ("float_mul", True),
    ("float_div", True),
    ("float_math", True),        # exp / log / tanh / ... calls
    ("compare", True),           # comparisons, min / max, boolean logic
    ("select", True),
    ("int_arith", True),         # integer + - * (index arithmetic)
    ("int_divmod", True),        # integer // and %
    # loop nest
    ("iters", True),             # product of the enclosing loop extents
    ("depth", False),            # number of enclosing loops
    ("inner_extent", True),      # innermost loop extent
    # vectorization
    ("vec_len", True),           # extent of the innermost vectorized loop (0 if none)
    ("vec_innermost", False),    # the vectorized loop is the store's innermost loop
    ("vec_effective", False),    # ... and the code generator can emit it as SIMD
    ("vec_lane_util", False),    # min(vec_len, hw_lanes) / hw_lanes
    ("vec_gather_frac", False),  # accesses neither broadcast nor contiguous in the vector loop
    # the effective innermost loop: the innermost loop not unrolled (unrolled loops become
    # straight-line code, so this is the loop LLVM strength-reduces and auto-vectorizes)
    ("eff_inner_extent", True),
    ("eff_st_stride", True),
    ("eff_ld_contig_frac", False),
    ("eff_ld_reuse_frac", False),
    ("eff_ld_strided_frac", False),
    ("eff_contig_all", False),   # every access has stride 0 or 1 in it
    ("eff_dense_frac", False),   # accesses touching a contiguous range inside it (incl. its unrolled body)
    # unrolling
    ("unroll_prod", True),
    ("unroll_num", False),
    # parallelism
    ("par_num", False),
    ("par_outer_ext", True),     # extent of the outermost parallel loop (the one that runs in parallel)
    ("par_outer_depth", False),  # 1 + its position in the nest (0: not parallel)
    ("work_per_task", True),     # iterations per parallel task
    # guards
    ("guards", False),           # enclosing IfThenElse count
    # the buffer written
    ("st_stride", True),         # |stride| in the innermost loop (unknown: buffer size)
    ("st_contig", False),
    ("st_inner_reuse", False),   # stride 0 in the innermost loop (accumulation in place)
    ("st_bytes", True),          # unique bytes written over the whole nest
    ("st_local", False),         # written buffer is a local / shared temporary
    ("st_reuse_ct", True),
    ("st_reuse_dis_bytes", True),
    # the buffers read
    ("n_loads", True),
    ("ld_bytes", True),          # sum over loads of unique bytes over the nest
    ("ld_stride_max", True),     # largest innermost |stride| among loads
    ("ld_contig_frac", False),
    ("ld_reuse_frac", False),    # loads with stride 0 in the innermost loop
    ("ld_strided_frac", False),  # loads with |stride| > 1 or irregular
    ("ld_reuse_ct_min", True),
    ("ld_reuse_dis_bytes_max", True),
    # footprints (all accesses of the store, cache-line granular)
    ("fp_inner1", True),
    ("fp_inner2", True),
    ("fp_inner3", True),
    ("fp_all", True),
    ("iters_in_l1", True),       # iterations of the deepest inner loops whose footprint fits L1
    ("traffic_l1", True),        # estimated bytes from beyond L1
    ("traffic_l2", True),        # estimated bytes from beyond L2
    ("flops_per_l1_byte", True),
)

PROGRAM_FEATURES: tuple[str, ...] = (
    "n_stores", "n_loops", "max_depth", "n_allocs", "alloc_local_bytes", "alloc_global_bytes",
    "total_flops", "total_iters", "total_traffic_l1", "total_traffic_l2", "n_parallel_regions",
    "arg_bytes", "n_guards",
)

STORE_FEATURE_NAMES = tuple(n for n, _ in STORE_FEATURES)
FEATURE_NAMES: tuple[str, ...] = (tuple("mean." + n for n in STORE_FEATURE_NAMES)
                                  + tuple("max." + n for n in STORE_FEATURE_NAMES)
                                  + tuple("prog." + n for n in PROGRAM_FEATURES))
NUM_FEATURES = len(FEATURE_NAMES)
_NS = len(STORE_FEATURES)
_LOG_MASK = np.array([lg for _, lg in STORE_FEATURES])
_IDX = {n: k for k, n in enumerate(STORE_FEATURE_NAMES)}
_PROG_LOG = np.array([n not in ("max_depth",) for n in PROGRAM_FEATURES])

# arithmetic categories
_ADDSUB, _MUL, _DIV, _MATH, _CMP, _SEL, _INT, _DIVMOD = range(8)
_FLOAT_CAT = {E.Add: _ADDSUB, E.Sub: _ADDSUB, E.Mul: _MUL, E.Div: _DIV, E.FloorDiv: _DIVMOD,
              E.FloorMod: _DIVMOD}
_INT_CAT = {E.Add: _INT, E.Sub: _INT, E.Mul: _INT, E.Div: _DIVMOD, E.FloorDiv: _DIVMOD,
            E.FloorMod: _DIVMOD}
_ANY_CAT = {E.Min: _CMP, E.Max: _CMP, E.LT: _CMP, E.LE: _CMP, E.EQ: _CMP, E.NE: _CMP,
            E.And: _CMP, E.Or: _CMP, E.Not: _CMP, E.Select: _SEL, E.Call: _MATH}
_FLOATS = frozenset(E.FLOAT_DTYPES)
_NAN = float("nan")


def _dtype_bytes(dtype: str) -> int:
    return {"bool": 1, "int8": 1, "float16": 2, "int32": 4, "float32": 4}.get(dtype, 8)


# ---------------------------------------------------------------- index coefficients

def _unknown(e: E.Expr) -> dict:
    return {n: _NAN for n in E.walk(e) if type(n) is E.Var}


def _coeffs(e: E.Expr) -> dict:
    """Var -> coefficient of `e` (constant part dropped); NaN where `e` is not affine in it."""
    t = type(e)
    if t is E.Var:
        return {e: 1.0}
    if t is E.Const:
        return {}
    if t is E.Add or t is E.Sub:
        a, b = _coeffs(e.a), _coeffs(e.b)
        if not a:
            return b if t is E.Add else {v: -c for v, c in b.items()}
        sign = 1.0 if t is E.Add else -1.0
        for v, c in b.items():
            a[v] = a.get(v, 0.0) + sign * c
        return a
    if t is E.Mul:
        if type(e.b) is E.Const:
            k = float(e.b.value)
            return {v: c * k for v, c in _coeffs(e.a).items()}
        if type(e.a) is E.Const:
            k = float(e.a.value)
            return {v: c * k for v, c in _coeffs(e.b).items()}
        return _unknown(e)
    if (t is E.FloorDiv or t is E.FloorMod) and type(e.b) is E.Const and e.b.value:
        k = float(e.b.value)
        a = _coeffs(e.a)
        if t is E.FloorDiv:
            return {v: c / k for v, c in a.items()}
        return {v: (0.0 if c == c and c % k == 0 else c) for v, c in a.items()}
    if t is E.Cast:
        return _coeffs(e.value)
    if t is E.Min or t is E.Max:
        a, b = _coeffs(e.a), _coeffs(e.b)
        if not b:
            return a
        if not a:
            return b
        return {v: (a.get(v, 0.0) if a.get(v, 0.0) == b.get(v, 0.0) else _NAN) for v in {**a, **b}}
    return _unknown(e)


# ---------------------------------------------------------------- the walk

class _Access:
    __slots__ = ("coef", "nbytes", "size", "local", "lines", "dense", "uniq_all")

    def __init__(self, buf: S.Buffer, index: E.Expr, loops: list):
        cd = _coeffs(index)
        self.coef = [cd.get(lp[0], 0.0) for lp in loops]
        self.nbytes = _dtype_bytes(buf.dtype)
        self.size = buf.size
        self.local = buf.scope != "global"
        # cache lines touched by the innermost k loops, k = 0..depth
        line_elems = max(1.0, LINE_BYTES / self.nbytes)
        max_lines = self.size * self.nbytes / LINE_BYTES + 1.0
        prod, span, known = 1.0, 1.0, True
        smin, smin_ext = math.inf, 1.0
        lines = [1.0]
        dense = [True]
        uniq = 1.0
        for k in range(len(loops) - 1, -1, -1):
            c, ext = self.coef[k], loops[k][1]
            if c != 0.0:
                prod *= ext
                if c != c:
                    known = False
                else:
                    a = abs(c)
                    span += a * (ext - 1)
                    if a < smin:
                        smin, smin_ext = a, ext
            uniq = min(prod, span) if known else prod
            dense.append(known and prod >= span)
            uniq = min(uniq, self.size)
            n = uniq
            if smin <= line_elems:
                n = min(n, uniq / max(1.0, min(line_elems / smin, smin_ext)))
            if known:
                n = min(n, span * self.nbytes / LINE_BYTES + 1.0)
            lines.append(max(1.0, min(n, max_lines)))
        self.lines = lines
        self.dense = dense
        self.uniq_all = uniq


def _value_ops(value: E.Expr, index: E.Expr, counts: list, loads: list) -> None:
    stack = [value, index]
    pop, push = stack.pop, stack.extend
    while stack:
        n = pop()
        t = type(n)
        if t is E.Load:
            loads.append(n)
            stack.append(n.index)
            continue
        if t is E.Var or t is E.Const:
            continue
        cat = _ANY_CAT.get(t)
        if cat is None:
            cat = (_FLOAT_CAT if n.dtype in _FLOATS else _INT_CAT).get(t)
        if cat is not None:
            counts[cat] += 1
        push(n.children())


def _depends(e: E.Expr, v: E.Var) -> bool:
    return any(n is v for n in E.walk(e))


class _Walker:
    def __init__(self, hw: HardwareParams):
        self.hw_lanes = max(1, int(hw.vector_lanes))
        self.l1_bytes, self.l2_bytes = hw.l1_kb * 1024, hw.l2_kb * 1024
        self.loops: list = []     # (var, extent, kind, guards at entry, vector body has nested loops)
        self.guards = 0
        self.rows: list = []
        self.weights: list = []
        self.flops = 0.0
        self.iters = 0.0
        self.traffic_l1 = 0.0
        self.traffic_l2 = 0.0
        self.n_loops = 0
        self.max_depth = 0
        self.n_allocs = 0
        self.alloc_local = 0.0
        self.alloc_global = 0.0
        self.par_regions = 0
        self.n_guards = 0
        self.in_parallel = 0

    def visit(self, s: S.Stmt) -> None:
        t = type(s)
        if t is S.Seq:
            for c in s.stmts:
                self.visit(c)
        elif t is S.For:
            ext = s.extent.value if type(s.extent) is E.Const else self._extent(s.extent)
            ext = float(max(1, ext))
            nested = False
            kind = s.kind
            if kind != "parallel" and match_reduce_loop(s) is not None:
                kind = "vectorized"  # the backend emits it as SIMD partial sums (reduction.py)
            if kind == "vectorized":
                nested = any(isinstance(x, (S.For, S.Allocate, S.Barrier)) for x in S.walk_stmt(s.body))
            self.n_loops += 1
            par = kind in ("parallel", "thread_binding")  # a GPU thread or block loop: parallel too
            if par and not self.in_parallel:
                self.par_regions += 1
            self.in_parallel += par
            self.loops.append((s.var, ext, kind, self.guards, nested))
            self.max_depth = max(self.max_depth, len(self.loops))
            self.visit(s.body)
            self.loops.pop()
            self.in_parallel -= par
        elif t is S.Store:
            self.store(s)
        elif t is S.Allocate:
            self.n_allocs += 1
            b = s.buffer
            nb = b.size * _dtype_bytes(b.dtype)
            if b.scope == "global":
                self.alloc_global += nb
            else:
                self.alloc_local += nb
            self.visit(s.body)
        elif t is S.IfThenElse:
            self.n_guards += 1
            self.guards += 1
            self.visit(s.then)
            if s.orelse is not None:
                self.visit(s.orelse)
            self.guards -= 1

    def _extent(self, e: E.Expr) -> int:
        from ..ir import arith
        ranges = {lp[0]: (0, int(lp[1]) - 1) for lp in self.loops}
        try:
            hi = arith.const_bound(e, ranges)[1]
            return int(hi) if math.isfinite(hi) else 1
        except Exception:  # noqa: BLE001 - a feature estimate must never fail
            return 1

    def store(self, s: S.Store) -> None:
        loops = self.loops
        depth = len(loops)
        exts = [lp[1] for lp in loops]
        iters = 1.0
        for x in exts:
            iters *= x
        counts = [0] * 8
        loads: list = []
        _value_ops(s.value, s.index, counts, loads)
        st = _Access(s.buffer, s.index, loops)
        lds = [_Access(ld.buffer, ld.index, loops) for ld in loads]
        accs = [st] + lds
        f = [0.0] * _NS
        ix = _IDX
        for name, cat in (("float_addsub", _ADDSUB), ("float_mul", _MUL), ("float_div", _DIV),
                          ("float_math", _MATH), ("compare", _CMP), ("select", _SEL),
                          ("int_arith", _INT), ("int_divmod", _DIVMOD)):
            f[ix[name]] = counts[cat] * iters
        fl_per_iter = counts[_ADDSUB] + counts[_MUL] + counts[_DIV] + counts[_MATH]
        f[ix["iters"]] = iters
        f[ix["depth"]] = depth
        f[ix["inner_extent"]] = exts[-1] if depth else 0.0

        # vectorization
        vpos = -1
        for k, lp in enumerate(loops):
            if lp[2] == "vectorized":
                vpos = k
        if vpos >= 0:
            vlen = loops[vpos][1]
            innermost = vpos == depth - 1
            eff = innermost and not loops[vpos][4] and loops[vpos][3] == self.guards
            if eff and st.coef[vpos] == 0.0:
                v = loops[vpos][0]
                eff = not any(a.coef[vpos] != 0.0 for a in lds) and not _depends(s.value, v)
            f[ix["vec_len"]] = vlen
            f[ix["vec_innermost"]] = float(innermost)
            f[ix["vec_effective"]] = float(eff)
            f[ix["vec_lane_util"]] = min(vlen, self.hw_lanes) / self.hw_lanes
            f[ix["vec_gather_frac"]] = sum(1 for a in accs if a.coef[vpos] not in (0.0, 1.0)) / len(accs)
        epos = depth - 1
        while epos >= 0 and loops[epos][2] == "unrolled":
            epos -= 1
        if epos >= 0:
            def estride(a: _Access) -> float:
                c = a.coef[epos]
                return float(a.size) if c != c else abs(c)
            es = [estride(a) for a in accs]
            f[ix["eff_inner_extent"]] = exts[epos]
            f[ix["eff_st_stride"]] = es[0]
            if len(es) > 1:
                el = es[1:]
                f[ix["eff_ld_contig_frac"]] = sum(1 for x in el if x == 1.0) / len(el)
                f[ix["eff_ld_reuse_frac"]] = sum(1 for x in el if x == 0.0) / len(el)
                f[ix["eff_ld_strided_frac"]] = sum(1 for x in el if x > 1.0) / len(el)
            f[ix["eff_contig_all"]] = float(all(x <= 1.0 for x in es))
            lvl = depth - epos
            f[ix["eff_dense_frac"]] = sum(1 for a in accs if a.dense[lvl]) / len(accs)
        else:
            f[ix["eff_contig_all"]] = 1.0
            f[ix["eff_dense_frac"]] = 1.0

        # unrolling, parallelism
        uprod, unum = 1.0, 0
        pnum, pouter, pdepth = 0, 0.0, 0
        for k, lp in enumerate(loops):
            if lp[2] == "unrolled":
                uprod *= lp[1]
                unum += 1
            elif lp[2] == "parallel":
                pnum += 1
                if not pdepth:
                    pouter, pdepth = lp[1], k + 1
        f[ix["unroll_prod"]] = uprod if unum else 0.0
        f[ix["unroll_num"]] = unum
        f[ix["par_num"]] = pnum
        f[ix["par_outer_ext"]] = pouter
        f[ix["par_outer_depth"]] = pdepth
        f[ix["work_per_task"]] = iters / pouter if pouter else iters
        f[ix["guards"]] = self.guards

        # accesses
        def stride(a: _Access) -> float:
            if not depth:
                return 0.0
            c = a.coef[-1]
            return float(a.size) if c != c else abs(c)

        def reuse(a: _Access) -> tuple[float, int]:
            """(product of extents of loops `a` does not depend on, number of loops inside
            the innermost such loop — the reuse distance as a level — or -1 if none)."""
            ct, pos = 1.0, -1
            for k in range(depth):
                if a.coef[k] == 0.0:
                    ct *= exts[k]
                    pos = k
            return ct, (depth - 1 - pos if pos >= 0 else -1)

        # summed footprints per level (innermost k loops), in bytes
        fp = [0.0] * (depth + 1)
        for a in accs:
            for k, n in enumerate(a.lines):
                fp[k] += n
        fp = [x * LINE_BYTES for x in fp]

        ss = stride(st)
        f[ix["st_stride"]] = ss
        f[ix["st_contig"]] = float(ss == 1.0)
        f[ix["st_inner_reuse"]] = float(depth > 0 and ss == 0.0)
        f[ix["st_bytes"]] = st.uniq_all * st.nbytes
        f[ix["st_local"]] = float(st.local)
        ct, lvl = reuse(st)
        f[ix["st_reuse_ct"]] = ct
        f[ix["st_reuse_dis_bytes"]] = fp[lvl] if lvl >= 0 else 0.0

        nl = len(lds)
        f[ix["n_loads"]] = nl
        if nl:
            strides = [stride(a) for a in lds]
            f[ix["ld_bytes"]] = sum(a.uniq_all * a.nbytes for a in lds)
            f[ix["ld_stride_max"]] = max(strides)
            f[ix["ld_contig_frac"]] = sum(1 for x in strides if x == 1.0) / nl
            f[ix["ld_reuse_frac"]] = sum(1 for x in strides if x == 0.0) / nl
            f[ix["ld_strided_frac"]] = sum(1 for x in strides if x > 1.0) / nl
            rs = [reuse(a) for a in lds]
            f[ix["ld_reuse_ct_min"]] = min(r[0] for r in rs)
            f[ix["ld_reuse_dis_bytes_max"]] = max(fp[r[1]] if r[1] >= 0 else 0.0 for r in rs)

        for k in (1, 2, 3):
            f[ix[f"fp_inner{k}"]] = fp[min(k, depth)]
        f[ix["fp_all"]] = fp[depth]
        # deepest inner level fitting each cache; traffic = its footprint x outer iterations
        traffic = []
        in_l1 = 1.0
        for cap in (self.l1_bytes, self.l2_bytes):
            lvl = 0
            while lvl < depth and fp[lvl + 1] <= cap:
                lvl += 1
            inner = 1.0
            for k in range(depth - lvl, depth):
                inner *= exts[k]
            if cap == self.l1_bytes:
                in_l1 = inner
            traffic.append(fp[lvl] * (iters / inner))
        f[ix["iters_in_l1"]] = in_l1
        f[ix["traffic_l1"]] = traffic[0]
        f[ix["traffic_l2"]] = traffic[1]
        flops = fl_per_iter * iters
        f[ix["flops_per_l1_byte"]] = flops / max(traffic[0], 1.0)

        self.rows.append(f)
        self.weights.append(iters * (1.0 + fl_per_iter))
        self.flops += flops
        self.iters += iters
        self.traffic_l1 += traffic[0]
        self.traffic_l2 += traffic[1]


def store_features(func: S.PrimFunc, hw: HardwareParams | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per-store features before aggregation: ([n_stores, len(STORE_FEATURES)] with the
    log1p transform applied, [n_stores] work weights summing to 1)."""
    rows, w, _ = _walk(func, hw or DEFAULT_HW)
    return rows, w


def _walk(func: S.PrimFunc, hw: HardwareParams):
    wk = _Walker(hw)
    wk.visit(func.body)
    if wk.rows:
        rows = np.asarray(wk.rows, dtype=np.float64)
        rows[:, _LOG_MASK] = np.log1p(np.maximum(rows[:, _LOG_MASK], 0.0))
        w = np.asarray(wk.weights, dtype=np.float64)
        w = w / w.sum()
    else:
        rows, w = np.zeros((0, _NS)), np.zeros(0)
    return rows, w, wk


def program_features(func: S.PrimFunc, hw: HardwareParams | None = None) -> np.ndarray:
    """The feature vector of a lowered program (layout: FEATURE_NAMES), float32, finite,
    for the target `hw` (its SIMD width and cache sizes; default: AVX-512, 32 KiB / 1 MiB)."""
    rows, w, wk = _walk(func, hw or DEFAULT_HW)
    out = np.zeros(NUM_FEATURES, dtype=np.float64)
    if len(rows):
        out[:_NS] = w @ rows
        out[_NS:2 * _NS] = rows.max(axis=0)
    arg_bytes = float(sum(b.size * _dtype_bytes(b.dtype) for b in func.args))
    prog = np.array([len(wk.rows), wk.n_loops, wk.max_depth, wk.n_allocs, wk.alloc_local,
                     wk.alloc_global, wk.flops, wk.iters, wk.traffic_l1, wk.traffic_l2,
                     wk.par_regions, arg_bytes, wk.n_guards], dtype=np.float64)
    prog[_PROG_LOG] = np.log1p(prog[_PROG_LOG])
    out[2 * _NS:] = prog
    out = np.nan_to_num(out, nan=0.0, posinf=1e6, neginf=-1e6)
    return out.astype(np.float32)
