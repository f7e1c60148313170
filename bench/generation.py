"""Generation speed of the TLM: decisions/s and complete programs/s, batch 1 and 64,
plus how often unconstrained sampling yields a well-formed / valid sentence.

    OMP_WAIT_POLICY=PASSIVE .venv/bin/python bench/generation.py --model models/tlm-base [--n 64]
"""
from __future__ import annotations

import argparse
import os

import torch

from tlmir import ops
from tlmir.errors import TlmirError
from tlmir.lm.commands import load_model
from tlmir.lm.generate import Generator, Sampling, programs_per_second
from tlmir.runtime.target import host_hardware
from tlmir.runtime.task import Task
from tlmir.schedule.space import SearchSpace

def _held_out(network: str, prefix: str):
    from tlmir.workloads import network_tasks
    return lambda: next(t for t, _ in network_tasks(network) if t.name.startswith(prefix))


TASKS = {  # three held-out subgraphs (networks never seen in training) and one plain op
    "resnet-50 conv2d_bias_relu 3x3": _held_out("resnet-50", "conv2d_bias_relu_1x64x56x56_k64_3x3"),
    "bert-base dense_bias_gelu": _held_out("bert-base", "dense_bias_gelu"),
    "bert-base softmax": _held_out("bert-base", "softmax"),
    "matmul 512^3 (no plain matmul in training)": lambda: Task.from_op(ops.matmul(512, 512, 512)),
}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="base")
    p.add_argument("--n", type=int, default=64)
    p.add_argument("--temperature", type=float, default=1.0)
    a = p.parse_args()
    torch.set_num_threads(os.cpu_count() or 1)
    model, tok, meta = load_model(a.model)
    hw = host_hardware()
    print(f"# model {a.model}: {sum(x.numel() for x in model.parameters()):,} parameters, vocab {tok.vocab_size}")
    for name, make in TASKS.items():
        task = make()
        gen = Generator(model, tok, hw, Sampling(a.temperature), seed=0)
        for batch in (1, 64):
            n = min(a.n, 8) if batch == 1 else a.n
            progs, decs = programs_per_second(gen, task, n, batch)
            print(f"{name:<38} batch {batch:3d}: {progs:7.1f} programs/s  {decs:8.1f} decisions/s")
        free = gen.unconstrained(task, a.n, 64)
        space = SearchSpace(task.outputs, hw)
        valid = 0
        for g in free:
            if g.trace is not None:
                try:
                    space.replay(g.trace)
                    valid += 1
                except TlmirError:
                    pass
        wf = sum(g.trace is not None for g in free)
        print(f"{name:<38} unconstrained (T={a.temperature}): {wf}/{len(free)} well formed, {valid} valid")


if __name__ == "__main__":
    main()
