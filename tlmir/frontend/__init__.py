"""PyTorch front end: import a torch.nn.Module as tlmir tasks, tune them, run the model.

    cm = tlmir.compile(model, (x,), strategy="tlm", trials_per_task=10, db="runs/r50.db")
    y = cm(x)
    print(cm.report(eager=model))

`import_model` gives the tasks without tuning or building; `torch.compile(model,
backend="tlmir")` goes through the same steps (tlmir.frontend.backend).
"""
from __future__ import annotations

from typing import Sequence

import torch

from ..errors import FrontendError
from ..evaluate import kernel_seconds
from ..runtime.target import parse_target
from .capture import Graph, capture, capture_fx
from .compiled import Compiled, CompiledModel
from .memory import MemoryPlan, plan_memory
from .partition import Partition, Subgraph, TorchStep, partition


class ImportedModel:
    """A captured model cut into subgraphs: `tasks()` are what tuning works on."""

    def __init__(self, graph: Graph, part: Partition, name: str):
        self.graph, self.part, self.name = graph, part, name

    def tasks(self) -> list:
        """[(Task, occurrences)], identical subgraphs merged."""
        return self.part.net.tasks()

    def fallbacks(self) -> dict[str, int]:
        """{"fallback:OP": count} of the ops PyTorch runs for want of a mapping."""
        return {f"fallback:{k}": v for k, v in self.part.fallback_ops().items()}

    def describe(self) -> str:
        tasks = self.tasks()
        flops = sum(t.flops * w for t, w in tasks)
        lines = [f"{self.name}: {len(self.part.subgraphs)} subgraphs, {len(tasks)} tasks, "
                 f"{flops / 1e9:.3f} GFLOP"]
        width = max([len(t.name) for t, _ in tasks] + [4])
        lines.append(f"{'task':<{width}} {'count':>5} {'MFLOP':>9}")
        for t, w in tasks:
            lines.append(f"{t.name:<{width}} {w:>5g} {t.flops / 1e6:>9.2f}")
        layout = sum(1 for s in self.part.steps if isinstance(s, TorchStep) and s.kind == "layout")
        fb = self.part.fallback_ops()
        lines.append(f"layout steps in PyTorch: {layout}; fallbacks: "
                     + (", ".join(f"{k} x{v}" for k, v in fb.items()) or "none"))
        lines.append(plan_memory(self.graph.outputs, self.part.steps).describe())
        return "\n".join(lines)


def import_model(model: torch.nn.Module, example_inputs: Sequence, name: str | None = None) -> ImportedModel:
    """Export `model` on `example_inputs` and cut it into tlmir subgraphs."""
    graph = capture(model, example_inputs)
    return ImportedModel(graph, partition(graph), name or type(model).__name__)


def build_tasks(tasks: list, strategy: str | None = "tlm", trials_per_task: int = 10,
                db: str | None = None, target: str = "cpu", tlm_model: str = "default",
                progress: bool = True) -> Compiled:
    """Tune `tasks` ([(Task, weight)]) with `strategy` (None: no tuning) and build each one's
    best program, or its untuned default schedule where nothing was measured."""
    from ..search.tune import tune_workload
    results = []
    if strategy and trials_per_task > 0 and tasks:
        results = tune_workload(tasks, trials_per_task, strategy=strategy, db=db, hw=parse_target(target),
                                progress=progress, model=tlm_model).results
    return build_kernels(tasks, results, strategy, target)


def build_kernels(tasks: list, results: list, strategy: str | None, target: str = "cpu") -> Compiled:
    """Each task's best program among `results` (TuneResults of `strategy`) compiled for
    `target`, or its untuned default schedule where nothing was measured or where the
    default runs faster (timed here, both alike): a tuned model never runs a slower kernel."""
    from ..runtime.backend import compile_func
    from ..schedule import create_schedule, lower
    from ..search.tune import kernel_name
    hw = parse_target(target)
    by_key = {r.task.key: r for r in results}
    kernels, sources = {}, {}
    for task, _ in tasks:
        r = by_key.get(task.key)
        default = compile_func(lower(create_schedule(task.outputs), task.args, kernel_name(task.name)), hw)
        kernels[task.key], sources[task.key] = default, "untuned default"
        if r is None or r.best_trace is None:
            continue
        tuned = compile_func(lower(r.best_schedule(), task.args, kernel_name(task.name)), hw)
        if kernel_seconds(task, tuned, 3) <= kernel_seconds(task, default, 3):
            kernels[task.key], sources[task.key] = tuned, f"{strategy}, {r.measurements} measured"
        else:
            sources[task.key] = f"untuned default (faster than {strategy}'s best of {r.measurements})"
    return Compiled(kernels, sources)


def compile(model: torch.nn.Module, example_inputs: Sequence, strategy: str | None = "tlm",  # noqa: A001
            trials_per_task: int = 10, db: str | None = None, target: str = "cpu",
            tlm_model: str = "default", progress: bool = True) -> CompiledModel:
    """Import `model`, tune its tasks (`strategy`: any tune strategy, None for untuned
    default schedules; `db`: a records database reused across runs) and build it."""
    if isinstance(model, ImportedModel):
        imported = model
    else:
        if not isinstance(model, torch.nn.Module):
            raise FrontendError(f"compile: expected a torch.nn.Module, got {type(model).__name__}")
        imported = import_model(model.eval(), example_inputs)
    built = build_tasks(imported.tasks(), strategy, trials_per_task, db, target, tlm_model, progress)
    return CompiledModel(imported.graph, imported.part, built, imported.name)


__all__ = ["ImportedModel", "CompiledModel", "import_model", "compile", "build_tasks", "build_kernels",
           "capture", "capture_fx", "partition", "plan_memory", "MemoryPlan", "Subgraph", "TorchStep"]
