"""Schedules: stages, loop-transforming primitives, and their recorded history.

A Schedule holds one Stage per operation. Primitives change a stage's loop structure
(split / fuse / reorder), annotate loops (vectorize / unroll / parallel / bind / pragma),
move stages (compute_at / compute_inline / compute_root) or add stages (cache_read /
cache_write / rfactor). Every primitive appends a `Step`, so any schedule prints,
serialises and replays (see steps.py). Loop orders are outermost first. Stages and axes
may be given by name (`s["C"].split("i", factor=8)`), so the printed history runs as
Python.
"""
from __future__ import annotations

from typing import Sequence

from ..errors import ScheduleError
from ..ir.expr import Reduce, TensorRead, transform
from ..ir.stmt import SCOPES, THREAD_TAGS
from ..ir.tensor import ComputeOp, IterVar, Operation, PlaceholderOp, Tensor, topo_ops
from ..runtime.target import SearchParams
from .relations import Fuse, Split, ceildiv
from .rfactor import rfactor_ops
from .steps import History, Step


class Stage:
    """How one operation is computed: its loop nest, annotations and attach point."""

    def __init__(self, op: Operation, sch: "Schedule", scope: str = "global"):
        self.op, self.origin_op, self.sch, self.scope = op, op, sch, scope
        self.name = op.name
        self.attach: tuple = ("root",)  # ("root",) | ("inline",) | ("at", Stage, IterVar)
        self._reset_loops()

    def _reset_loops(self) -> None:
        self.all_iter_vars = list(self.op.axis) + list(self.op.reduce_axis)
        self.leaf_iter_vars = list(self.all_iter_vars)
        self.relations: list = []
        self.iter_kind: dict = {}      # IterVar -> "parallel" | "vectorized" | "unrolled" | "thread_binding"
        self.thread_tag: dict = {}     # IterVar -> "blockIdx.x" ...
        self.pragmas: dict = {}        # IterVar -> {"auto_unroll_max_step": n}

    # ------------------------------------------------------------------ helpers
    @property
    def is_placeholder(self) -> bool:
        return isinstance(self.op, PlaceholderOp)

    def __repr__(self) -> str:
        return f"Stage({self.name})"

    def _record(self, prim: str, **args) -> None:
        self.sch.history.append(Step(prim, self.name, args))

    def _check_compute(self, prim: str) -> None:
        if self.is_placeholder:
            raise ScheduleError(f"{prim}: stage {self.name!r} is a placeholder (an input); "
                                f"only compute stages can be scheduled")

    def _leaf(self, iv: IterVar | str, prim: str) -> IterVar:
        """`iv` (an axis or its name) if it is a current loop of this stage."""
        self._check_compute(prim)
        if isinstance(iv, str):
            iv = self.find(iv)
        if not isinstance(iv, IterVar):
            raise ScheduleError(f"{prim} on stage {self.name!r}: expected an axis (IterVar), got {iv!r}")
        if iv not in self.leaf_iter_vars:
            where = ("it was split or fused already" if iv in self.all_iter_vars
                     else "it belongs to another stage")
            raise ScheduleError(f"{prim} on stage {self.name!r}: axis {iv.name!r} is not a current "
                                f"loop of the stage ({where}); loops: "
                                f"{[v.name for v in self.leaf_iter_vars]}")
        return iv

    def find(self, name: str) -> IterVar:
        """An axis of this stage by name (for replaying recorded steps)."""
        hits = [v for v in self.all_iter_vars if v.name == name]
        if len(hits) != 1:
            raise ScheduleError(f"stage {self.name!r} has {len(hits)} axes named {name!r}; "
                                f"axes: {[v.name for v in self.all_iter_vars]}")
        return hits[0]

    def _new_iv(self, name: str, extent: int, kind: str) -> IterVar:
        iv = IterVar(name, extent, kind)
        self.all_iter_vars.append(iv)
        return iv

    # --------------------------------------------------------- loop structure
    def split(self, iv: IterVar | str, factor: int | None = None, nparts: int | None = None):
        """Split a loop into (outer, inner); a non-divisible split gets a guard."""
        iv = self._leaf(iv, "split")
        if (factor is None) == (nparts is None):
            raise ScheduleError(f"split {self.name}.{iv.name}: give exactly one of factor= or nparts=")
        n = factor if factor is not None else nparts
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ScheduleError(f"split {self.name}.{iv.name}: factor/nparts must be a positive "
                                f"int, got {n!r}")
        f = min(n, iv.extent) if factor is not None else ceildiv(iv.extent, min(n, iv.extent))
        outer = self._new_iv(iv.name + ".outer", ceildiv(iv.extent, f), iv.kind)
        inner = self._new_iv(iv.name + ".inner", f, iv.kind)
        self.relations.append(Split(iv, outer, inner, f))
        k = self.leaf_iter_vars.index(iv)
        self.leaf_iter_vars[k:k + 1] = [outer, inner]
        self._record("split", axis=iv.name, factor=f)
        return outer, inner

    def tile(self, x: IterVar | str, y: IterVar | str, x_factor: int, y_factor: int):
        """TVM's tile: split both, order (xo, yo, xi, yi)."""
        xo, xi = self.split(x, factor=x_factor)
        yo, yi = self.split(y, factor=y_factor)
        self.reorder(xo, yo, xi, yi)
        return xo, yo, xi, yi

    def fuse(self, *ivs: IterVar | str) -> IterVar:
        """Fuse adjacent loops (outermost first) into one."""
        if len(ivs) < 2:
            raise ScheduleError(f"fuse on stage {self.name!r} needs at least two axes")
        ivs = tuple(self._leaf(iv, "fuse") for iv in ivs)
        out = ivs[0]
        for iv in ivs[1:]:
            k = self.leaf_iter_vars.index(out)
            if k + 1 >= len(self.leaf_iter_vars) or self.leaf_iter_vars[k + 1] is not iv:
                raise ScheduleError(f"fuse on stage {self.name!r}: {out.name!r} and {iv.name!r} are "
                                    f"not adjacent loops (outer then inner); loops: "
                                    f"{[v.name for v in self.leaf_iter_vars]}")
            if out.kind != iv.kind:
                raise ScheduleError(f"fuse on stage {self.name!r}: cannot fuse {out.kind} axis "
                                    f"{out.name!r} with {iv.kind} axis {iv.name!r}")
            fused = self._new_iv(f"{out.name}.{iv.name}.fused", out.extent * iv.extent, out.kind)
            self._move_attached(out, iv, fused)
            self.relations.append(Fuse(out, iv, fused))
            self.leaf_iter_vars[k:k + 2] = [fused]
            out = fused
        self._record("fuse", axes=[iv.name for iv in ivs])
        return out

    def _move_attached(self, outer: IterVar, inner: IterVar, fused: IterVar) -> None:
        """Stages attached at the inner loop of a fuse move to the fused loop (same region);
        one attached at the outer loop would be split apart, so that fuse is refused."""
        for st in self.sch.stages:
            if st.attach[0] == "at" and st.attach[1] is self:
                if st.attach[2] is outer:
                    raise ScheduleError(f"fuse on stage {self.name!r}: stage {st.name!r} is attached at "
                                        f"{outer.name!r}, which is not the innermost fused loop")
                if st.attach[2] is inner:
                    st.attach = ("at", self, fused)

    def reorder(self, *ivs: IterVar | str) -> None:
        """Put the given loops, in the order given, into the positions they occupy."""
        ivs = tuple(self._leaf(iv, "reorder") for iv in ivs)
        if len(set(map(id, ivs))) != len(ivs):
            raise ScheduleError(f"reorder on stage {self.name!r}: an axis is repeated "
                                f"{[iv.name for iv in ivs]}")
        pos = sorted(self.leaf_iter_vars.index(iv) for iv in ivs)
        for p, iv in zip(pos, ivs):
            self.leaf_iter_vars[p] = iv
        self._record("reorder", axes=[iv.name for iv in ivs])

    # ------------------------------------------------------------ annotations
    def _annotate(self, iv: IterVar | str, kind: str, tag: str | None = None) -> IterVar:
        iv = self._leaf(iv, kind)
        if kind in ("parallel", "vectorized", "thread_binding") and iv.kind == "reduce" and tag != "threadIdx.x":
            raise ScheduleError(f"{kind} on stage {self.name!r}: {iv.name!r} is a reduction axis; "
                                f"iterations would race on the same output")
        self.iter_kind[iv] = kind
        if tag:
            self.thread_tag[iv] = tag
        return iv

    def vectorize(self, iv: IterVar | str) -> None:
        iv = self._annotate(iv, "vectorized")
        self._record("vectorize", axis=iv.name)

    def unroll(self, iv: IterVar | str) -> None:
        iv = self._annotate(iv, "unrolled")
        self._record("unroll", axis=iv.name)

    def parallel(self, iv: IterVar | str) -> None:
        iv = self._annotate(iv, "parallel")
        self._record("parallel", axis=iv.name)

    def bind(self, iv: IterVar | str, tag: str) -> None:
        if tag not in THREAD_TAGS:
            raise ScheduleError(f"bind on stage {self.name!r}: unknown thread tag {tag!r}; "
                                f"expected one of {THREAD_TAGS}")
        iv = self._annotate(iv, "thread_binding", tag)
        self._record("bind", axis=iv.name, tag=tag)

    def pragma(self, iv: IterVar | str, name: str, value: int) -> None:
        iv = self._leaf(iv, "pragma")
        if name != "auto_unroll_max_step":
            raise ScheduleError(f"pragma on stage {self.name!r}: unknown pragma {name!r}; "
                                f"supported: 'auto_unroll_max_step'")
        if not isinstance(value, int) or value < 0:
            raise ScheduleError(f"pragma {name} on {self.name}.{iv.name}: value must be an int >= 0")
        if value > SearchParams.max_unroll:
            raise ScheduleError(f"pragma {name} on {self.name}.{iv.name}: {value} is over the limit of "
                                f"{SearchParams.max_unroll} unrolled iterations (SearchParams.max_unroll)")
        self.pragmas.setdefault(iv, {})[name] = value
        self._record("pragma", axis=iv.name, name=name, value=value)

    # -------------------------------------------------------------- placement
    def compute_at(self, parent: "Stage", iv: IterVar | str) -> None:
        """Compute this stage inside `parent`'s loop `iv`, only the region that loop needs."""
        self._check_compute("compute_at")
        if not isinstance(parent, Stage):
            raise ScheduleError(f"compute_at on stage {self.name!r}: parent must be a stage (s[T])")
        iv = parent._leaf(iv, f"compute_at({self.name})")
        if parent is self:
            raise ScheduleError(f"compute_at: stage {self.name!r} cannot be attached to itself")
        p = parent
        while p.attach[0] == "at":
            p = p.attach[1]
            if p is self:
                raise ScheduleError(f"compute_at: attaching {self.name!r} at {parent.name}.{iv.name} "
                                    f"makes a cycle ({parent.name!r} is already inside {self.name!r})")
        if parent in self.sch.producers_of(self, transitive=True):
            raise ScheduleError(f"compute_at: {parent.name!r} is a producer of {self.name!r}; "
                                f"attaching {self.name!r} inside it makes a cycle")
        self.attach = ("at", parent, iv)
        self._record("compute_at", parent=parent.name, axis=iv.name)

    def compute_inline(self) -> None:
        self._check_compute("compute_inline")
        if self.op.reduce_axis:
            raise ScheduleError(f"compute_inline: stage {self.name!r} is a reduction and cannot be "
                                f"inlined into its readers")
        if self.origin_op in self.sch.outputs:
            raise ScheduleError(f"compute_inline: stage {self.name!r} is an output of the schedule")
        self.attach = ("inline",)
        self._record("compute_inline")

    def compute_root(self) -> None:
        self._check_compute("compute_root")
        self.attach = ("root",)
        self._record("compute_root")


class Schedule:
    """All stages of a computation, in topological order (inputs first)."""

    def __init__(self, outputs: Sequence[Tensor]):
        self.outputs = [t.op for t in outputs]
        self.history: History = History()
        self.stages: list[Stage] = []
        self._map: dict[int, Stage] = {}
        for op in topo_ops(outputs):
            self._add(Stage(op, self))
        names: dict[str, int] = {}
        for st in self.stages:  # unique stage names keep recorded steps unambiguous
            n = names.get(st.name, 0)
            names[st.name] = n + 1
            if n:
                st.name = f"{st.name}_{n}"

    def _add(self, stage: Stage, before: Stage | None = None, after: Stage | None = None) -> None:
        if before is not None:
            self.stages.insert(self.stages.index(before), stage)
        elif after is not None:
            self.stages.insert(self.stages.index(after) + 1, stage)
        else:
            self.stages.append(stage)
        self._map[id(stage.op)] = stage

    def __getitem__(self, t) -> Stage:
        """The stage of a tensor, an operation or a stage name."""
        if isinstance(t, str):
            return self.stage(t)
        op = t.op if isinstance(t, Tensor) else t
        st = self._map.get(id(op))
        if st is None:
            raise ScheduleError(f"tensor {getattr(op, 'name', op)!r} is not part of this schedule")
        return st

    def stage(self, name: str) -> Stage:
        for st in self.stages:
            if st.name == name:
                return st
        raise ScheduleError(f"no stage named {name!r}; stages: {[s.name for s in self.stages]}")

    def producers_of(self, stage: Stage, transitive: bool) -> list[Stage]:
        out: list[Stage] = []
        todo = [stage]
        while todo:
            for t in todo.pop().op.inputs():
                p = self[t]
                if p not in out:
                    out.append(p)
                    if transitive:
                        todo.append(p)
        return out

    def readers_of(self, stage: Stage) -> list[Stage]:
        return [s for s in self.stages if stage in self.producers_of(s, transitive=False)]

    # --------------------------------------------------------- adding stages
    def cache_read(self, tensor: Tensor | str, scope: str, readers: Sequence,
                   layout: Sequence[int] | None = None) -> Tensor:
        """A copy of `tensor` in `scope` that `readers` read instead of the original.
        `layout` permutes the copy's dimensions (its dimension d is the tensor's dimension
        layout[d]), e.g. (1, 0) packs an NxK weight as KxN so a loop over n reads it
        contiguously; such a copy is named `T.pack` (a second copy of one scope: `T.shared_1`)."""
        src = self[tensor]
        if isinstance(tensor, str):
            tensor = src.op.output()
        ndim = len(tensor.shape)
        perm = list(range(ndim)) if layout is None else [int(d) for d in layout]
        if sorted(perm) != list(range(ndim)):
            raise ScheduleError(f"cache_read of {src.name!r}: layout {list(layout)!r} is not a "
                                f"permutation of the {ndim} dimensions")
        _check_scope(scope, "cache_read", src.name)
        rstages = [self[r] for r in readers]
        if not rstages:
            raise ScheduleError(f"cache_read of {src.name!r}: give at least one reader")
        for r in rstages:
            if src not in self.producers_of(r, transitive=False):
                raise ScheduleError(f"cache_read of {src.name!r}: stage {r.name!r} does not read it")
        axes = [IterVar(f"ax{d}", tensor.shape[p]) for d, p in enumerate(perm)]
        where = [0] * ndim  # tensor dimension -> cache dimension
        for d, p in enumerate(perm):
            where[p] = d
        name = f"{src.name}.{scope}" if layout is None else f"{src.name}.pack"
        taken = {st.name for st in self.stages}
        name = next(n for n in [name] + [f"{name}_{k}" for k in range(1, len(taken) + 2)] if n not in taken)
        op = ComputeOp(name, axes, TensorRead(tensor, [axes[where[p]].var for p in range(ndim)]))
        cache = op.output()
        for r in rstages:
            body = transform(r.op.body, lambda n: TensorRead(cache, [n.indices[p] for p in perm])
                             if isinstance(n, TensorRead) and self[n.tensor] is src else None)
            self._replace_op(r, ComputeOp(r.op.name, r.op.axis, body, getattr(r.op, "tag", "")))
        self._add(Stage(op, self, scope), after=src)
        args: dict = {"scope": scope, "readers": [r.name for r in rstages]}
        if layout is not None:
            args["layout"] = perm
        self.history.append(Step("cache_read", src.name, args))
        return cache

    def cache_write(self, tensor: Tensor | str, scope: str,
                    layout: Sequence[int] | None = None) -> Tensor:
        """Compute `tensor` into a `scope` buffer first; the stage becomes a copy out of it.
        `layout` permutes the buffer's dimensions as in cache_read (its dimension d is the
        tensor's dimension layout[d]): the buffer's axes come in that order, so tiling and
        vectorizing it follow it. (0, 2, 3, 1) accumulates an NCHW conv with its output
        channels last, the layout whose vectors a packed weight feeds."""
        st = self[tensor]
        st._check_compute("cache_write")
        _check_scope(scope, "cache_write", st.name)
        if any(r for r in st.relations if r.__class__ is Split and r.parent.kind == "reduce"
               or r.__class__ is Fuse and r.outer.kind == "reduce"):
            raise ScheduleError(f"cache_write of {st.name!r}: its reduction axes were already split "
                                f"or fused; call cache_write before transforming them")
        old = st.op
        ndim = len(old.axis)
        perm = list(range(ndim)) if layout is None else [int(d) for d in layout]
        if sorted(perm) != list(range(ndim)):
            raise ScheduleError(f"cache_write of {st.name!r}: layout {list(layout)!r} is not a "
                                f"permutation of the {ndim} dimensions")
        axes = [IterVar(f"{old.axis[p].name}.c", old.axis[p].extent) for p in perm]
        raxes = [IterVar(a.name, a.extent, "reduce") for a in old.reduce_axis]
        vmap = {a.var: b.var for a, b in zip([old.axis[p] for p in perm] + old.reduce_axis, axes + raxes)}
        rmap = dict(zip(map(id, old.reduce_axis), raxes))

        def rebind(n):
            if isinstance(n, Reduce):
                return Reduce(n.combiner, n.source, [rmap[id(a)] for a in n.axes], n.condition)
            return vmap.get(n) if n.__class__.__name__ == "Var" else None

        cache_op = ComputeOp(f"{st.name}.{scope}", axes, transform(old.body, rebind))
        cache = cache_op.output()
        self._replace_op(st, ComputeOp(old.name, old.axis,
                                       TensorRead(cache, [old.axis[p].var for p in perm])))
        st.leaf_iter_vars = [v for v in st.leaf_iter_vars if v.kind != "reduce"]
        self._add(Stage(cache_op, self, scope), before=st)
        args: dict = {"scope": scope}
        if layout is not None:
            args["layout"] = perm
        self.history.append(Step("cache_write", st.name, args))
        return cache

    def rfactor(self, tensor: Tensor | str, iv: IterVar | str) -> Tensor:
        """Turn reduction loop `iv` into a data-parallel axis of a new stage (TVM's rfactor)."""
        st = self[tensor]
        iv = st._leaf(iv, "rfactor")
        rf_op, new_op = rfactor_ops(st, iv)
        self._replace_op(st, new_op)
        st._reset_loops()
        self._add(Stage(rf_op, self), before=st)
        self.history.append(Step("rfactor", st.name, {"axis": iv.name}))
        return rf_op.output()

    def _replace_op(self, st: Stage, op: ComputeOp) -> None:
        st.op = op
        self._map[id(op)] = st


def _check_scope(scope: str, prim: str, name: str) -> None:
    if scope not in SCOPES:
        raise ScheduleError(f"{prim} of {name!r}: unknown scope {scope!r}; expected one of {SCOPES}")


def create_schedule(outputs) -> Schedule:
    """A default schedule (every stage at root, loops in definition order)."""
    outs = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
    for t in outs:
        if not isinstance(t, Tensor):
            raise ScheduleError(f"create_schedule expects tensors, got {t!r}")
    return Schedule(outs)
