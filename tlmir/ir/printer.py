"""Readable text of operator definitions (`tlmir show`); expressions print with
`expr.expr_str`, loop programs with `stmt.stmt_str` / `func_str`."""
from __future__ import annotations

from .expr import expr_str
from .tensor import ComputeOp, topo_ops


def te_str(outputs) -> str:
    """The operator definition, one line per stage, producers first."""
    lines = []
    for op in topo_ops(outputs):
        if isinstance(op, ComputeOp):
            idx = ", ".join(a.name for a in op.axis)
            lines.append(f"{op.name}[{idx}] = {expr_str(op.body)}    # {op.dtype}{list(op.shape)}")
        else:
            lines.append(f"{op.name} = placeholder({list(op.shape)}, {op.dtype})")
    return "\n".join(lines)
