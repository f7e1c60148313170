"""`torch.compile(model, backend="tlmir")`: TorchDynamo hands over each captured graph.

Registered through the `torch_dynamo_backends` entry point (pyproject.toml), so no import
of tlmir is needed before torch.compile. Options (`torch.compile(..., options={...})`):
strategy ("tlm"; None for untuned default schedules), trials_per_task (10), db (the
records database, default ~/.cache/tlmir/records.db, so a second compile reuses the
measurements), target ("cpu"), tlm_model ("default"), progress (False).

Parameters and buffers are frozen at compile time, as Inductor's `freezing` does: the
compiled function checks they are the tensors it was built with, unchanged, and refuses
to run (FrontendError) rather than compute with stale weights.
"""
from __future__ import annotations

import os
from typing import Sequence

import torch

from ..errors import FrontendError
from .capture import capture_fx
from .compiled import CompiledModel
from .partition import partition

DEFAULTS = dict(strategy="tlm", trials_per_task=10, db=None, target="cpu",
                tlm_model="default", progress=False)


def default_db() -> str:
    """The records database torch.compile uses unless told: ~/.cache/tlmir/records.db."""
    root = os.path.join(os.path.expanduser("~"), ".cache", "tlmir")
    os.makedirs(root, exist_ok=True)
    return os.path.join(root, "records.db")


def _frozen(gm: torch.fx.GraphModule, example_inputs: Sequence) -> list[bool]:
    names = [n.target for n in gm.graph.nodes if n.op == "placeholder"]
    return [isinstance(x, torch.nn.Parameter) or "_buffers_" in str(name)
            or "_parameters_" in str(name) for name, x in zip(names, example_inputs)]


def tlmir_backend(gm: torch.fx.GraphModule, example_inputs: Sequence, options: dict | None = None,
                  mode: str | None = None):
    """The TorchDynamo backend: returns a callable over the graph's inputs."""
    from . import build_tasks
    opts = dict(DEFAULTS)
    unknown = set(options or {}) - set(DEFAULTS)
    if unknown:
        raise FrontendError(f"torch.compile backend tlmir: unknown options {sorted(unknown)}; "
                            f"known: {sorted(DEFAULTS)}")
    opts.update(options or {})
    symbolic = [i for i, x in enumerate(example_inputs) if not isinstance(x, torch.Tensor)]
    if symbolic:
        raise FrontendError("torch.compile backend tlmir: the graph has dynamic shapes (inputs "
                            f"{symbolic} are symbols); compile with dynamic=False")
    frozen = _frozen(gm, example_inputs)
    graph = capture_fx(gm, example_inputs, frozen)
    part = partition(graph)
    db = opts["db"] if opts["db"] is not None else default_db() if opts["strategy"] else None
    built = build_tasks(part.net.tasks(), opts["strategy"], opts["trials_per_task"], db,
                        opts["target"], opts["tlm_model"], opts["progress"])
    compiled = CompiledModel(graph, part, built, name="torch.compile graph")
    weights = [(i, x, x._version) for i, (x, fz) in enumerate(zip(example_inputs, frozen)) if fz]
    live = [i for i, fz in enumerate(frozen) if not fz]

    def run(*args):
        for i, x, version in weights:
            if args[i] is not x or args[i]._version != version:
                raise FrontendError("torch.compile backend tlmir: a parameter or buffer changed "
                                    "after compilation (tlmir freezes weights); compile again")
        out = compiled(*[args[i] for i in live])
        return out if isinstance(out, (tuple, list)) else (out,)
    run.compiled = compiled
    return run
