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

GPU programs (thread-bound loops) follow TVM: a shared-scope stage's region spans every
thread of the block (the thread and virtual-thread loops around its attach point are
relaxed), its readers wait for it at a barrier and it waits for them before it is
overwritten, a reduction loop bound to threadIdx.x becomes a cross-thread reduction
(schedule.allreduce) and virtual threads are expanded (schedule.vthread).
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field

from ..errors import LowerError, LoweringWarning, TlmirError
from ..ir import arith
from ..ir.expr import (Add, Const, Expr, Load, Max, Min, Reduce, TensorRead, Var, const, free_vars,
                       substitute, transform, walk)
from ..ir.stmt import Allocate, Barrier, Buffer, For, IfThenElse, PrimFunc, Seq, Stmt, Store, guarded, seq
from ..ir.tensor import Tensor
from ..runtime.target import SearchParams
from .allreduce import ReduceParts, cross_thread_reduction, thread_reduce_leaf
from .relations import Split, derive_trip_counts
from .schedule import Schedule, Stage
from .vthread import inject_virtual_threads

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
    root: dict | None = None                     # root axis var -> global value, once known


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
                info.buffer = Buffer(st.name, exts, st.op.dtype, self._scope(st))
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
        if self._scope(st) == "shared":
            relax.update(self._block_threads(parent, k))
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

    def _scope(self, st: Stage) -> str:
        """Where a stage's buffer lives: its own scope, or for a stage of the default
        (global) scope computed inside a GPU kernel, as TVM infers it: local to a thread
        inside a thread or virtual-thread loop, shared by the block inside only block loops."""
        if st.scope != "global" or st.attach[0] != "at":
            return st.scope
        tags, owner = set(), st
        while owner.attach[0] == "at":
            _, parent, iv = owner.attach
            leaves = parent.leaf_iter_vars
            tags |= {parent.thread_tag.get(v, "") for v in leaves[:leaves.index(iv) + 1]}
            owner = parent
        if any(t.startswith("threadIdx") or t == "vthread" for t in tags):
            return "local"
        return "shared" if any(t.startswith("blockIdx") for t in tags) else "global"

    def _block_threads(self, parent: Stage, k: int) -> dict:
        """The thread and virtual-thread loops at or above `parent`'s k-th loop, up the
        attach chain, each over its range: a shared buffer serves every thread of the block,
        so its region is their union (TVM's NeedRelax for shared scope)."""
        out, owner, last = {}, parent, k
        while True:
            dom = self.info[id(owner)].dom
            for v in owner.leaf_iter_vars[:last + 1]:
                tag = owner.thread_tag.get(v, "")
                if (tag.startswith("threadIdx") or tag == "vthread") and id(v) in dom:
                    out[v.var] = (const(0), const(dom[id(v)] - 1))
            if owner.attach[0] != "at":
                return out
            _, owner, iv = owner.attach
            last = owner.leaf_iter_vars.index(iv)

    def _inside(self, parent: Stage, k: int) -> list[Stage]:
        """Stages computed inside `parent`'s loop nest at or below its k-th loop."""
        out = [q for q in self.live if q.attach[0] == "at" and q.attach[1] is parent
               and parent.leaf_iter_vars.index(q.attach[2]) >= k]
        for q in list(out):
            out += self._inside(q, 0)
        return out

    def _root_values(self, info: _Info) -> dict:
        """Root axis var -> its global value (region start + local value). Computed once a
        stage: its region and loops are fixed by then, and every consumer asks again."""
        if info.root is None:
            st = info.stage
            info.root = {a.var: arith.simplify(m + info.value[id(a)], self.ranges)
                         for a, m in zip(st.op.axis, info.mins)}
            info.root.update({a.var: info.value[id(a)] for a in st.op.reduce_axis})
        return info.root

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

    def _reduce_parts(self, info: _Info) -> ReduceParts | None:
        """A reduction stage's update as parts (None for an element-wise stage)."""
        body = substitute(info.body, self._root_values(info))
        if not isinstance(body, Reduce):
            return None
        st = info.stage
        rvars = {v.var for v in st.leaf_iter_vars if v.kind == "reduce"}
        idx = arith.simplify(_flat([info.value[id(a)] for a in st.op.axis], info.buffer.shape), self.ranges)
        cond = None if body.condition is None else self._lower_expr(body.condition)
        return ReduceParts(info.buffer, idx, _COMBINE[body.combiner], self._lower_expr(body.source), cond,
                           body.identity(), info.guards, [g for g in info.guards if not (free_vars(g) & rvars)])

    def _stage_stmts(self, info: _Info) -> tuple[Stmt, Stmt | None]:
        """(update statement, reduction init statement or None)."""
        parts = self._reduce_parts(info)
        if parts is None:
            st = info.stage
            idx = arith.simplify(_flat([info.value[id(a)] for a in st.op.axis], info.buffer.shape), self.ranges)
            body = substitute(info.body, self._root_values(info))
            return guarded(Store(info.buffer, idx, self._lower_expr(body)), info.guards), None
        upd: Stmt = Store(parts.buffer, parts.index, parts.combine(Load(parts.buffer, parts.index), parts.source))
        if parts.condition is not None:
            upd = IfThenElse(parts.condition, upd)
        init = guarded(Store(parts.buffer, parts.index, parts.identity), parts.spatial_guards)
        return guarded(upd, parts.guards), init

    def nest(self, st: Stage) -> Stmt:
        info = self.info[id(st)]
        update, init = self._stage_stmts(info)
        leaves = self._loop_order(st)
        r0 = next((k for k, v in enumerate(leaves) if v.kind == "reduce"), None)
        cross = thread_reduce_leaf(st, leaves)

        def loops(pos: int) -> Stmt:
            if pos == len(leaves):
                return update
            if pos == r0 and cross is not None:
                self._check_cross_thread(st, leaves, r0)
                return cross_thread_reduction(self._reduce_parts(info), st.name, leaves[r0:], cross,
                                              info.dom[id(cross)], lambda v, body: self._for(st, v, body))
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
                # shared buffers: the block waits for them to be filled, and for every
                # reader to be done before the next iteration fills them again
                sync = [Barrier()] if any(self._scope(p) == "shared" for p in prods) else []
                inner = seq(*[self.nest(p) for p in prods], *sync, inner, *sync)
                for p in reversed(prods):
                    inner = Allocate(self.info[id(p)].buffer, inner)
            return self._for(st, v, inner)

        if not leaves:
            return update
        return loops(0)

    def _check_cross_thread(self, st: Stage, leaves: list, r0: int) -> None:
        """A cross-thread reduction runs once per block: its spatial loops are outside its
        reduction loops and bound to blocks (or serial), and nothing is computed inside it."""
        for v in leaves[:r0]:
            tag = st.thread_tag.get(v, "")
            if tag.startswith("threadIdx") or tag == "vthread":
                raise LowerError(f"stage {st.name!r}: its reduction is bound to threadIdx.x (a cross-thread "
                                 f"reduction), so its spatial loop {v.name!r} cannot be bound to {tag}")
        for v in leaves[r0:]:
            if v.kind != "reduce":
                raise LowerError(f"stage {st.name!r}: its reduction is bound to threadIdx.x (a cross-thread "
                                 f"reduction), so spatial loop {v.name!r} must come before its reduction loops")
            if self._attached(st, v):
                raise LowerError(f"stage {st.name!r}: {self._attached(st, v)[0].name!r} is computed inside "
                                 f"its cross-thread reduction loop {v.name!r}; attach it outside")

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
        body = inject_virtual_threads(seq(*[self.nest(s) for s in roots]))
        for s in reversed(roots):
            if s not in self.args:
                body = Allocate(self.info[id(s)].buffer, body)
        return PrimFunc(self.name, [self.info[id(s)].buffer for s in self.args], body)


def _elided(st: Stage, v, dom: dict) -> bool:
    """Loops of extent 1 disappear (their variable is 0), except those bound to a block or
    thread index (they set the launch shape); one virtual thread is no virtual thread."""
    return dom[id(v)] == 1 and (st.iter_kind.get(v) != "thread_binding" or st.thread_tag.get(v) == "vthread")


def _flat(indices: list, shape: tuple) -> Expr:
    out: Expr = const(0)
    for i, n in zip(indices, shape):
        out = out * n + i
    return out


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

