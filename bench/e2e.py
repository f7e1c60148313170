"""Whole PyTorch models run end to end on tlmir kernels, against PyTorch eager and Inductor.

    .venv/bin/python bench/e2e.py [--models resnet50,mobilenet_v2,bert-base,llama-layer]
        [--strategy tlm] [--trials-per-task 10] [--model default] [--db runs/e2e.db] [--threads 1,2]
        [--repeat 20] [--no-inductor] [--progress] [--json out.json]

Per model: import (torch.export + fusion), tune every task with --strategy into --db (a
rerun reuses the records: no measurement is repeated), build, check the output against
eager (relative max error), then time, per thread count, the median of --repeat calls of
tlmir, eager (torch.no_grad) and torch.compile's default backend (Inductor), all in this
process, one after another.
"""
from __future__ import annotations

import argparse
import json
import os
import time

import torch

from tlmir import frontend, zoo
from tlmir.frontend.models import TRANSFORMERS
from tlmir.runtime.backend import time_calls
from tlmir.runtime.target import cpu_model_name

MODELS = {
    "resnet50": lambda: (zoo.resnet50(), (torch.randn(1, 3, 224, 224),)),
    "mobilenet_v2": lambda: (zoo.mobilenet_v2(), (torch.randn(1, 3, 224, 224),)),
    "bert-base": lambda: (TRANSFORMERS["bert-base"]()[0], (torch.randint(0, 30522, (1, 128)),)),
    "llama-layer": lambda: (zoo.llama_decoder_layer(), (torch.randn(1, 128, 4096),)),
}


def median_time(fn, repeat: int) -> float:
    """Median seconds of single calls after two warm-up calls."""
    return time_calls(fn, warmup=2, repeat=repeat, min_time=0).median


def first_tensor(out):
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, dict) or hasattr(out, "values"):
        return next(iter(out.values()))
    return out[0]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default=",".join(MODELS), help=f"comma-separated subset of {', '.join(MODELS)}")
    p.add_argument("--strategy", default="tlm", help="tune strategy; 'none' for untuned default schedules")
    p.add_argument("--trials-per-task", type=int, default=10)
    p.add_argument("--model", default="default", help="the TLM of the tlm strategies: default, base or a directory")
    p.add_argument("--db", default="runs/e2e.db")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--repeat", type=int, default=20)
    p.add_argument("--no-inductor", action="store_true")
    p.add_argument("--report", action="store_true", help="also print each model's per-subgraph report")
    p.add_argument("--progress", action="store_true", help="print each task's tuning progress")
    p.add_argument("--json")
    a = p.parse_args()
    threads = [int(t) for t in a.threads.split(",")]
    strategy = None if a.strategy == "none" else a.strategy
    cpu = cpu_model_name("unknown CPU")
    print(f"# {cpu}, {os.cpu_count()} CPUs; strategy {a.strategy}, {a.trials_per_task} per task")
    rows = []
    for name in a.models.split(","):
        torch.manual_seed(0)
        model, inputs = MODELS[name]()
        model.eval()
        t0 = time.perf_counter()
        imported = frontend.import_model(model, inputs, name)
        cm = frontend.compile(imported, None, strategy=strategy, trials_per_task=a.trials_per_task,
                              db=a.db, tlm_model=a.model, progress=a.progress)
        build_s = time.perf_counter() - t0
        with torch.no_grad():
            ref = first_tensor(model(*inputs))
        got = first_tensor(cm(*inputs))
        err = float((got - ref).abs().max() / ref.abs().max().clamp_min(1e-12))
        inductor = None
        if not a.no_inductor:
            torch._dynamo.reset()
            inductor = torch.compile(model)
        for t in threads:
            torch.set_num_threads(t)
            cm.num_threads = t
            with torch.no_grad():
                ours = median_time(lambda: cm(*inputs), a.repeat)
                eager = median_time(lambda: model(*inputs), a.repeat)
                ind = median_time(lambda: inductor(*inputs), a.repeat) if inductor is not None else None
            row = dict(model=name, threads=t, tlmir_ms=ours * 1e3, eager_ms=eager * 1e3,
                       inductor_ms=ind * 1e3 if ind else None, vs_eager=eager / ours,
                       vs_inductor=ind / ours if ind else None, rel_err=err,
                       tasks=len(imported.tasks()), fallbacks=imported.fallbacks(),
                       import_tune_build_s=build_s)
            rows.append(row)
            print(f"{name:<13} {t} thr  tlmir {ours * 1e3:8.2f} ms  eager {eager * 1e3:8.2f} ms  "
                  + (f"inductor {ind * 1e3:8.2f} ms  " if ind else "")
                  + f"{eager / ours:5.2f}x eager" + (f"  {ind / ours:5.2f}x inductor" if ind else "")
                  + f"  rel err {err:.1e}  ({len(imported.tasks())} tasks, {build_s:.0f} s)", flush=True)
        if a.report:
            print(cm.report(list(inputs), repeat=5, eager=model))
        torch.set_num_threads(os.cpu_count() or 1)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"cpu": cpu, "strategy": a.strategy, "trials_per_task": a.trials_per_task,
                       "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
