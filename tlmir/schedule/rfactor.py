"""rfactor: split a reduction into a data-parallel partial stage and a final reduction."""
from __future__ import annotations

from ..errors import ScheduleError
from ..ir.expr import Reduce, Select, TensorRead, const, substitute
from ..ir.tensor import ComputeOp, IterVar
from .relations import Fuse, Split


def rfactor_ops(st, iv: IterVar) -> tuple[ComputeOp, ComputeOp]:
    """The ops for `st` after rfactor on its reduction loop `iv`: (partial, final).

    partial[iv, axes...] reduces over the stage's other reduction loops; final[axes...]
    reduces partial over iv. Non-divisible splits of reduction axes become conditions.
    """
    op = st.op
    if not op.reduce_axis or iv.kind != "reduce":
        raise ScheduleError(f"rfactor on stage {st.name!r}: {iv.name!r} is not a reduction loop")
    body: Reduce = op.body
    leaves = [v for v in st.leaf_iter_vars if v.kind == "reduce"]
    values = {id(v): v.var for v in leaves}
    preds = []
    for rel in reversed(st.relations):
        if isinstance(rel, Split) and rel.parent.kind == "reduce":
            val = values[id(rel.outer)] * rel.factor + values[id(rel.inner)]
            values[id(rel.parent)] = val
            if rel.parent.extent % rel.factor:
                preds.append(val < rel.parent.extent)
        elif isinstance(rel, Fuse) and rel.outer.kind == "reduce":
            f = values[id(rel.fused)]
            values[id(rel.outer)] = f // rel.inner.extent
            values[id(rel.inner)] = f % rel.inner.extent
    factor_axis = IterVar(iv.name, iv.extent)
    new_red = {id(v): IterVar(v.name, v.extent, "reduce") for v in leaves if v is not iv}
    new_sp = [IterVar(a.name, a.extent) for a in op.axis]
    leaf_map = {v.var: (factor_axis.var if v is iv else new_red[id(v)].var) for v in leaves}
    vmap = {a.var: substitute(values[id(a)], leaf_map) for a in op.reduce_axis}
    vmap.update({a.var: b.var for a, b in zip(op.axis, new_sp)})
    src = substitute(body.source, vmap)
    conds = [substitute(p, leaf_map) for p in preds]
    if body.condition is not None:
        conds.append(substitute(body.condition, vmap))
    cond = None
    for c in conds:
        cond = c if cond is None else cond & c
    raxes = list(new_red.values())
    if raxes:
        rf_body = Reduce(body.combiner, src, raxes, cond)
    else:
        rf_body = src if cond is None else Select(cond, src, const(body.identity(), src.dtype))
    rf_op = ComputeOp(f"{st.name}.rf", [factor_axis] + new_sp, rf_body)
    rv = IterVar(f"{iv.name}.v", iv.extent, "reduce")
    final = Reduce(body.combiner, TensorRead(rf_op.output(), [rv.var] + [a.var for a in op.axis]), [rv])
    return rf_op, ComputeOp(op.name, op.axis, final)

