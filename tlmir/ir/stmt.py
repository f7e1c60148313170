"""The loop IR: what lowering produces and every backend consumes.

Storage scopes (global / shared / local) and thread bindings are part of the IR from
the start so a GPU backend reads the same programs as the CPU one.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterator, Sequence

from .expr import Const, Expr, Var, expr_str

SCOPES = ("global", "shared", "local")
LOOP_KINDS = ("serial", "parallel", "vectorized", "unrolled", "thread_binding")
THREAD_TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z", "threadIdx.x", "threadIdx.y",
               "threadIdx.z", "vthread")


class Buffer:
    """A dense row-major array. Identity distinguishes buffers; `name` is for printing."""

    def __init__(self, name: str, shape: Sequence[int], dtype: str, scope: str = "global"):
        self.name, self.shape, self.dtype, self.scope = name, tuple(int(s) for s in shape), dtype, scope

    @property
    def size(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    def __repr__(self) -> str:
        return f"Buffer({self.name}, {self.shape}, {self.dtype}, {self.scope})"


class Stmt:
    def children(self) -> tuple["Stmt", ...]:
        return ()

    def __str__(self) -> str:
        return stmt_str(self)


@dataclass(eq=False)
class For(Stmt):
    var: Var
    min: Expr
    extent: Expr
    kind: str
    body: Stmt
    thread_tag: str | None = None

    def children(self):
        return (self.body,)


@dataclass(eq=False)
class Store(Stmt):
    buffer: Buffer
    index: Expr
    value: Expr


@dataclass(eq=False)
class Allocate(Stmt):
    buffer: Buffer
    body: Stmt

    def children(self):
        return (self.body,)


@dataclass(eq=False)
class IfThenElse(Stmt):
    cond: Expr
    then: Stmt
    orelse: Stmt | None = None

    def children(self):
        return (self.then,) if self.orelse is None else (self.then, self.orelse)


@dataclass(eq=False)
class Seq(Stmt):
    stmts: list = field(default_factory=list)

    def children(self):
        return tuple(self.stmts)


@dataclass(eq=False)
class Barrier(Stmt):
    """Synchronise the threads of a block (GPU shared memory)."""
    scope: str = "shared"


@dataclass(eq=False)
class Prefetch(Stmt):
    """Ask the cache for the line holding `buffer[index]`; values are unaffected. The index
    may fall outside the buffer: a prefetch never faults (the next panel after the last)."""
    buffer: Buffer
    index: Expr


def seq(*stmts: Stmt | None) -> Stmt:
    """A Seq with nested Seqs flattened and Nones dropped; a single statement stays itself."""
    out: list[Stmt] = []
    for s in stmts:
        if s is None:
            continue
        out.extend(s.stmts if isinstance(s, Seq) else [s])
    return out[0] if len(out) == 1 else Seq(out)


def guarded(s: Stmt, conds: list) -> Stmt:
    """`s` under the conjunction of `conds` (itself when there are none)."""
    if not conds:
        return s
    c = conds[0]
    for x in conds[1:]:
        c = c & x
    return IfThenElse(c, s)


def walk_stmt(s: Stmt) -> Iterator[Stmt]:
    yield s
    for c in s.children():
        yield from walk_stmt(c)


def map_stmt(s: Stmt, fn: Callable[[Stmt], Stmt | None]) -> Stmt:
    """Rebuild bottom-up; `fn` returns a replacement or None to keep the node. A node whose
    children all stay the same objects is kept itself, so `map_stmt(s, fn) is s` when `fn`
    replaced nothing (and `fn` can find a node by identity)."""
    if isinstance(s, For):
        body = map_stmt(s.body, fn)
        if body is not s.body:
            s = For(s.var, s.min, s.extent, s.kind, body, s.thread_tag)
    elif isinstance(s, Allocate):
        body = map_stmt(s.body, fn)
        if body is not s.body:
            s = Allocate(s.buffer, body)
    elif isinstance(s, IfThenElse):
        then = map_stmt(s.then, fn)
        orelse = None if s.orelse is None else map_stmt(s.orelse, fn)
        if then is not s.then or orelse is not s.orelse:
            s = IfThenElse(s.cond, then, orelse)
    elif isinstance(s, Seq):
        parts = [map_stmt(c, fn) for c in s.stmts]
        if any(a is not b for a, b in zip(parts, s.stmts)):
            s = seq(*parts)
    out = fn(s)
    return s if out is None else out


def stmt_exprs(s: Stmt) -> tuple[Expr, ...]:
    """The expressions held directly by one statement (not its children)."""
    if isinstance(s, For):
        return (s.min, s.extent)
    if isinstance(s, Store):
        return (s.index, s.value)
    if isinstance(s, IfThenElse):
        return (s.cond,)
    if isinstance(s, Prefetch):
        return (s.index,)
    return ()


@dataclass(eq=False)
class PrimFunc:
    """A lowered kernel: argument buffers (inputs then outputs) and a body."""
    name: str
    args: list
    body: Stmt

    def __str__(self) -> str:
        return func_str(self)


# ---------------------------------------------------------------- printing

def stmt_str(s: Stmt, indent: int = 0, names: dict | None = None) -> str:
    """`names` maps the loop variables in scope to their display names: a loop whose
    variable is named like one around it (a stage computed at a loop of a consumer with the
    same axis and split names) prints as `name_1`, `name_2`, ..."""
    names = {} if names is None else names
    pad = "  " * indent

    def ex(e: Expr) -> str:
        return expr_str(e, 0, names)
    if isinstance(s, Seq):
        return "\n".join(stmt_str(c, indent, names) for c in s.stmts)
    if isinstance(s, For):
        rng = (f"{ex(s.extent)}" if isinstance(s.min, Const) and s.min.value == 0
               else f"{ex(s.min)}, {ex(s.min + s.extent)}")
        kind = "" if s.kind == "serial" else f"  # {s.thread_tag or s.kind}"
        taken, name, k = set(names.values()), s.var.name, 0
        while name in taken:
            k += 1
            name = f"{s.var.name}_{k}"
        body = stmt_str(s.body, indent + 1, {**names, s.var: name})
        return f"{pad}for {name} in range({rng}):{kind}\n{body}"
    if isinstance(s, Store):
        return f"{pad}{s.buffer.name}[{ex(s.index)}] = {ex(s.value)}"
    if isinstance(s, Allocate):
        b = s.buffer
        head = f"{pad}{b.name} = allocate({list(b.shape)}, {b.dtype}, {b.scope})"
        return f"{head}\n{stmt_str(s.body, indent, names)}"
    if isinstance(s, IfThenElse):
        out = f"{pad}if {ex(s.cond)}:\n{stmt_str(s.then, indent + 1, names)}"
        if s.orelse is not None:
            out += f"\n{pad}else:\n{stmt_str(s.orelse, indent + 1, names)}"
        return out
    if isinstance(s, Barrier):
        return f"{pad}barrier({s.scope})"
    if isinstance(s, Prefetch):
        return f"{pad}prefetch({s.buffer.name}[{ex(s.index)}])"
    return f"{pad}<{type(s).__name__}>"


def func_str(f: PrimFunc) -> str:
    args = ", ".join(f"{b.name}: {b.dtype}{list(b.shape)}" for b in f.args)
    return f"def {f.name}({args}):\n{stmt_str(f.body, 1)}"
