"""Lowering: a Schedule becomes a loop program (PrimFunc).

Four passes over the stages, as in TVM's ScheduleOps:
1. inline: substitute compute_inline'd stages into their readers;
2. bounds (consumers first): the region of each stage to compute — the whole tensor
   at root, or, for a stage attached at (consumer, loop), the part of it the consumer
   reads inside that loop (loops inside the attach point relaxed to their range);
3. loop domains: region extents pushed down through split/fuse to the leaf loops, each
   root axis written as an expression of the leaf loop variables, guards for
   non-divisible splits (the simplifier drops those it can prove);
4. nests: each stage's loops, attached stages emitted inside their attach loop,
   reductions initialised just outside their first reduction loop.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field

from ..errors import LowerError, LoweringWarning, TlmirError
from ..ir import arith
from ..ir.expr import (Add, Const, Expr, Load, Max, Min, Reduce, TensorRead, Var, const, free_vars,
                       substitute, transform, walk)
from ..ir.stmt import Allocate, Buffer, For, IfThenElse, PrimFunc, Seq, Stmt, Store, seq
from ..ir.tensor import Tensor
from ..runtime.target import SearchParams
from .relations import Split, derive_trip_counts
from .schedule import Schedule, Stage

_COMBINE = {"sum": Add, "max": Max, "min": Min}


@dataclass(eq=False)
class _Info:
    """What lowering knows about one stage."""
    stage: Stage
    body: Expr | None = None                     # with inlined producers substituted
    buffer: Buffer | None = None
    mins: list = field(default_factory=list)     # region start per spatial root axis
    dom: dict = field(default_factory=dict)      # id(IterVar) -> extent at lowering
    value: dict = field(default_factory=dict)    # id(root IterVar) -> local value in leaf vars
    guards: list = field(default_factory=list)


class _Lowerer:
    def __init__(self, sch: Schedule, args, name: str):
        self.serial: set[int] = set()  # vectorized loops lowered serially (see _loop_order)
        self.sch, self.name = sch, name
        self.ranges: dict[Var, tuple[int, int]] = {}
        self.info: dict[int, _Info] = {}
        self.args = self._arg_stages(args)
        self.live = self._live_stages()

    # ------------------------------------------------------------- validation
    def _arg_stages(self, args) -> list[Stage]:
        if not isinstance(args, (list, tuple)) or not args:
            raise LowerError("lower/build: args must be a non-empty list of tensors (inputs then outputs)")
        out = []
        for t in args:
            if not isinstance(t, Tensor):
                raise LowerError(f"lower/build: argument {t!r} is not a tensor")
            st = self.sch[t]
            if st in out:
                raise LowerError(f"lower/build: tensor {t.name!r} appears twice in the arguments")
            if st.attach[0] != "root":
                raise LowerError(f"stage {st.name!r} is an argument of the kernel, so it cannot be "
                                 f"{'inlined' if st.attach[0] == 'inline' else 'attached (compute_at)'}")
            out.append(st)
        for op in self.sch.outputs:
            if self.sch[op] not in out:
                raise LowerError(f"output tensor {op.name!r} is missing from the kernel arguments")
        return out

    def _live_stages(self) -> list[Stage]:
        live: set[int] = set()
        todo = [self.sch[op] for op in self.sch.outputs]
        while todo:
            st = todo.pop()
            if id(st) not in live:
                live.add(id(st))
                todo.extend(self.sch.producers_of(st, transitive=False))
        stages = [s for s in self.sch.stages if id(s) in live]
        for st in stages:
            if st.is_placeholder and st not in self.args:
                raise LowerError(f"input tensor {st.name!r} is read but missing from the kernel arguments")
        return stages

    # ---------------------------------------------------------------- pass 1
    def inline(self) -> None:
        for st in self.live:
            if st.is_placeholder:
                continue
            self.info[id(st)] = _Info(st, body=transform(st.op.body, self._inline_read))

    def _inline_read(self, n: Expr):
        if not isinstance(n, TensorRead):
            return None
        p = self.sch[n.tensor]
        if p.attach[0] != "inline":
            return None
        body = self.info[id(p)].body
        return substitute(body, {a.var: i for a, i in zip(p.op.axis, n.indices)})

    def _reads(self, st: Stage) -> list[TensorRead]:
        return [n for n in walk(self.info[id(st)].body) if isinstance(n, TensorRead)]

    # ---------------------------------------------------------------- pass 2+3
    def bounds(self) -> None:
        self.consumers: dict[int, list[Stage]] = {}
        computed = [s for s in self.live if not s.is_placeholder and s.attach[0] != "inline"]
        for st in computed:
            for r in self._reads(st):
                cons = self.consumers.setdefault(id(self.sch[r.tensor]), [])
                if st not in cons:
                    cons.append(st)
        for st in reversed(computed):
            info = self.info[id(st)]
            if st.attach[0] == "at":
                info.mins, exts = self._region(st)
            else:
                info.mins, exts = [const(0)] * len(st.op.axis), list(st.op.shape)
            for a, e in zip(st.op.axis, exts):
                info.dom[id(a)] = e
            for a in st.op.reduce_axis:
                info.dom[id(a)] = a.extent
            self._domains(info, exts)
            if st in self.args:
                info.buffer = Buffer(st.name, st.op.shape, st.op.dtype)
            else:
                info.buffer = Buffer(st.name, exts, st.op.dtype, st.scope)
        for st in self.args:
            if st.is_placeholder:
                self.info[id(st)] = _Info(st, buffer=Buffer(st.name, st.op.shape, st.op.dtype),
                                          mins=[const(0)] * len(st.op.shape))

    def _region(self, st: Stage) -> tuple[list, list]:
        """Region of `st` its attach loop needs: (mins, constant extents) per axis."""
        _, parent, iv = st.attach
        if parent.attach[0] == "inline" or id(parent) not in self.info:
            raise LowerError(f"stage {st.name!r} is attached to {parent.name!r}, which is "
                             f"{'inlined' if parent.attach[0] == 'inline' else 'not computed'}")
        if iv not in parent.leaf_iter_vars:
            raise LowerError(f"stage {st.name!r} is attached at {parent.name}.{iv.name}, which is no "
                             f"longer a loop of {parent.name!r} (split or fused after compute_at)")
        k = parent.leaf_iter_vars.index(iv)
        scope = self._inside(parent, k)
        cons = self.consumers.get(id(st), [])
        for c in cons:
            if c is not parent and c not in scope:
                raise LowerError(f"stage {st.name!r} is attached at {parent.name}.{iv.name} but is "
                                 f"also read by {c.name!r}, which is computed outside that loop")
        relax = {}  # loops inside the attach point take their whole range
        for owner, vs in [(parent, parent.leaf_iter_vars[k + 1:])] + [(q, q.leaf_iter_vars) for q in scope]:
            dom = self.info[id(owner)].dom
            relax.update({v.var: (const(0), const(dom[id(v)] - 1)) for v in vs if id(v) in dom})
        los: list = [None] * len(st.op.shape)
        his: list = [None] * len(st.op.shape)
        for c in cons:
            root = self._root_values(self.info[id(c)])
            for r in self._reads(c):
                if self.sch[r.tensor] is not st:
                    continue
                for d, idx in enumerate(r.indices):
                    lo, hi = arith.symbolic_bound(substitute(idx, root), relax, self.ranges)
                    los[d] = lo if los[d] is None else arith.simplify(Min(los[d], lo), self.ranges)
                    his[d] = hi if his[d] is None else arith.simplify(Max(his[d], hi), self.ranges)
        mins, exts = [], []
        for d, full in enumerate(st.op.shape):
            ext_e = arith.simplify(his[d] - los[d] + 1, self.ranges)
            ext = ext_e.value if isinstance(ext_e, Const) else arith.const_bound(ext_e, self.ranges)[1]
            if ext >= full or ext != ext or ext == float("inf"):
                mins.append(const(0))
                exts.append(full)
            else:
                mins.append(los[d])
                exts.append(max(int(ext), 1))
        return mins, exts

    def _inside(self, parent: Stage, k: int) -> list[Stage]:
        """Stages computed inside `parent`'s loop nest at or below its k-th loop."""
        out = [q for q in self.live if q.attach[0] == "at" and q.attach[1] is parent
               and parent.leaf_iter_vars.index(q.attach[2]) >= k]
        for q in list(out):
            out += self._inside(q, 0)
        return out

    def _root_values(self, info: _Info) -> dict:
        """Root axis var -> its global value (region start + local value)."""
        st = info.stage
        out = {a.var: arith.simplify(m + info.value[id(a)], self.ranges)
               for a, m in zip(st.op.axis, info.mins)}
        out.update({a.var: info.value[id(a)] for a in st.op.reduce_axis})
        return out

    def _domains(self, info: _Info, exts: list) -> None:
        st, dom = info.stage, info.dom
        derive_trip_counts(st.relations, dom)
        val = {id(v): (const(0) if _elided(st, v, dom) else v.var) for v in st.leaf_iter_vars}
        for v in st.leaf_iter_vars:
            self.ranges[v.var] = (0, dom[id(v)] - 1)
        for rel in reversed(st.relations):
            if isinstance(rel, Split):
                p = val[id(rel.outer)] * dom[id(rel.inner)] + val[id(rel.inner)]
                val[id(rel.parent)] = arith.simplify(p, self.ranges)
                if dom[id(rel.outer)] * dom[id(rel.inner)] > dom[id(rel.parent)]:
                    info.guards.append(val[id(rel.parent)] < dom[id(rel.parent)])
            else:
                f, n = val[id(rel.fused)], dom[id(rel.inner)]
                val[id(rel.outer)] = arith.simplify(f // n, self.ranges)
                val[id(rel.inner)] = arith.simplify(f % n, self.ranges)
        info.value = val
        for a, m, e, full in zip(st.op.axis, info.mins, exts, st.op.shape):
            if e < full:  # region may overhang the tensor at the edges
                g = m + val[id(a)]
                info.guards += [g >= 0, g < full]
        info.guards = [g for g in (arith.simplify(g, self.ranges) for g in info.guards)
                       if not (isinstance(g, Const) and g.value)]

    # ---------------------------------------------------------------- pass 4
    def _lower_expr(self, e: Expr) -> Expr:
        def read(n):
            if not isinstance(n, TensorRead):
                return None
            p = self.info[id(self.sch[n.tensor])]
            local = [i - m for i, m in zip(n.indices, p.mins)]
            return Load(p.buffer, _flat(local, p.buffer.shape))
        return arith.simplify(transform(e, read), self.ranges)

    def _stage_stmts(self, info: _Info) -> tuple[Stmt, Stmt | None]:
        """(update statement, reduction init statement or None)."""
        st = info.stage
        root = self._root_values(info)
        idx = _flat([info.value[id(a)] for a in st.op.axis], info.buffer.shape)
        idx = arith.simplify(idx, self.ranges)
        body = substitute(info.body, root)
        rvars = {v.var for v in st.leaf_iter_vars if v.kind == "reduce"}
        init = None
        if isinstance(body, Reduce):
            src = self._lower_expr(body.source)
            upd: Stmt = Store(info.buffer, idx, _COMBINE[body.combiner](Load(info.buffer, idx), src))
            if body.condition is not None:
                upd = IfThenElse(self._lower_expr(body.condition), upd)
            init = Store(info.buffer, idx, body.identity())
            init = _guard(init, [g for g in info.guards if not (free_vars(g) & rvars)])
        else:
            upd = Store(info.buffer, idx, self._lower_expr(body))
        return _guard(upd, info.guards), init

    def nest(self, st: Stage) -> Stmt:
        info = self.info[id(st)]
        update, init = self._stage_stmts(info)
        leaves = self._loop_order(st)
        r0 = next((k for k, v in enumerate(leaves) if v.kind == "reduce"), None)

        def loops(pos: int) -> Stmt:
            if pos == len(leaves):
                return update
            if pos == r0 and init is not None:
                init_nest = init
                for v in reversed([v for v in leaves[pos:] if v.kind != "reduce"]):
                    init_nest = self._for(st, v, init_nest)
                return seq(init_nest, loop(pos))
            return loop(pos)

        def loop(pos: int) -> Stmt:
            v = leaves[pos]
            inner = loops(pos + 1)
            prods = self._attached(st, v)
            if prods:
                inner = seq(*[self.nest(p) for p in prods], inner)
                for p in reversed(prods):
                    inner = Allocate(self.info[id(p)].buffer, inner)
            return self._for(st, v, inner)

        if not leaves:
            return update
        return loops(0)

    def _loop_order(self, st: Stage) -> list:
        """The stage's loops, outermost first. A vectorized loop with loops inside it is
        vectorized across them, as TVM does: its iterations write distinct elements, so it
        moves innermost and the inner loops (a reduction's too) run on vectors. Where a
        stage is computed inside it, or there are two, it runs serially (with a warning)."""
        leaves = list(st.leaf_iter_vars)
        vec = [k for k, v in enumerate(leaves) if st.iter_kind.get(v) == "vectorized"]
        if not vec or (vec == [len(leaves) - 1] and not self._attached(st, leaves[-1])):
            return leaves
        k = vec[0]
        if len(vec) == 1 and not any(self._attached(st, x) for x in leaves[k:]):
            return leaves[:k] + leaves[k + 1:] + [leaves[k]]
        for k in vec:
            self.serial.add(id(leaves[k]))
        warnings.warn(f"vectorize on stage {st.name!r}: {[leaves[k].name for k in vec]} cannot all be "
                      f"innermost (loops: {[x.name for x in leaves]}); lowered serially",
                      LoweringWarning, stacklevel=4)
        return leaves

    def _attached(self, st: Stage, iv) -> list[Stage]:
        return [p for p in self.live if p.attach[0] == "at" and p.attach[1] is st and p.attach[2] is iv]

    def _for(self, st: Stage, v, body: Stmt) -> Stmt:
        info = self.info[id(st)]
        kind = "serial" if id(v) in self.serial else st.iter_kind.get(v, "serial")
        if kind == "unrolled" and info.dom[id(v)] > SearchParams.max_unroll:
            raise LowerError(f"unroll of {st.name}.{v.name}: {info.dom[id(v)]} iterations, over the limit of "
                             f"{SearchParams.max_unroll} (SearchParams.max_unroll); split the loop first")
        loop = body if _elided(st, v, info.dom) else For(v.var, const(0), const(info.dom[id(v)]), kind,
                                                        body, st.thread_tag.get(v))
        step = st.pragmas.get(v, {}).get("auto_unroll_max_step", 0)
        return _auto_unroll(loop, step)[0] if step else loop

    def program(self) -> PrimFunc:
        self.inline()
        self.bounds()
        roots = [s for s in self.live if not s.is_placeholder and s.attach[0] == "root"]
        body = seq(*[self.nest(s) for s in roots])
        for s in reversed(roots):
            if s not in self.args:
                body = Allocate(self.info[id(s)].buffer, body)
        return PrimFunc(self.name, [self.info[id(s)].buffer for s in self.args], body)


def _elided(st: Stage, v, dom: dict) -> bool:
    """Loops of extent 1 disappear (their variable is 0), except GPU thread bindings."""
    return dom[id(v)] == 1 and st.iter_kind.get(v) != "thread_binding"


def _flat(indices: list, shape: tuple) -> Expr:
    out: Expr = const(0)
    for i, n in zip(indices, shape):
        out = out * n + i
    return out


def _guard(s: Stmt, conds: list) -> Stmt:
    if not conds:
        return s
    c = conds[0]
    for x in conds[1:]:
        c = c & x
    return IfThenElse(c, s)


def _auto_unroll(s: Stmt, max_step: int) -> tuple[Stmt, int]:
    """Unroll the innermost loops whose total trip count is at most `max_step`."""
    if isinstance(s, For):
        body, n = _auto_unroll(s.body, max_step)
        total = s.extent.value * n if isinstance(s.extent, Const) else max_step + 1
        kind = "unrolled" if s.kind == "serial" and total <= max_step else s.kind
        return For(s.var, s.min, s.extent, kind, body, s.thread_tag), total
    if isinstance(s, Seq):
        parts = [_auto_unroll(c, max_step) for c in s.stmts]
        return Seq([p for p, _ in parts]), sum(n for _, n in parts)
    if isinstance(s, Allocate):
        body, n = _auto_unroll(s.body, max_step)
        return Allocate(s.buffer, body), n
    if isinstance(s, IfThenElse):
        then, n = _auto_unroll(s.then, max_step)
        return IfThenElse(s.cond, then, s.orelse), n + 1
    return s, 1


def lower(sch: Schedule, args, name: str = "main") -> PrimFunc:
    """The loop program of a schedule; `args` are the kernel's tensors, inputs then outputs."""
    if not isinstance(sch, Schedule):
        raise LowerError(f"lower expects a Schedule, got {type(sch).__name__}")
    try:
        return _Lowerer(sch, args, name).program()
    except TlmirError:
        raise
    except RecursionError:
        raise LowerError(f"lowering {name!r}: expression nesting too deep") from None

