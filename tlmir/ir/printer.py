"""Readable text for expressions and loop programs: the main debugging view (`tlmir show`)."""
from __future__ import annotations

from . import expr as E
from . import stmt as S

_PREC = {E.Or: 1, E.And: 2, E.LT: 3, E.LE: 3, E.EQ: 3, E.NE: 3, E.Add: 4, E.Sub: 4,
         E.Mul: 5, E.Div: 5, E.FloorDiv: 5, E.FloorMod: 5}


def _fmt_const(c: E.Const) -> str:
    if c.dtype == "bool":
        return "True" if c.value else "False"
    if E.is_float(c.dtype):
        v = repr(c.value)
        return v if c.dtype == "float32" else f"{c.dtype}({v})"
    return str(c.value)


def expr_str(e: E.Expr, parent_prec: int = 0) -> str:
    if isinstance(e, E.Const):
        return _fmt_const(e)
    if isinstance(e, E.Var):
        return e.name
    if isinstance(e, (E.Min, E.Max)):
        return f"{e.symbol}({expr_str(e.a)}, {expr_str(e.b)})"
    if isinstance(e, E.Binary):
        p = _PREC[type(e)]
        s = f"{expr_str(e.a, p)} {e.symbol} {expr_str(e.b, p + 1)}"
        return f"({s})" if p < parent_prec else s
    if isinstance(e, E.Not):
        return f"!{expr_str(e.a, 9)}"
    if isinstance(e, E.Select):
        return f"select({expr_str(e.cond)}, {expr_str(e.t)}, {expr_str(e.f)})"
    if isinstance(e, E.Cast):
        return f"{e.dtype}({expr_str(e.value)})"
    if isinstance(e, E.Call):
        return f"{e.op}({', '.join(expr_str(a) for a in e.args)})"
    if isinstance(e, E.TensorRead):
        return f"{e.tensor.name}[{', '.join(expr_str(i) for i in e.indices)}]"
    if isinstance(e, E.Reduce):
        axes = ", ".join(a.name for a in e.axes)
        cond = "" if e.condition is None else f", where={expr_str(e.condition)}"
        return f"{e.combiner}({expr_str(e.source)}, axis=[{axes}]{cond})"
    if isinstance(e, E.Load):
        return f"{e.buffer.name}[{expr_str(e.index)}]"
    return f"<{type(e).__name__}>"


def stmt_str(s: S.Stmt, indent: int = 0) -> str:
    pad = "  " * indent
    if isinstance(s, S.Seq):
        return "\n".join(stmt_str(c, indent) for c in s.stmts)
    if isinstance(s, S.For):
        rng = (f"{expr_str(s.extent)}" if isinstance(s.min, E.Const) and s.min.value == 0
               else f"{expr_str(s.min)}, {expr_str(s.min + s.extent)}")
        kind = "" if s.kind == "serial" else f"  # {s.thread_tag or s.kind}"
        return f"{pad}for {s.var.name} in range({rng}):{kind}\n{stmt_str(s.body, indent + 1)}"
    if isinstance(s, S.Store):
        return f"{pad}{s.buffer.name}[{expr_str(s.index)}] = {expr_str(s.value)}"
    if isinstance(s, S.Allocate):
        b = s.buffer
        head = f"{pad}{b.name} = allocate({list(b.shape)}, {b.dtype}, {b.scope})"
        return f"{head}\n{stmt_str(s.body, indent)}"
    if isinstance(s, S.IfThenElse):
        out = f"{pad}if {expr_str(s.cond)}:\n{stmt_str(s.then, indent + 1)}"
        if s.orelse is not None:
            out += f"\n{pad}else:\n{stmt_str(s.orelse, indent + 1)}"
        return out
    if isinstance(s, S.Barrier):
        return f"{pad}barrier({s.scope})"
    return f"{pad}<{type(s).__name__}>"


def func_str(f: S.PrimFunc) -> str:
    args = ", ".join(f"{b.name}: {b.dtype}{list(b.shape)}" for b in f.args)
    return f"def {f.name}({args}):\n{stmt_str(f.body, 1)}"


def te_str(outputs) -> str:
    """The operator definition, one line per stage, producers first."""
    from .tensor import ComputeOp, topo_ops
    lines = []
    for op in topo_ops(outputs):
        if isinstance(op, ComputeOp):
            idx = ", ".join(a.name for a in op.axis)
            lines.append(f"{op.name}[{idx}] = {expr_str(op.body)}    # {op.dtype}{list(op.shape)}")
        else:
            lines.append(f"{op.name} = placeholder({list(op.shape)}, {op.dtype})")
    return "\n".join(lines)
