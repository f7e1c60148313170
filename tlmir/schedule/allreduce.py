"""Cross-thread reduction: a reduction loop bound to threadIdx.x, lowered as TVM's allreduce.

Each thread of the block reduces its share of the reduction (its other reduction loops)
into a register, writes it to a shared buffer of one slot per thread, and the block folds
that buffer in halves (each step a thread loop, a barrier after it); thread 0 stores the
result. The steps are separate thread loops with barriers between them, so the loop
program means the same run serially (the interpreter) or by a block of threads (CUDA),
and every thread of the block reaches every barrier.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..ir.expr import Expr, Load, Var, const
from ..ir.stmt import Allocate, Barrier, Buffer, For, IfThenElse, Stmt, Store, guarded, seq


@dataclass
class ReduceParts:
    """A reduction stage's update `buffer[index] = combine(buffer[index], source)` (under
    `condition`, the reduction's `where`), the value it starts from, and the guards of its
    non-divisible splits (`spatial_guards`: those free of reduction variables)."""
    buffer: Buffer
    index: Expr
    combine: type
    source: Expr
    condition: Expr | None
    identity: Expr
    guards: list
    spatial_guards: list


def thread_reduce_leaf(st, leaves: list):
    """The reduction loop of stage `st` bound to a thread index, or None."""
    for v in leaves:
        if v.kind == "reduce" and st.thread_tag.get(v, "").startswith("threadIdx"):
            return v
    return None


def cross_thread_reduction(parts: ReduceParts, name: str, reduce_leaves: list, tx, threads: int,
                           make_loop: Callable[[object, Stmt], Stmt]) -> Stmt:
    """The statements that replace a stage's reduction loops (`reduce_leaves`, outermost
    first) when `tx` among them is bound to a thread index of `threads` threads;
    `make_loop(leaf, body)` makes the loop of a leaf as the stage's lowering would."""
    dtype = parts.buffer.dtype
    acc = Buffer(f"{name}.acc", (1,), dtype, "local")
    red = Buffer(f"{name}.red", (threads,), dtype, "shared")
    t: Var = tx.var
    zero = const(0)

    def on_threads(body: Stmt) -> Stmt:
        return make_loop(tx, body)

    update: Stmt = Store(acc, zero, parts.combine(Load(acc, zero), parts.source))
    if parts.condition is not None:
        update = IfThenElse(parts.condition, update)
    partial: Stmt = guarded(update, parts.guards)
    for v in reversed(reduce_leaves):
        if v is not tx:
            partial = make_loop(v, partial)
    steps: list[Stmt] = [on_threads(Allocate(acc, seq(Store(acc, zero, parts.identity), partial,
                                                     Store(red, t, Load(acc, zero))))), Barrier()]
    n = threads
    while n > 1:  # fold the upper half onto the lower (the middle slot of an odd count stays)
        half = (n + 1) // 2
        fold = Store(red, t, parts.combine(Load(red, t), Load(red, t + half)))
        steps += [on_threads(IfThenElse(t < n - half, fold)), Barrier()]
        n = half
    final = guarded(Store(parts.buffer, parts.index, Load(red, zero)), [t == 0] + parts.spatial_guards)
    return Allocate(red, seq(*steps, on_threads(final), Barrier()))
