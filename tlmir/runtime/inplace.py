"""Kernels whose outputs overwrite inputs: `tlmir.build(..., inplace={out: in})`.

The loop program reads the input through the output's buffer and the compiled program gets
that array once, so no two of its pointer arguments alias (the CPU backend marks them
noalias). Only an output written by one statement that reads the input at the element it
writes, and nowhere else, can be in place: any other read could see an overwritten element.
"""
from __future__ import annotations

import numpy as np

from ..errors import ArgumentError, BuildError
from ..ir.expr import Load, same, transform, walk
from ..ir.stmt import For, IfThenElse, PrimFunc, Store, map_stmt, stmt_exprs, walk_stmt
from .backend import CompiledKernel, Timing, check_arguments, stored_buffers


def merge_inplace(func: PrimFunc, inplace: dict[int, int]) -> PrimFunc:
    """`func` with input `inplace[k]` read through output k's buffer and left out of the
    arguments, for every k; BuildError if a pair is not an output over an input of its
    shape and dtype, or the output could overwrite an element before it is read."""
    n, written = len(func.args), stored_buffers(func)
    if len(set(inplace.values())) != len(inplace):
        raise BuildError(f"{func.name}: inplace={inplace}: two outputs cannot overwrite the same input")
    swap = {}
    for out, inp in inplace.items():
        if not all(isinstance(k, int) and 0 <= k < n for k in (out, inp)):
            raise BuildError(f"{func.name}: inplace={inplace}: give argument positions 0..{n - 1}")
        o, i = func.args[out], func.args[inp]
        if id(o) not in written or id(i) in written:
            raise BuildError(f"{func.name}: inplace {{{out}: {inp}}}: argument {out} ({o.name}) must be an "
                             f"output and argument {inp} ({i.name}) an input")
        if (o.shape, o.dtype) != (i.shape, i.dtype):
            raise BuildError(f"{func.name}: {o.name} cannot overwrite {i.name} in place: {o.name} is "
                             f"{o.dtype}{list(o.shape)}, {i.name} is {i.dtype}{list(i.shape)}")
        swap[id(i)] = o

    def load(e):
        return Load(swap[id(e.buffer)], e.index) if isinstance(e, Load) and id(e.buffer) in swap else None

    def rewrite(s):
        if isinstance(s, Store):
            return Store(s.buffer, transform(s.index, load), transform(s.value, load))
        if isinstance(s, For):
            return For(s.var, transform(s.min, load), transform(s.extent, load), s.kind, s.body, s.thread_tag)
        if isinstance(s, IfThenElse):
            return IfThenElse(transform(s.cond, load), s.then, s.orelse)
        return None
    body = map_stmt(func.body, rewrite)

    for out, inp in inplace.items():
        o, i = func.args[out], func.args[inp]
        stores = [s for s in walk_stmt(body) if isinstance(s, Store) and s.buffer is o]
        reads = [e for s in walk_stmt(body) for x in stmt_exprs(s) for e in walk(x)
                 if isinstance(e, Load) and e.buffer is o]
        why = None
        if len(stores) != 1:
            why = f"{o.name} is written by {len(stores)} statements (a reduction, or a copy out of a cache)"
        elif not all(any(e is r for r in walk(stores[0].value)) and same(e.index, stores[0].index)
                     for e in reads):
            why = f"{i.name} is read at other elements than the one written, or before it is written"
        if why:
            raise BuildError(f"{func.name}: {o.name} cannot overwrite {i.name} in place: {why}; only an "
                             f"element-wise output (each element computed from the same element) can")
    return PrimFunc(func.name, [b for k, b in enumerate(func.args) if k not in inplace.values()], body)


class InPlaceKernel:
    """A kernel called with every argument, each in-place output given its input's array;
    the compiled program receives that array once."""

    def __init__(self, kernel: CompiledKernel, func: PrimFunc, inplace: dict[int, int]):
        self.kernel, self.func, self.inplace = kernel, func, dict(inplace)
        self._outputs = stored_buffers(func)

    @property
    def num_threads(self) -> int | None:
        return self.kernel.num_threads

    @num_threads.setter
    def num_threads(self, n: int | None) -> None:
        self.kernel.num_threads = n

    def __getattr__(self, name: str):
        return getattr(self.kernel, name)  # source, llvm_ir, assembly

    def _arrays(self, arrays: tuple) -> tuple:
        """The arrays the compiled program takes, after checking them at the caller's positions."""
        check_arguments(self.func, arrays, self._outputs, self.inplace)
        args = self.func.args
        for out, inp in self.inplace.items():
            if arrays[out].ctypes.data != arrays[inp].ctypes.data:
                raise ArgumentError(f"{self.func.name}: argument {out} ({args[out].name}) is built in place "
                                    f"of argument {inp} ({args[inp].name}): pass the same array for both")
        return tuple(a for k, a in enumerate(arrays) if k not in self.inplace.values())

    def __call__(self, *arrays: np.ndarray) -> None:
        self.kernel(*self._arrays(arrays))

    def benchmark(self, *arrays: np.ndarray, **kwargs) -> Timing:
        return self.kernel.benchmark(*self._arrays(arrays), **kwargs)
