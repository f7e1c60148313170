"""A PyTorch model compiled by tlmir: its subgraphs run as tlmir kernels on the tensors'
memory, writing their outputs into the planned arena (`memory.py`), the rest in PyTorch;
`report()` times each subgraph against PyTorch."""
from __future__ import annotations

import math
import statistics
import threading
import time
from dataclasses import dataclass, field
from typing import Sequence

import torch
import torch.fx as fx
from torch.utils import _pytree as pytree

from ..errors import FrontendError
from ..evaluate import how_fast
from ..runtime.backend import default_num_threads, time_calls
from .capture import Graph
from .memory import ALIASED_COPIES, RESHAPES, MemoryPlan, plan_memory
from .partition import Partition, Subgraph, TorchStep


_THREADS = "threads"     # env key of the thread count of this call


@dataclass
class Compiled:
    """How each task is run: `kernels[task.key]`, and where its schedule came from."""
    kernels: dict
    sources: dict = field(default_factory=dict)   # task key -> "STRATEGY, N measured" | "untuned default"


class CompiledModel:
    """Call it like the model (positional tensors of the example shapes); float32 CPU
    tensors are used in place, others are converted once per call (counted). Kernel
    outputs live in one arena planned by `memory.plan_memory` (`memory` holds the plan),
    except returned ones, which each call allocates."""

    def __init__(self, graph: Graph, part: Partition, compiled: Compiled, name: str = "model"):
        self.graph, self.part, self.compiled, self.name = graph, part, compiled, name
        self.in_shapes = [graph.shape(n) for n in graph.inputs]
        self.in_dtypes = [n.meta["val"].dtype for n in graph.inputs]
        self.conversions = 0          # inputs converted to contiguous float32
        self.copies = 0               # non-contiguous values copied before a kernel
        self._lock = threading.Lock()
        self.num_threads: int | None = None   # None: $TLMIR_NUM_THREADS or all CPUs, per call
        self._consts = {n: t for n, t in graph.constants.items() if isinstance(t, torch.Tensor)}
        self.memory: MemoryPlan = plan_memory(graph.outputs, part.steps)
        self._arena = torch.empty(self.memory.arena_bytes, dtype=torch.uint8)
        self._plan = [self._prepare(i, s) for i, s in enumerate(part.steps)]

    # ---------------------------------------------------------------- running

    def _prepare(self, index: int, step):
        """A TorchStep as is; a subgraph as (step, kernel, constant operand pointers, its
        output value's shape, its output in the arena or None: allocated per call)."""
        if isinstance(step, TorchStep):
            return step
        kernel = self.compiled.kernels[step.task.key]
        if getattr(kernel, "inplace", None):
            raise FrontendError(f"{step.task.name}: an in-place kernel; the front end gives every "
                                f"kernel its own output buffer")
        for o, t in zip(step.operands, step.task.inputs):
            if tuple(t.shape) != tuple(o.shape) or (o.const is not None and tuple(o.const.shape) != o.shape):
                raise FrontendError(f"{step.task.name}: operand shape {o.shape} does not match "
                                    f"the kernel's {tuple(t.shape)}")
        consts = [o.const.data_ptr() if o.const is not None else None for o in step.operands]
        value_shape = self.graph.shape(step.output)
        if math.prod(value_shape) != math.prod(step.task.outputs[0].shape):
            raise FrontendError(f"{step.task.name}: output shape {tuple(step.task.outputs[0].shape)} "
                                f"does not hold {step.output.name}'s {value_shape}")
        slot, arena = self.memory.slots[index], None
        if slot.offset is not None:
            arena = self._arena[slot.offset:slot.offset + slot.nbytes].view(torch.float32).view(value_shape)
        return step, kernel, consts, value_shape, arena

    def _operand(self, env: dict, op, const: int | None) -> int:
        """The data pointer of a kernel input: contiguous float32 of the operand's shape."""
        if const is not None:
            return const
        t = env[op.node]
        if t.dtype != torch.float32:
            raise FrontendError(f"{op.node.name}: a kernel input of dtype {t.dtype}, not float32")
        if not t.is_contiguous():
            t = t.contiguous()
            env[op.node] = t
            self.copies += 1
        return t.view(op.shape).data_ptr()

    def _inputs(self, args: Sequence) -> dict:
        if len(args) != len(self.graph.inputs):
            raise FrontendError(f"{self.name}: expected {len(self.graph.inputs)} input tensors, "
                                f"got {len(args)}")
        env: dict = dict(self._consts)
        env[_THREADS] = self.num_threads or default_num_threads()
        for i, (node, x, shape, dtype) in enumerate(zip(self.graph.inputs, args, self.in_shapes,
                                                         self.in_dtypes)):
            if not isinstance(x, torch.Tensor):
                raise FrontendError(f"{self.name}: input {i} is a {type(x).__name__}, not a tensor")
            if tuple(x.shape) != shape:
                raise FrontendError(f"{self.name}: input {i} has shape {tuple(x.shape)}; it was "
                                    f"compiled for {shape} (compile again for a new shape)")
            if x.dtype != dtype or x.device.type != "cpu" or not x.is_contiguous():
                if x.dtype.is_floating_point != dtype.is_floating_point:
                    raise FrontendError(f"{self.name}: input {i} has dtype {x.dtype}; it was "
                                        f"compiled for {dtype}")
                x = x.to(device="cpu", dtype=dtype).contiguous()
                self.conversions += 1
            env[node] = x.detach()
        return env

    def _run_step(self, env: dict, plan) -> None:
        if isinstance(plan, TorchStep):
            n = plan.node
            if n.target in ALIASED_COPIES:   # the graph is functional: a copy nobody mutates is an alias
                x = env[n.args[0]]
                fmt = n.kwargs.get("memory_format")
                env[n] = x if fmt is None or x.is_contiguous(memory_format=fmt) else x.clone(memory_format=fmt)
                return
            if n.target in RESHAPES:        # kernels' outputs may be strided unlike eager's: reshape
                env[n] = env[n.args[0]].reshape(n.args[1])
                return
            args = pytree.tree_map(lambda a: env[a] if isinstance(a, fx.Node) else a, n.args)
            kwargs = pytree.tree_map(lambda a: env[a] if isinstance(a, fx.Node) else a, n.kwargs)
            env[n] = n.target(*args, **kwargs)
            return
        step, kernel, consts, value_shape, arena = plan
        pointers = [self._operand(env, o, c) for o, c in zip(step.operands, consts)]
        out = arena if arena is not None else torch.empty(value_shape, dtype=torch.float32)
        kernel.call_pointers(pointers + [out.data_ptr()], env[_THREADS])
        env[step.output] = out

    def _outputs(self, env: dict):
        flat = []
        for i, node in enumerate(self.graph.outputs):
            flat.append(self.graph.const_outputs[i].clone() if node is None else env[node])
        if self.graph.out_spec is None:
            return flat[0] if len(flat) == 1 else tuple(flat)
        return pytree.tree_unflatten(flat, self.graph.out_spec)

    def __call__(self, *args):
        with self._lock, torch.no_grad():
            env = self._inputs(args)
            for plan in self._plan:
                self._run_step(env, plan)
            return self._outputs(env)

    # ---------------------------------------------------------------- report

    @property
    def subgraphs(self) -> list[Subgraph]:
        return self.part.subgraphs

    def fallback_ops(self) -> dict[str, int]:
        """ATen ops PyTorch runs because tlmir has no mapping for them, with counts."""
        return self.part.fallback_ops()

    def step_times(self, args: Sequence, repeat: int = 5) -> list[tuple[object, float, float]]:
        """(step, tlmir seconds, PyTorch seconds) per step: medians over `repeat` runs. The
        PyTorch time of a subgraph runs its ATen nodes on the same inputs."""
        samples: list[list[float]] = [[] for _ in self._plan]
        torch_samples: list[list[float]] = [[] for _ in self._plan]
        with self._lock, torch.no_grad():
            for _ in range(repeat):
                env = self._inputs(args)
                for i, plan in enumerate(self._plan):
                    if isinstance(plan, TorchStep):
                        t0 = time.perf_counter()
                        self._run_step(env, plan)
                        samples[i].append(time.perf_counter() - t0)
                        continue
                    local = dict(env)
                    t0 = time.perf_counter()
                    for n in plan[0].nodes:
                        self._run_step(local, TorchStep(n, "reference"))
                    torch_samples[i].append(time.perf_counter() - t0)
                    t0 = time.perf_counter()
                    self._run_step(env, plan)
                    samples[i].append(time.perf_counter() - t0)
        out = []
        for plan, s, ts in zip(self._plan, samples, torch_samples):
            step = plan if isinstance(plan, TorchStep) else plan[0]
            out.append((step, statistics.median(s), statistics.median(ts) if ts else statistics.median(s)))
        return out

    def report(self, args: Sequence | None = None, repeat: int = 5, eager=None) -> str:
        """Per-task time against PyTorch (each subgraph's own ATen ops), the steps PyTorch
        runs, and (given `eager`, the original module) the whole model end to end."""
        if args is None:
            if any(not d.is_floating_point for d in self.in_dtypes):
                raise FrontendError(f"{self.name}: report() needs the inputs (integer inputs)")
            args = [torch.randn(s, dtype=d) for s, d in zip(self.in_shapes, self.in_dtypes)]
        rows: dict[str, list] = {}
        for step, t, tt in self.step_times(args, repeat):
            key = step.label
            r = rows.setdefault(key, [0, 0.0, 0.0, self._source(step)])
            r[0] += 1
            r[1] += t
            r[2] += tt
        width = max([len(k) for k in rows] + [8])
        lines = [f"{self.name}: {len(self.subgraphs)} subgraphs as {len(self.part.net.tasks())} "
                 f"tlmir tasks, {len(self.part.steps) - len(self.subgraphs)} steps in PyTorch",
                 f"{'step':<{width}} {'count':>5} {'tlmir ms':>9} {'torch ms':>9} {'speedup':>8}  schedule"]
        total = [0.0, 0.0]
        for key, (count, t, tt, src) in sorted(rows.items(), key=lambda kv: -kv[1][1]):
            total[0] += t
            total[1] += tt
            sp = f"{tt / t:.2f}x" if t > 0 and not key.startswith(("layout", "fallback")) else ""
            lines.append(f"{key:<{width}} {count:>5} {t * 1e3:>9.3f} {tt * 1e3:>9.3f} {sp:>8}  {src}")
        lines.append(f"{'sum of steps':<{width}} {'':>5} {total[0] * 1e3:>9.3f} {total[1] * 1e3:>9.3f} "
                     f"{total[1] / total[0]:>7.2f}x")
        fb = self.fallback_ops()
        lines.append("PyTorch fallbacks: " + (", ".join(f"{k} x{v}" for k, v in fb.items()) or "none"))
        lines.append(self.memory.describe())
        if eager is not None:
            t_ours = time_calls(lambda: self(*args), warmup=1, repeat=repeat, min_time=0).median
            with torch.no_grad():
                t_eager = time_calls(lambda: eager(*args), warmup=1, repeat=repeat, min_time=0).median
            lines.append(f"end to end: tlmir {t_ours * 1e3:.3f} ms, PyTorch eager {t_eager * 1e3:.3f} ms: "
                         f"tlmir is {how_fast(t_eager / t_ours)} than PyTorch")
        return "\n".join(lines)

    def _source(self, step) -> str:
        if isinstance(step, TorchStep):
            return "PyTorch"
        return self.compiled.sources.get(step.task.key, "")

