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


def expr_str(e: E.Expr, parent_prec: int = 0, names: dict | None = None) -> str:
    """`names`: display names of loop variables that would otherwise print alike (stmt_str)."""
    def sub(x: E.Expr, prec: int = 0) -> str:
        return expr_str(x, prec, names)
    if isinstance(e, E.Const):
        return _fmt_const(e)
    if isinstance(e, E.Var):
        return names.get(e, e.name) if names else e.name
    if isinstance(e, (E.Min, E.Max)):
        return f"{e.symbol}({sub(e.a)}, {sub(e.b)})"
    if isinstance(e, E.Binary):
        p = _PREC[type(e)]
        s = f"{sub(e.a, p)} {e.symbol} {sub(e.b, p + 1)}"
        return f"({s})" if p < parent_prec else s
    if isinstance(e, E.Not):
        return f"!{sub(e.a, 9)}"
    if isinstance(e, E.Select):
        return f"select({sub(e.cond)}, {sub(e.t)}, {sub(e.f)})"
    if isinstance(e, E.Cast):
        return f"{e.dtype}({sub(e.value)})"
    if isinstance(e, E.Call):
        return f"{e.op}({', '.join(sub(a) for a in e.args)})"
    if isinstance(e, E.TensorRead):
        return f"{e.tensor.name}[{', '.join(sub(i) for i in e.indices)}]"
    if isinstance(e, E.Reduce):
        axes = ", ".join(a.name for a in e.axes)
        cond = "" if e.condition is None else f", where={sub(e.condition)}"
        return f"{e.combiner}({sub(e.source)}, axis=[{axes}]{cond})"
    if isinstance(e, E.Load):
        return f"{e.buffer.name}[{sub(e.index)}]"
    return f"<{type(e).__name__}>"


def stmt_str(s: S.Stmt, indent: int = 0, names: dict | None = None) -> str:
    """`names` maps the loop variables in scope to their display names: a loop whose
    variable is named like one around it (a stage computed at a loop of a consumer with the
    same axis and split names) prints as `name_1`, `name_2`, ..."""
    names = {} if names is None else names
    pad = "  " * indent

    def ex(e: E.Expr) -> str:
        return expr_str(e, 0, names)
    if isinstance(s, S.Seq):
        return "\n".join(stmt_str(c, indent, names) for c in s.stmts)
    if isinstance(s, S.For):
        rng = (f"{ex(s.extent)}" if isinstance(s.min, E.Const) and s.min.value == 0
               else f"{ex(s.min)}, {ex(s.min + s.extent)}")
        kind = "" if s.kind == "serial" else f"  # {s.thread_tag or s.kind}"
        taken, name, k = set(names.values()), s.var.name, 0
        while name in taken:
            k += 1
            name = f"{s.var.name}_{k}"
        body = stmt_str(s.body, indent + 1, {**names, s.var: name})
        return f"{pad}for {name} in range({rng}):{kind}\n{body}"
    if isinstance(s, S.Store):
        return f"{pad}{s.buffer.name}[{ex(s.index)}] = {ex(s.value)}"
    if isinstance(s, S.Allocate):
        b = s.buffer
        head = f"{pad}{b.name} = allocate({list(b.shape)}, {b.dtype}, {b.scope})"
        return f"{head}\n{stmt_str(s.body, indent, names)}"
    if isinstance(s, S.IfThenElse):
        out = f"{pad}if {ex(s.cond)}:\n{stmt_str(s.then, indent + 1, names)}"
        if s.orelse is not None:
            out += f"\n{pad}else:\n{stmt_str(s.orelse, indent + 1, names)}"
        return out
    if isinstance(s, S.Barrier):
        return f"{pad}barrier({s.scope})"
    if isinstance(s, S.Prefetch):
        return f"{pad}prefetch({s.buffer.name}[{ex(s.index)}])"
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
