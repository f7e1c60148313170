"""`tlmir.build`: schedule -> loop program -> kernel for a target, by a backend."""
from __future__ import annotations

from .runtime.backend import compile_func
from .runtime.target import parse_target
from .schedule import Schedule, lower


def build(sch: Schedule, args, target: str = "cpu", name: str = "main", backend: str | None = None):
    """Lower `sch` and compile it for `target` ("cpu": this host; "cpu:avx2": this host
    held to AVX2, 256-bit vectors; see runtime.target.parse_target) with `backend` (None:
    the target's default, "cpu"; "interp": the reference interpreter; see
    runtime.backend); returns a kernel callable on numpy arrays."""
    hw = parse_target(target)
    return compile_func(lower(sch, args, name), hw, backend)
