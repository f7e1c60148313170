"""Virtual threads: a loop bound to "vthread" expanded into the statements under it (TVM's
InjectVirtualThread).

A virtual thread is a tile one real thread computes in turns with its others, so that
the tiles of a thread lie far apart (vthread-strided accesses to shared memory avoid bank
conflicts). The loop is pushed inward: a statement that does not depend on it runs once
(a shared-memory fetch, which serves every virtual thread, or a barrier, which must stay
where every thread reaches it), a loop, allocation, branch or sequence is entered, and a
statement that depends on it is wrapped in an unrolled loop over the virtual threads.
Buffers allocated under the loop get one copy per virtual thread (`vt * size + index`),
unless they are shared and no virtual thread writes its own part; the loops it becomes
are called `vt`.
"""
from __future__ import annotations

from ..ir.expr import Const, Expr, Load, Var, const, transform, walk
from ..ir.stmt import Allocate, Buffer, For, IfThenElse, Prefetch, Seq, Stmt, Store, map_stmt, stmt_exprs, walk_stmt


def inject_virtual_threads(body: Stmt) -> Stmt:
    """`body` with every vthread loop expanded (inner ones first)."""
    if not any(isinstance(s, For) and s.thread_tag == "vthread" for s in walk_stmt(body)):
        return body
    return map_stmt(body, lambda s: _expand(s) if isinstance(s, For) and s.thread_tag == "vthread" else None)


def _uses(s: Stmt, var: Var) -> bool:
    return any(n is var for st in walk_stmt(s) for e in stmt_exprs(st) for n in walk(e))


def _expand(loop: For) -> Stmt:
    if not isinstance(loop.extent, Const):
        return For(loop.var, loop.min, loop.extent, "serial", loop.body)
    vt, n = Var("vt"), loop.extent.value
    return _push(_copy_per_thread(loop.body, loop.var, vt, n), vt, n)


def _copy_per_thread(body: Stmt, v: Var, vt: Var, n: int) -> Stmt:
    """`body` in terms of `vt` (for `v`), each virtual thread with its own copy of the
    buffers allocated in it that it writes differently (local ones always; shared ones
    when a store depends on `v` or on another copied buffer)."""
    allocs = [s.buffer for s in walk_stmt(body) if isinstance(s, Allocate)]
    copied = {id(b) for b in allocs if b.scope != "shared"}
    changed = True
    while changed:
        changed = False
        for s in walk_stmt(body):
            if isinstance(s, Store) and id(s.buffer) not in copied and s.buffer in allocs:
                if any(n_ is v or (isinstance(n_, Load) and id(n_.buffer) in copied)
                       for e in (s.index, s.value) for n_ in walk(e)):
                    copied.add(id(s.buffer))
                    changed = True
    new = {id(b): Buffer(b.name, (n,) + b.shape, b.dtype, b.scope) for b in allocs if id(b) in copied}
    size = {id(b): b.size for b in allocs}

    def index(buf: Buffer, idx: Expr) -> Expr:
        return vt * const(size[id(buf)]) + idx

    def expr(e: Expr) -> Expr:
        def swap(x: Expr) -> Expr | None:
            if x is v:
                return vt
            if isinstance(x, Load) and id(x.buffer) in new:
                return Load(new[id(x.buffer)], index(x.buffer, x.index))
            return None
        return transform(e, swap)

    def rewrite(s: Stmt) -> Stmt | None:
        if isinstance(s, Allocate) and id(s.buffer) in new:
            return Allocate(new[id(s.buffer)], s.body)
        if isinstance(s, Store):
            idx = index(s.buffer, s.index) if id(s.buffer) in new else s.index
            return Store(new.get(id(s.buffer), s.buffer), expr(idx), expr(s.value))
        if isinstance(s, IfThenElse):
            return IfThenElse(expr(s.cond), s.then, s.orelse)
        if isinstance(s, For):
            return For(s.var, expr(s.min), expr(s.extent), s.kind, s.body, s.thread_tag)
        if isinstance(s, Prefetch):
            return Prefetch(s.buffer, expr(s.index))
        return None
    return map_stmt(body, rewrite)


def _push(s: Stmt, v: Var, n: int) -> Stmt:
    """`for v in range(n): s` with the loop as far inside `s` as it can go."""
    if not _uses(s, v):
        return s
    if isinstance(s, Seq):
        return Seq([_push(c, v, n) for c in s.stmts])
    if isinstance(s, Allocate):
        return Allocate(s.buffer, _push(s.body, v, n))
    if isinstance(s, IfThenElse) and not any(x is v for x in walk(s.cond)):
        return IfThenElse(s.cond, _push(s.then, v, n), None if s.orelse is None else _push(s.orelse, v, n))
    if (isinstance(s, For) and s.kind != "vectorized"
            and not any(x is v for e in (s.min, s.extent) for x in walk(e))):
        return For(s.var, s.min, s.extent, s.kind, _push(s.body, v, n), s.thread_tag)
    return For(v, const(0), const(n), "unrolled", s)
