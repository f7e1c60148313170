"""A dry run of a search: sample a task's space, lower and compile every candidate, and
count what the resource checks refuse, without measuring anything.

For a GPU target this needs no GPU (NVRTC compiles, ptxas reports what each kernel uses),
so a GPU space is checked on any machine: `tlmir tune --dry-run`, bench/cuda_compile.py.
"""
from __future__ import annotations

import random
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field

from ..errors import ResourceError, TlmirError
from ..runtime.backend import compile_func
from ..runtime.target import HardwareParams, SearchParams
from ..runtime.task import Task
from ..schedule.lower import lower
from ..schedule.space import SearchSpace


@dataclass
class DryRun:
    """What compiling `candidates` sampled programs of a task found."""
    task: Task
    hw: HardwareParams
    sketches: list[str]
    candidates: int = 0
    compiled: int = 0
    kernels: int = 0                     # kernels compiled (a program may launch several)
    spilled: int = 0                     # compiled programs with a kernel that spills registers
    rejected: Counter = field(default_factory=Counter)   # resource check -> candidates it refused
    failed: list = field(default_factory=list)           # (trace, message) of lowering / compile errors
    seconds: list = field(default_factory=list)          # per compiled program: compile wall time
    example: tuple | None = None                         # (trace, kernel) of the first compiled program

    @property
    def kernels_per_second(self) -> float:
        return self.kernels / sum(self.seconds) if self.seconds else 0.0

    @property
    def rejected_fraction(self) -> float:
        return sum(self.rejected.values()) / self.candidates if self.candidates else 0.0

    def summary(self) -> str:
        """A few lines a person reads."""
        mean = f"{statistics.mean(self.seconds) * 1e3:.0f} ms" if self.seconds else "-"
        lines = [f"# {self.task.name} on {self.hw.key}: {len(self.sketches)} sketch"
                 f"{'es' if len(self.sketches) != 1 else ''}"]
        lines += [f"sketch {k}: {s}" for k, s in enumerate(self.sketches)]
        lines.append(f"{self.candidates} candidates: {self.compiled} compiled ({self.kernels} kernels, {mean} per "
                     f"program, {self.kernels_per_second:.1f} kernels/s), {sum(self.rejected.values())} over the "
                     f"limits ({self.rejected_fraction:.1%}), {len(self.failed)} failed, "
                     f"{self.spilled} spilling registers")
        lines += [f"  refused for {what}: {n}" for what, n in self.rejected.most_common()]
        lines += [f"  failed: {msg.splitlines()[0][:160]}" for _, msg in self.failed[:3]]
        return "\n".join(lines)


def _limit(message: str) -> str:
    for what in ("threads", "shared memory", "registers", "grid"):
        if what in message:
            return what
    return "other"


def dry_run(task: Task, hw: HardwareParams, candidates: int = 64, seed: int = 0,
            sp: SearchParams | None = None) -> DryRun:
    """Sample up to `candidates` distinct programs of `task` for `hw`, lower and compile each."""
    space = SearchSpace(task.outputs, hw, sp)
    out = DryRun(task, hw, [str(s) for s in space.sketches])
    rng, seen = random.Random(seed), set()
    for _ in range(candidates * 20):
        if out.candidates == candidates:
            break
        sch, trace = space.sample(rng)
        key = trace.to_json()
        if key in seen:
            continue
        seen.add(key)
        out.candidates += 1
        try:
            t0 = time.perf_counter()
            kernel = compile_func(lower(sch, task.args, "dry_run"), hw)
            out.seconds.append(time.perf_counter() - t0)
        except ResourceError as e:
            out.rejected[_limit(str(e))] += 1
            continue
        except TlmirError as e:
            out.failed.append((trace, f"{type(e).__name__}: {e}"))
            continue
        out.compiled += 1
        resources = getattr(kernel, "resources", [])
        out.kernels += max(1, len(resources))
        out.spilled += any(r.spill_bytes for r in resources)
        if out.example is None:
            out.example = (trace, kernel)
    return out
