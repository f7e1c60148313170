"""Software prefetch of the region a pack copies in the next iteration of its loop.

Why: a pack (`cache_read` into a buffer allocated inside a loop, the space's `pack` rule)
copies a panel of an input at every iteration of that loop. For dense 128x768x3072 the
panel is 96 KB of a 9.4 MB weight, so the copy waits on L3, and no hardware prefetcher can
guess which panel comes next. While the loop's main nest computes on panel p, prefetches
spread over that nest's iterations bring panel p + 1 into L2: 3% faster at 1 and 2 threads
(docs/history.md, "a prefetch of the next panel").

Taken: a loop L whose body (below its allocations) holds a copy nest `dst[..] = src[..]`
with `dst` allocated inside L, `src` a kernel argument, the source index affine with
constant non-negative strides in the copy's loops (constant extents), and depending on L.
The prefetches go into the heaviest loop nest after the copy (if it does at most
REUSE_LIMIT statements per copied element), down its chain of serial loops until at most
MAX_BURST prefetches per iteration cover the region, spread evenly over the iterations.
"""
from __future__ import annotations

import math

from ..ir import arith
from ..ir import expr as E
from ..ir import stmt as S
from ..ir.analysis import depends
from .exprs import elem_size

LINE_BYTES = 64  # cache line
MAX_BURST = 16   # prefetches per iteration of the loop that holds them, at most (unless the
                 # nest is too short): more iterations, with one each, only repeat lines
REUSE_LIMIT = 256  # prefetch a pack only where its consumer nest runs at most this many
                   # statements per copied element: beyond, the copy is too small a share of
                   # the time to be worth the prefetches (matmul 1024^3: 1024, 1% slower;
                   # dense 128x768x3072: 128, 3% faster; docs/history.md, "a prefetch of the next panel")


def add_prefetches(func: S.PrimFunc) -> S.PrimFunc:
    """`func` with prefetches of every pack's next panel (the same object when none apply)."""
    args = {id(b) for b in func.args}
    body = S.map_stmt(func.body, lambda s: _prefetch_in(s, args) if isinstance(s, S.For) else None)
    return func if body is func.body else S.PrimFunc(func.name, func.args, body)


def _prefetch_in(loop: S.For, args: set[int]) -> S.For:
    """`loop` with prefetches for each pack in its body (outside inner loops), if any."""
    body = _in_body(loop.body, loop, set(), args)
    return loop if body is loop.body else S.For(loop.var, loop.min, loop.extent, loop.kind, body,
                                                 loop.thread_tag)


def _in_body(s: S.Stmt, loop: S.For, local: set[int], args: set[int]) -> S.Stmt:
    """`s` (part of `loop`'s body, above any inner loop) with its packs' prefetches added to
    the heaviest loop nest that follows each pack."""
    if isinstance(s, S.Allocate):
        body = _in_body(s.body, loop, local | {id(s.buffer)}, args)
        return s if body is s.body else S.Allocate(s.buffer, body)
    if not isinstance(s, S.Seq):
        return s
    items = [_in_body(c, loop, local, args) for c in s.stmts]
    for k, item in enumerate(items):
        region = _next_region(item, loop, local, args)
        hosts = [j for j in range(k + 1, len(items)) if isinstance(items[j], S.For)]
        if region is None or not hosts:
            continue
        h = max(hosts, key=lambda j: _work(items[j]))
        if _work(items[h]) <= REUSE_LIMIT * _work(item):
            items[h] = _with_prefetches(items[h], *region)
    return s if all(a is b for a, b in zip(items, s.stmts)) else S.Seq(items)


def _next_region(item: S.Stmt, loop: S.For, local: set[int], args: set[int]):
    """(src buffer, base index, [(extent, stride)] outer dims, contiguous run in elements) of
    what copy nest `item` reads in the next iteration of `loop`, or None if it is not one."""
    loops, s = [], item
    while isinstance(s, S.For):
        if not (isinstance(s.min, E.Const) and isinstance(s.extent, E.Const)):
            return None
        loops.append(s)
        s = s.body
    if not loops or not isinstance(s, S.Store) or not isinstance(s.value, E.Load):
        return None
    src, idx = s.value.buffer, s.value.index
    if id(s.buffer) not in local or id(src) not in args or not depends(idx, loop.var):
        return None
    dims = []
    for f in loops:
        c = arith.linear_coeff(idx, f.var)
        if c is None or c < 0:
            return None
        if c and f.extent.value > 1:
            dims.append((c, f.extent.value))
    base = E.substitute(idx, {loop.var: loop.var + 1, **{f.var: f.min for f in loops}})
    dims.sort()
    run = 1
    if dims and dims[0][0] == 1:  # merge dimensions that continue the contiguous run
        run = dims.pop(0)[1]
        while dims and dims[0][0] == run:
            run *= dims.pop(0)[1]
    return src, base, [(n, c) for c, n in reversed(dims)], run


def _work(s: S.Stmt) -> int:
    """Statements executed by `s` (constant extents; others count once)."""
    if isinstance(s, S.For):
        n = s.extent.value if isinstance(s.extent, E.Const) else 1
        return n * _work(s.body)
    if isinstance(s, (S.Seq, S.Allocate, S.IfThenElse)):
        return sum(_work(c) for c in s.children())
    return 1


def _with_prefetches(host: S.For, src: S.Buffer, base: E.Expr, outer: list, run: int) -> S.Stmt:
    """`host` with the region prefetched from the body of the loop where its chain of serial
    loops first has enough iterations for at most MAX_BURST prefetches each.

    One contiguous run: iteration t of T fetches element t * run / T, so the fetches are
    spread evenly over the nest (a step of at most a line). Spread out they beat a line
    per iteration from the start: 3.4 / 3.9% against 2.5 / 1.1% faster at 1 / 2 threads
    (dense, docs/history.md, "a prefetch of the next panel"). Only the run's last line can be missed, when
    the run does not start on a line (prefetches are hints; the buffer's alignment is not
    known). Several runs: every run gets a point every line from its start and one past its
    end, which touches every line it overlaps whatever the alignment, and the points are
    spread over the iterations the same way."""
    per_line = max(1, LINE_BYTES // elem_size(src.dtype))
    run_points = -(-run // per_line) + (1 if outer else 0)
    points = run_points * math.prod(n for n, _ in outer)
    chain, trips, s = [], 1, host
    while isinstance(s, S.For) and s.kind == "serial" and isinstance(s.extent, E.Const):
        chain.append(s)
        trips *= s.extent.value
        if trips * MAX_BURST >= points:
            break
        s = _main_loop(s.body)
    if not chain or trips * MAX_BURST < points:
        return host  # the nest is too short to spread them over
    t: E.Expr = E.const(0)
    for f in chain:
        t = t * f.extent.value + (f.var - f.min)
    per_iter = -(-points // trips)
    if not outer:  # points are elements, a line apart when there are more points than trips
        vs = ([t * run // trips] if per_iter == 1 else
              [E.binary(E.Min, (t * per_iter + p) * per_line, run - 1) for p in range(per_iter)])
        stmts = [S.Prefetch(src, arith.simplify(base + v)) for v in vs]
    else:
        ns = ([t * points // trips] if per_iter == 1 else
              [E.binary(E.Min, t * per_iter + p, points - 1) for p in range(per_iter)])
        stmts = [S.Prefetch(src, arith.simplify(_point(n, base, outer, run_points, per_line))) for n in ns]
    return _insert(host, chain[-1], stmts)


def _main_loop(s: S.Stmt) -> S.Stmt | None:
    """The loop of a body that does most of its work (the body itself if it is a loop)."""
    if isinstance(s, S.For):
        return s
    if isinstance(s, S.Seq):
        loops = [c for c in s.stmts if isinstance(c, S.For)]
        return max(loops, key=_work) if loops else None
    return None


def _point(n: E.Expr, base: E.Expr, outer: list, run_points: int, per_line: int) -> E.Expr:
    """Element index of point `n` of a region of several runs: point n % run_points (a line
    apart) of run n // run_points, the runs counted with the innermost outer dimension fastest."""
    idx, q = base + n % run_points * per_line, n // run_points
    for k, (extent, stride) in enumerate(reversed(outer)):
        idx = idx + (q if k == len(outer) - 1 else q % extent) * stride
        q = q // extent
    return idx


def _insert(s: S.Stmt, target: S.For, stmts: list) -> S.Stmt:
    """`s` with `stmts` put first in the body of loop `target` (found by identity)."""
    return S.map_stmt(s, lambda n: S.For(n.var, n.min, n.extent, n.kind, S.seq(*stmts, n.body), n.thread_tag)
                      if n is target else None)
