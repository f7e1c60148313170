"""How far a tuned model moved what masked sampling draws, and how much it puts outside the mask.

    .venv/bin/python bench/validity_drift.py --model runs/tlm-valid --reference tlm [--per-task 16]

The reference model writes `per-task` masked programs of each task on this host; at every
answer word of them (tlmir.lm.validity.allowed_words) this prints, per task, the KL of the
tuned model to the reference over the allowed words (what search, which samples masked,
sees change) and the probability both models put outside the mask (what unmasked sampling
loses). Tasks: the 21 held-out ones (of the training op types) and the six operators of
`bench/unseen_ops.py`, in no workload and, when the tuned model's validity stage drew
novel tasks (tlmir.lm.novel_tasks), checked to be none of them.
"""
from __future__ import annotations

import argparse
import json
import statistics

from tlmir.lm.registry import passive_openmp

passive_openmp()

import torch  # noqa: E402

from tlmir.evaluate import representative_tasks  # noqa: E402
from tlmir.lm.checkpoint import extra_of  # noqa: E402
from tlmir.lm.generate import Generator, Sampling  # noqa: E402
from tlmir.lm.novel_tasks import novel_tasks  # noqa: E402
from tlmir.lm.registry import load_model  # noqa: E402
from tlmir.lm.validity import example, inputs, masked_kl, outside_mass  # noqa: E402
from tlmir.runtime.target import host_hardware  # noqa: E402
from tlmir.runtime.task import Task  # noqa: E402
from tlmir.schedule.space import SearchSpace  # noqa: E402
from unseen_ops import OPS as UNSEEN  # noqa: E402  (bench/unseen_ops.py)


def drift(new, ref, tok, meta, task: Task, hw, per_task: int, seed: int) -> dict:
    """Mean masked KL(ref || new) and mean outside-mask probability of each model per answer
    word, over the reference's masked samples of `task`."""
    space = SearchSpace(task.outputs, hw)
    gens = Generator.for_model(ref, tok, meta, hw, Sampling(1.0), seed).generate(task, per_task, per_task, space)
    batch = [example(tok, space, task, hw, g.trace) for g in gens if g.trace is not None]
    x = inputs(batch, tok.pad_id)
    with torch.no_grad():
        logits_new, logits_ref = new(x)[0], ref(x)[0]
        outside = [float(outside_mass(lg, batch).exp().mean()) for lg in (logits_new, logits_ref)]
        kl = float(masked_kl(logits_new, logits_ref, batch))
    return {"task": task.name, "programs": len(batch), "kl": kl,
            "outside_new": outside[0], "outside_ref": outside[1]}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True, help="the tuned model (a directory, tlm or base)")
    p.add_argument("--reference", default="tlm", help="the model it was tuned from")
    p.add_argument("--per-task", type=int, default=16)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", help="write the rows here")
    a = p.parse_args()
    new, tok, meta = load_model(a.model)
    ref, ref_tok, _ = load_model(a.reference)
    if ref_tok.vocab_size != tok.vocab_size:
        raise SystemExit("the two models do not share a vocabulary")
    unseen = {name: Task.from_op(make(), name=name) for name, (_, make) in UNSEEN.items()}
    stage = extra_of(meta).get("validity")
    while stage:  # every validity stage the model went through, latest first
        drawn = stage.get("sampled") or {}
        if drawn.get("novel"):
            keys = {t.key for t in novel_tasks(drawn["novel"], drawn["seed"])}
            clash = [n for n, t in unseen.items() if t.key in keys]
            assert not clash, f"a validity stage trained on {clash}"
        stage = stage.get("previous")
    hw, rows = host_hardware(), []
    for group, tasks in (("held-out", representative_tasks("held-out")), ("unseen", list(unseen.values()))):
        for task in tasks:
            row = {"group": group, **drift(new, ref, tok, meta, task, hw, a.per_task, a.seed)}
            rows.append(row)
            print(f"{group:8} {row['task'][:48]:48} KL {row['kl']:.4f}  outside new {row['outside_new']:.2e} "
                  f"ref {row['outside_ref']:.2e}", flush=True)
    for group in ("held-out", "unseen"):
        kls = [r["kl"] for r in rows if r["group"] == group]
        print(f"{group}: masked KL per answer word median {statistics.median(kls):.4f}, "
              f"range {min(kls):.4f}-{max(kls):.4f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"model": a.model, "reference": a.reference, "hardware": hw.key, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
