"""Supervised fine-tuning on demonstrations (paper §5.3): the prompt is given, the
answers (or every decision word) are learned.

    stats = sft("tlmir/lm/models/base", demo_sentences, "runs/tlm-r1", epochs=4)

A demonstration is the sentence of a measured, verified program that was the best one
found for its task (or for one sketch of its task). SFT starts from a copy of the base
weights every time (the paper fine-tunes a fresh TLM-base on all demonstrations so far,
so early, poor demonstrations do not pile up). What is scored (`learn`):

- "answers" (the default): only answer tokens: the sketch id, every word after a
  question's `=`, and `</s>`; the question words are context, as constrained generation
  forces them. A model fine-tuned so forgets how a question starts: none of its
  unconstrained sentences parse;
- "sentences": every token from `sketch` on, question words included, so the model keeps
  writing the grammar itself (26% of its unconstrained sentences replay, base's 32%), at
  about 4% of TLM-10 (geometric mean, two seeds each: docs/model.md).

The task and hardware prompt is context, never a target.
"""
from __future__ import annotations

import math
import os
import shutil
from typing import Callable, Sequence

import torch
import torch.nn.functional as F

from ..errors import ModelError
from .language import EOS, QUESTION_KEYWORDS, STRUCTURAL_WORDS, VERSION
from .prompt_hardware import demonstrated_hardware
from .tokenizer import Tokenizer

TOKENIZER_FILE = "tokenizer.json"


def answer_flags(words: Sequence[str]) -> list[bool]:
    """One flag per word: is it part of an answer (what SFT learns)?"""
    flags, in_answer = [], False
    for i, w in enumerate(words):
        if w == "sketch" and i + 1 < len(words):
            flags.append(False)
            in_answer = True  # the sketch id is the first answer
            continue
        if w in QUESTION_KEYWORDS:
            in_answer = False
        flags.append(in_answer or w == EOS)
        if w == "=":
            in_answer = True
    return flags


def decision_flags(words: Sequence[str]) -> list[bool]:
    """One flag per word: is it part of the decisions (from the first `sketch` on)?"""
    start = words.index("sketch") if "sketch" in words else len(words)
    return [k >= start for k in range(len(words))]


LEARN = {"answers": answer_flags, "sentences": decision_flags}


def sft_loss_mask(tok: Tokenizer, learn: str = "answers") -> Callable[[list[int]], list[bool]]:
    """loss_mask for `pretrain`: flags from the words of a token-id sequence."""
    flags = LEARN[learn]
    return lambda ids: flags([tok.word(i) for i in ids])


@torch.no_grad()
def answer_nll(model, tok: Tokenizer, sentences: Sequence[str], batch_size: int = 32) -> float:
    """Mean negative log-likelihood (nats per answer token) of the sentences' answers."""
    per = answer_nll_per_sentence(model, tok, sentences, batch_size)
    count = sum(n for _, n in per)
    return sum(t for t, _ in per) / count if count else math.nan


@torch.no_grad()
def answer_nll_per_sentence(model, tok: Tokenizer, sentences: Sequence[str],
                            batch_size: int = 32) -> list[tuple[float, int]]:
    """Per sentence: (negative log-likelihood of its answers in nats, answer tokens)."""
    model.eval()
    out: list[tuple[float, int]] = []
    for i in range(0, len(sentences), batch_size):
        seqs = [tok.encode_demonstration(s) for s in sentences[i:i + batch_size]]
        width = max(len(s) for s in seqs) - 1
        x = torch.full((len(seqs), width), tok.pad_id, dtype=torch.long)
        y = torch.full((len(seqs), width), -100, dtype=torch.long)
        for r, s in enumerate(seqs):
            flags = answer_flags([tok.word(t) for t in s])[1:]
            x[r, :len(s) - 1] = torch.tensor(s[:-1])
            y[r, :len(s) - 1] = torch.tensor([t if f else -100 for t, f in zip(s[1:], flags)])
        logits, _ = model(x)
        nll = F.cross_entropy(logits.transpose(1, 2), y, ignore_index=-100, reduction="none").sum(1)
        out += [(float(v), int(n)) for v, n in zip(nll, (y != -100).sum(1))]
    return out


def _prompt_words(sentences: Sequence[str]) -> set[str]:
    """Every word the sentences say before their first `sketch`."""
    out: set[str] = set()
    for s in sentences:
        words = s.split()
        out.update(words[:words.index("sketch")] if "sketch" in words else words)
    return out


def sft(base_dir: str, sentences: Sequence[str], out_dir: str, epochs: float = 4.0,
        batch_size: int = 16, lr: float = 3e-4, seed: int = 0, threads: int | None = None,
        log: Callable[[str], None] | None = print, time_limit: float | None = None,
        quality: dict | None = None, device: str = "cpu", learn: str = "answers") -> dict:
    """Fine-tune a fresh copy of the model in `base_dir` on demonstration sentences;
    the result (checkpoint + tokenizer) goes to `out_dir`. Resumable like `pretrain`, and
    like it trains on `device` ("cpu" or "cuda").

    Structural words the base's vocabulary lacks (`quality`, for a model pre-trained
    before the quality prompt existed) are appended to the copy's vocabulary, each with
    a new embedding row (`GPT.grow_vocab`). `quality` (tlmir.lm.quality.quality_config)
    is stored in the model's config.json: the tier its prompts ask for (by default the
    base's own, if it is conditioned); so are the hardware prompts of the demonstrations
    (`sft.hardware`), which generation can prompt with on another host
    (SearchParams.tlm_prompt = "nearest", tlmir.lm.prompt_hardware)."""
    from .checkpoint import load_checkpoint, save_checkpoint
    from .train import pretrain
    if learn not in LEARN:
        raise ModelError(f"SFT into {out_dir}: learn must be one of {', '.join(LEARN)}, got {learn!r}")
    tok = Tokenizer.load(os.path.join(base_dir, TOKENIZER_FILE))
    base, base_meta = load_checkpoint(base_dir, expect_vocab_size=tok.vocab_size)
    quality = quality if quality is not None else base_meta.get("quality")  # a conditioned base stays so
    if not sentences:
        raise ModelError(f"SFT into {out_dir}: no demonstration sentences")
    grow = tok.covers([w for w in STRUCTURAL_WORDS if w in _prompt_words(sentences)])
    init = base_dir
    if grow:
        tok = tok.extended(grow)
        base = base.grow_vocab(tok.vocab_size)
        init = out_dir.rstrip("/") + ".init"
        save_checkpoint(base, init)
        if log:
            log(f"SFT into {out_dir}: vocabulary grown by {grow} to {tok.vocab_size} words")
    # a sentence with unknown decision words is skipped; one of another language version is
    # refused by the strict encoding below; unknown prompt words read as <unk>
    spelled = [s for s in sentences if s.split()[1:2] != [VERSION] or not tok.unknown_decisions(s)]
    if len(spelled) < len(sentences) and log:
        # e.g. programs of a sketch rule newer than the vocabulary (a packed input's loops):
        # the model cannot read them, so it cannot learn from them; they stay in the records
        log(f"SFT into {out_dir}: skipping {len(sentences) - len(spelled)} of {len(sentences)} "
            f"demonstrations with words outside the vocabulary of {tok.vocab_size}")
    if not spelled:
        raise ModelError(f"SFT into {out_dir}: none of the {len(sentences)} demonstrations can be "
                         f"written in the model's vocabulary (e.g. {tok.unknown_decisions(sentences[0])[:5]})")
    seqs = [tok.encode_demonstration(s) for s in spelled]
    too_long = [len(s) for s in seqs if len(s) - 1 > base.config.block_size]
    if too_long:
        raise ModelError(f"SFT into {out_dir}: {len(too_long)} demonstrations are longer than the "
                         f"model's block size {base.config.block_size} (longest {max(too_long)} tokens)")
    steps = max(1, math.ceil(epochs * len(seqs) / batch_size))
    os.makedirs(out_dir, exist_ok=True)
    tok.save(os.path.join(out_dir, TOKENIZER_FILE))
    extra = {"sft": {"demonstrations": len(seqs), "skipped": len(sentences) - len(seqs), "epochs": epochs,
                     "learn": learn, "hardware": demonstrated_hardware(spelled)}}
    if quality is not None:
        extra["quality"] = quality
    try:
        return pretrain(seqs, [], base.config, out_dir, tok.pad_id, steps=steps, batch_size=batch_size,
                        lr=lr, warmup=min(20, steps // 10), seed=seed, eval_every=max(steps, 1),
                        log=log, loss_mask=sft_loss_mask(tok, learn), init_from=init, time_limit=time_limit,
                        extra=extra, threads=threads, device=device)
    finally:
        if init != base_dir:
            shutil.rmtree(init, ignore_errors=True)
