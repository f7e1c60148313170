"""Validity training: the model learns which answers the space allows, so that sampling
without the mask still writes programs of the space.

Search decodes with a mask (tlmir.lm.generate): every answer word is drawn among those
that continue some valid answer, so search never meets an invalid program. The model
itself still puts mass on words the space refuses (a tile word that does not divide the
one before it, a loop name where a number is asked), learned from nothing: SFT scores the
demonstrated answer, never the answers the space would have refused. Sampled without the
mask, a few tenths of a percent per word add up over the twenty-odd answers of a program.

Validity training adds, at every answer word, a loss on the log of the mass the model
puts outside the mask (down to a floor). It reads sentences the model writes itself
(masked samples of training tasks, the prefixes it meets when it samples), no measurement
needed. A KL term to the model as it was, both renormalized over the allowed words, keeps
what masked sampling draws, so search sees the same model. With `scope="sentences"` the
question words are scored too (each has one allowed word: the space's), so the model also
writes the grammar itself.

    tlmir train validity --model tlm --out runs/tlm-valid --tasks 600 --per-task 8
"""
from __future__ import annotations

import math
import os
import random
import shutil
import time
from dataclasses import dataclass
from typing import Callable, Sequence

import torch
from torch.nn.utils.rnn import pad_sequence

from ..errors import ModelError, TlmirError
from ..runtime.target import HardwareParams
from ..schedule.decider import Trace
from ..schedule.space import SearchSpace
from .language import EOS, answer_words, decision_words, prefix_words, trace_options
from .tokenizer import Tokenizer

SCOPES = ("answers", "sentences")
COPIED = ("tokenizer.json", "sources.jsonl.xz", "demonstrations.jsonl")  # what a tuned model keeps


@dataclass
class ValidityExample:
    """A sentence's token ids and, for each scored position, the token ids allowed there
    (position p: token p is predicted from tokens [0, p))."""
    ids: list[int]
    positions: list[int]
    allowed: list[list[int]]


def allowed_words(space: SearchSpace, task, hw: HardwareParams, trace: Trace,
                  scope: str = "answers") -> tuple[list[str], list[tuple[int, set[str]]]]:
    """(the words of the trace's sentence, [(word index, the words the mask allows there)])
    for every answer word (and with scope "sentences" every word of the decisions). At an
    answer word the allowed words are those that continue a valid answer given the words
    before it, as constrained decoding allows them."""
    if scope not in SCOPES:
        raise ModelError(f"validity scope must be one of {', '.join(SCOPES)}, got {scope!r}")
    options = trace_options(task, hw, trace)
    words = prefix_words(task, hw)
    scored = [(len(words), {str(i) for i in range(len(space.sketches))})]
    words.append(str(trace.sketch))
    for question, answer in trace.decisions:
        opts = options.get(question)
        if opts is None:
            raise ModelError(f"validity: question {question!r} was not asked when the trace replayed")
        qwords, awords = decision_words(question, answer, options=opts)
        if scope == "sentences":
            scored += [(len(words) + k, {w}) for k, w in enumerate(qwords)]
        words += qwords
        every = answer_words(question, opts)
        for depth, word in enumerate(awords):
            ok = {aw[depth] for aw in every if len(aw) > depth and aw[:depth] == awords[:depth]}
            scored.append((len(words), ok))
            words.append(word)
    if scope == "sentences":
        scored.append((len(words), {EOS}))
    words.append(EOS)
    return words, scored


def example(tok: Tokenizer, space: SearchSpace, task, hw: HardwareParams, trace: Trace,
            scope: str = "answers") -> ValidityExample:
    words, scored = allowed_words(space, task, hw, trace, scope)
    names = tok.names(words)
    # each allowed word is read after the words before it, as the sentence reads it there
    # (names by place read a bare word of the language as a name after `at`, `read`, ...,
    # and a tile question's extent as `ext`)
    return ValidityExample(tok.encode(words), [p for p, _ in scored],
                           [sorted({tok.id(names.placed_at(words, p, w)) for w in ok})
                            for p, ok in scored])


def sample_examples(model, tok: Tokenizer, meta: dict, tasks: Sequence, hws: Sequence[HardwareParams],
                    per_task: int, scope: str = "answers", seed: int = 0,
                    log: Callable[[str], None] | None = print) -> list[ValidityExample]:
    """Masked samples of the model on every task on each hardware, as examples: the
    sentences it writes, whose prefixes are those it meets when it samples."""
    from .generate import Generator, Sampling
    out: list[ValidityExample] = []
    t0 = time.monotonic()
    for i, task in enumerate(tasks):
        for hw in hws:
            space = SearchSpace(task.outputs, hw)
            gen = Generator.for_model(model, tok, meta, hw, Sampling(1.0), seed + i)
            try:
                gens = gen.generate(task, per_task, per_task, space)
            except TlmirError as e:
                if log:
                    log(f"validity: {task.name} on {hw.key} skipped ({e})")
                continue
            for g in gens:
                if g.trace is not None:
                    out.append(example(tok, space, task, hw, g.trace, scope))
        if log and (i + 1) % 100 == 0:
            log(f"validity: sampled {i + 1}/{len(tasks)} tasks, {len(out)} sentences, "
                f"{time.monotonic() - t0:.0f} s")
    return out


def _scored(batch: Sequence[ValidityExample], vocab: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(rows, columns) of the batch's scored positions in its logits [B, T, V] (logits row
    t of a sentence predicts its token t + 1), and the allowed words there as a mask [N, V]."""
    rows, cols = [], []
    mask = torch.zeros(sum(len(ex.positions) for ex in batch), vocab, dtype=torch.bool)
    for r, ex in enumerate(batch):
        for p, ok in zip(ex.positions, ex.allowed):
            mask[len(rows), ok] = True
            rows.append(r)
            cols.append(p - 1)
    return torch.tensor(rows), torch.tensor(cols), mask


def _outside(picked: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return torch.logsumexp(picked.masked_fill(mask, -math.inf), -1) - torch.logsumexp(picked, -1)


def _loss(outside: torch.Tensor, floor: float) -> torch.Tensor:
    return (torch.relu(outside - math.log(floor)) - torch.log1p(-outside.exp().clamp(max=1 - 1e-7))).mean()


def _kl(picked: torch.Tensor, ref: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    new = torch.log_softmax(picked.masked_fill(~mask, -math.inf), -1)
    old = torch.log_softmax(ref.masked_fill(~mask, -math.inf), -1)
    return torch.where(mask, old.exp() * (old - new), torch.zeros_like(new)).sum(-1).mean()


def outside_mass(logits: torch.Tensor, batch: Sequence[ValidityExample]) -> torch.Tensor:
    """Per scored position, log P(a word the mask refuses) under `logits` [B, T, V]
    (-inf where every word is allowed)."""
    rows, cols, mask = _scored(batch, logits.size(-1))
    return _outside(logits[rows, cols].float(), mask)


def validity_loss(logits: torch.Tensor, batch: Sequence[ValidityExample], floor: float = 1e-5) -> torch.Tensor:
    """Mean over the scored positions of -log P(inside the mask) + log(P(outside) / floor)
    where above the floor. The first pulls where the model is sure of a refused word (its
    push fades as the outside mass shrinks: -log P(inside) ~ P(outside)); the second, in
    log space, does not fade, and stops at `floor` per word (25 words at 1e-5: one
    sentence in 4,000 invalid)."""
    return _loss(outside_mass(logits, batch), floor)


def masked_kl(logits: torch.Tensor, reference: torch.Tensor, batch: Sequence[ValidityExample]) -> torch.Tensor:
    """Mean over the scored positions of KL(reference || model), both renormalized over the
    allowed words: how far the model has moved what masked sampling draws."""
    rows, cols, mask = _scored(batch, logits.size(-1))
    return _kl(logits[rows, cols].float(), reference[rows, cols].float(), mask)


def inputs(batch: Sequence[ValidityExample], pad_id: int) -> torch.Tensor:
    """The batch's sentences but their last token, padded: what the model reads [B, T]."""
    return pad_sequence([torch.tensor(ex.ids[:-1]) for ex in batch], batch_first=True, padding_value=pad_id)


def validity_tune(model_dir: str, out_dir: str, examples: Sequence[ValidityExample], steps: int = 1500,
                  batch_size: int = 16, lr: float = 3e-4, anchor: float = 1.0, floor: float = 1e-5, seed: int = 0,
                  sampled: dict | None = None, log: Callable[[str], None] | None = print) -> dict:
    """Fine-tune the model in `model_dir` into `out_dir`: each step, on `batch_size`
    examples, the validity loss plus `anchor` x the masked KL to the model as it was, so
    what masked sampling (search) draws stays as it was while the mass outside the mask
    goes. The files a model ships beside its weights (tokenizer, transfer sources,
    demonstrations) are copied. The run is recorded in the model's config.json under
    `validity`, with `sampled` (how the examples were drawn: training tasks, novel tasks
    (`novel_tasks(novel, seed)`), scope, ...) and, where the start model went through this
    stage too, its record as `previous`. A short run: killed, it starts again."""
    from .checkpoint import extra_of, load_checkpoint, save_checkpoint
    from .train import optimizer
    tok = Tokenizer.load(os.path.join(model_dir, "tokenizer.json"))
    model, meta = load_checkpoint(model_dir, expect_vocab_size=tok.vocab_size)
    reference, _ = load_checkpoint(model_dir, expect_vocab_size=tok.vocab_size)
    if not examples:
        raise ModelError(f"validity training into {out_dir}: no examples")
    rng, pool = random.Random(seed), list(examples)
    torch.manual_seed(seed)
    model.train()
    opt = optimizer(model, lr, weight_decay=0.1)
    t0, history = time.monotonic(), []
    run_valid = run_kl = run_out = 0.0
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = lr * min(1.0, (step + 1) / 50) * 0.5 * (1 + math.cos(math.pi * step / steps))
        batch = rng.sample(pool, min(batch_size, len(pool)))
        x = inputs(batch, tok.pad_id)
        rows, cols, mask = _scored(batch, tok.vocab_size)
        picked = model(x)[0][rows, cols].float()
        with torch.no_grad():
            ref = reference(x)[0][rows, cols].float()
        outside = _outside(picked, mask)
        loss_valid = _loss(outside, floor)
        loss_kl = _kl(picked, ref, mask)
        loss = loss_valid + anchor * loss_kl
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        run_valid += float(loss_valid.detach())
        run_out += float(outside.detach().exp().mean())
        run_kl += float(loss_kl.detach())
        if (step + 1) % 100 == 0 or step + 1 == steps:
            n = (step % 100) + 1
            history.append({"step": step + 1, "validity_loss": run_valid / n, "outside_mask": run_out / n,
                            "masked_kl": run_kl / n})
            if log:
                log(f"validity step {step + 1}/{steps} | loss {run_valid / n:.4f} | outside the mask "
                    f"{run_out / n:.2e} per word | masked KL {run_kl / n:.5f} | {time.monotonic() - t0:.0f} s")
            run_valid = run_kl = run_out = 0.0
    model.eval()
    os.makedirs(out_dir, exist_ok=True)
    extra = {k: v for k, v in extra_of(meta).items() if k != "train_state_sha256"}  # not these weights' state
    extra["validity"] = {"examples": len(examples), "steps": steps, "batch_size": batch_size, "lr": lr,
                         "anchor": anchor, "floor": floor, "sampled": sampled, "history": history,
                         "previous": extra.get("validity")}
    save_checkpoint(model, out_dir, extra)
    for name in COPIED:
        src = os.path.join(model_dir, name)
        if os.path.isfile(src):
            shutil.copyfile(src, os.path.join(out_dir, name))
    return {"seconds": time.monotonic() - t0, "history": history}
