"""Generation speed of the TLM: decisions/s and complete programs/s, batch 1 and 64,
plus how often sampling without the answer mask yields a well-formed sentence, in two
modes: `answers` (the sketch code asks the questions, each answer is sampled from the
whole vocabulary: paper Alg. 2 without the mask) and `sentences` (the model writes the
whole sentence, question words included).

    OMP_WAIT_POLICY=PASSIVE .venv/bin/python bench/generation.py --model models/tlm-base [--n 64]
    OMP_WAIT_POLICY=PASSIVE .venv/bin/python bench/generation.py --model base --well-formed-only \
        --tasks held-out                # unconstrained only, on the 21 representative held-out tasks
    ... --well-formed-only --mode answers   # the answers unmasked, the questions from the space
    ... --temperature 1.0 --top-p 0.95      # nucleus sampling (no mask: the cut is the model's own)
"""
from __future__ import annotations

import argparse
import os

import torch

from tlmir import ops
from tlmir.lm.registry import load_model
from tlmir.lm.generate import Generator, Sampling, programs_per_second, replay_errors
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


MODES = {"sentences": ("sentences",), "answers": ("answers",), "both": ("sentences", "answers")}


def _tasks(which: str) -> dict:
    if which == "bench":
        return TASKS
    from tlmir.evaluate import representative_tasks
    return {t.name: (lambda t=t: t) for t in representative_tasks(which)}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="base")
    p.add_argument("--n", type=int, default=64)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling (1: off)")
    p.add_argument("--top-k", type=int, default=0, help="top-k sampling (0: off)")
    p.add_argument("--tasks", default="bench", help="bench (the four below), train or held-out "
                   "(the split's representative tasks, one per category)")
    p.add_argument("--well-formed-only", action="store_true", help="skip the speed measurements")
    p.add_argument("--mode", choices=("sentences", "answers", "both"), default="both",
                   help="unconstrained whole sentences, unmasked answers to the space's questions, or both")
    a = p.parse_args()
    torch.set_num_threads(os.cpu_count() or 1)
    model, tok, meta = load_model(a.model)
    hw = host_hardware()
    print(f"# model {a.model}: {sum(x.numel() for x in model.parameters()):,} parameters, "
          f"vocab {tok.vocab_size}")
    how = f"T={a.temperature}" + (f" top-p {a.top_p}" if a.top_p < 1 else "") + (
        f" top-k {a.top_k}" if a.top_k else "")
    total = {m: 0 for m in MODES["both"]}
    well, ok = dict(total), dict(total)
    for name, make in _tasks(a.tasks).items():
        task = make()
        gen = Generator.for_model(model, tok, meta, hw, Sampling(a.temperature, a.top_k, a.top_p), seed=0)
        for batch in () if a.well_formed_only else (1, 64):
            n = min(a.n, 8) if batch == 1 else a.n
            progs, decs = programs_per_second(gen, task, n, batch)
            print(f"{name:<38} batch {batch:3d}: {progs:7.1f} programs/s  {decs:8.1f} decisions/s")
        space = SearchSpace(task.outputs, hw)
        for mode in MODES[a.mode]:
            free = (gen.unconstrained(task, a.n, 64) if mode == "sentences"
                    else gen.generate(task, a.n, 64, space, masked=False))
            valid = replay_errors(free, space).count(None)
            wf = sum(g.trace is not None for g in free)
            total[mode] += len(free)
            well[mode] += wf
            ok[mode] += valid
            print(f"{name:<38} unmasked {mode} ({how}): {wf}/{len(free)} well formed, {valid} valid")
            for g in free:
                if g.trace is None:
                    print(f"    malformed: {g.error[:160]}")
    for mode in MODES[a.mode]:
        n = max(total[mode], 1)
        print(f"all tasks, unmasked {mode} ({how}): {well[mode]}/{total[mode]} well formed "
              f"({100.0 * well[mode] / n:.1f}%), {ok[mode]} valid ({100.0 * ok[mode] / n:.1f}%)")


if __name__ == "__main__":
    main()
