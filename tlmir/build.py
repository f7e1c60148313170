"""`tlmir.build`: schedule -> loop program -> native kernel for a target."""
from __future__ import annotations

from .runtime.target import parse_target
from .schedule import Schedule, lower


def build(sch: Schedule, args, target: str = "cpu", name: str = "main"):
    """Lower `sch` and compile it for `target` ("cpu": this host; "cpu:avx2": this host
    held to AVX2, 256-bit vectors; see runtime.target.parse_target); returns a kernel
    callable on numpy arrays."""
    hw = parse_target(target)
    from .codegen_cpu import compile_func
    return compile_func(lower(sch, args, name), hw)
