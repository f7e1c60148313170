"""`tlmir.build`: schedule -> loop program -> native kernel for a target."""
from __future__ import annotations

from .errors import BuildError
from .schedule import Schedule, lower

TARGETS = ("cpu",)


def build(sch: Schedule, args, target: str = "cpu", name: str = "main"):
    """Lower `sch` and compile it for `target`; returns a kernel callable on numpy arrays."""
    if target not in TARGETS:
        raise BuildError(f"unknown target {target!r}; available: {TARGETS}")
    from .codegen_cpu import compile_func
    return compile_func(lower(sch, args, name))
