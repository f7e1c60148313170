"""Training the tensor language model: next-token pre-training and fine-tuning on the answers.

    stats = pretrain(train_ids, val_ids, GPTConfig.preset("tiny", tok.vocab_size),
                     "runs/tlm-base", pad_id=tok.pad_id, steps=5000)
    # SFT: start from the base weights, score only the answer tokens
    pretrain(sft_ids, sft_val, config, "runs/tlm-sft", tok.pad_id, steps=500,
             init_from="runs/tlm-base", loss_mask=sft_loss_mask(tok))

Each step draws `batch_size` sequences (a fresh random permutation of the training set
every epoch, fixed by `seed` and the step number alone), pads them to the longest with
`pad_id`, and minimises the mean cross-entropy of every real next token (padding, and
positions `loss_mask` turns off, get target -100). AdamW (weight decay on 2-D weights
only), linear warm-up then cosine decay to 10% of `lr` at `steps`, gradient clipping 1.0.

`out_dir` ends up holding a loadable model checkpoint (model.safetensors + config.json,
see checkpoint.py, with the training stats under "train"), the optimizer state and RNG
(`train_state.safetensors`), `history.json` and `loss.png`. Checkpoints are written at
every evaluation, when `time_limit` runs out and at the end. Calling `pretrain` again
with the same `out_dir` resumes from the last checkpoint: same batches, same schedule
(for the same `steps`), same optimizer state. Nothing is pickled.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import save_file

from ..errors import ModelError
from ..runtime.files import atomic_write, atomic_write_text
from .checkpoint import (CONFIG, load_checkpoint, load_training_state, read_config, save_checkpoint, sha256_file,
                         training_state)
from .model import GPT, GPTConfig

TRAIN_STATE = "train_state.safetensors"
HISTORY = "history.json"
PLOT = "loss.png"
_STATE_FORMAT = "tlmir-train-state"


# -- data ----------------------------------------------------------------------------------

class Packed:
    """Token-id sequences stored flat: sequence i is ids[offsets[i]:offsets[i + 1]]. A corpus
    of a million sentences is two numpy arrays, not a million tensors."""

    def __init__(self, ids: np.ndarray, offsets: np.ndarray):
        self.ids, self.offsets = ids, offsets.astype(np.int64)

    @classmethod
    def of(cls, sequences) -> "Packed":
        if isinstance(sequences, Packed):
            return sequences
        seqs = [np.asarray(list(s), dtype=np.int64) for s in sequences]
        offsets = np.zeros(len(seqs) + 1, dtype=np.int64)
        offsets[1:] = np.cumsum([len(s) for s in seqs])
        return cls(np.concatenate(seqs) if seqs else np.zeros(0, np.int64), offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def __getitem__(self, i: int) -> np.ndarray:
        return self.ids[self.offsets[i]:self.offsets[i + 1]]

    def take(self, rows: np.ndarray) -> "Packed":
        """The sequences `rows`, in that order, without a Python list per sequence."""
        lengths = self.lengths()[rows]
        offsets = np.zeros(len(rows) + 1, np.int64)
        offsets[1:] = np.cumsum(lengths)
        starts = np.repeat(self.offsets[rows] - offsets[:-1], lengths)
        return Packed(self.ids[starts + np.arange(offsets[-1])], offsets)


class _Data:
    """Sequences for training: inputs seq[:-1], targets seq[1:] with -100 where not scored."""

    def __init__(self, sequences, config: GPTConfig, loss_mask, what: str):
        self.seqs = Packed.of(sequences)
        lengths = self.seqs.lengths()
        self.lengths = lengths - 1                 # input tokens of each sequence
        if len(lengths) and lengths.min() < 2:
            i = int(np.argmin(lengths))
            raise ModelError(f"{what} sequence {i} has {lengths[i]} tokens; at least 2 are needed")
        if len(lengths) and lengths.max() - 1 > config.block_size:
            i = int(np.argmax(lengths))
            raise ModelError(f"{what} sequence {i} has {lengths[i]} tokens; block_size "
                             f"{config.block_size} allows at most {config.block_size + 1}")
        ids = self.seqs.ids
        if ids.size and (ids.min() < 0 or ids.max() >= config.vocab_size):
            bad = ids[(ids < 0) | (ids >= config.vocab_size)][0]
            i = int(np.searchsorted(self.seqs.offsets, int(np.argmax(ids == bad)), side="right")) - 1
            raise ModelError(f"{what} sequence {i} holds token id {bad}, "
                             f"outside the vocabulary 0..{config.vocab_size - 1}")
        self.scored_flags = np.ones(ids.size, dtype=bool)  # flag of token t: is it predicted?
        self.scored_flags[self.seqs.offsets[:-1]] = False
        if loss_mask is not None:
            for i in range(len(self.seqs)):
                seq = self.seqs[i].tolist()
                m = [bool(b) for b in loss_mask(seq)]
                if len(m) == len(seq) - 1:
                    m = [False] + m
                elif len(m) != len(seq):
                    raise ModelError(f"loss_mask gave {len(m)} flags for {what} sequence {i} of "
                                     f"{len(seq)} tokens (expected {len(seq)} or {len(seq) - 1})")
                m[0] = False
                self.scored_flags[self.seqs.offsets[i]:self.seqs.offsets[i + 1]] = m
        self.scored = int(self.scored_flags.sum())

    def __len__(self) -> int:
        return len(self.seqs)

    def batch(self, rows, pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor, int]:
        """(inputs [B, T], targets [B, T], number of real input tokens), padded to the longest."""
        width = int(max(self.lengths[r] for r in rows))
        x = np.full((len(rows), width), pad_id, dtype=np.int64)
        y = np.full((len(rows), width), -100, dtype=np.int64)
        real = 0
        for i, r in enumerate(rows):
            lo, hi = self.seqs.offsets[r], self.seqs.offsets[r + 1]
            n = int(hi - lo - 1)
            x[i, :n] = self.seqs.ids[lo:hi - 1]
            y[i, :n] = np.where(self.scored_flags[lo + 1:hi], self.seqs.ids[lo + 1:hi].astype(np.int64), -100)
            real += n
        return torch.from_numpy(x).to(device), torch.from_numpy(y).to(device), real


class _Order:
    """Which sequences step s trains on: slots s*B .. s*B+B-1 of an endless series of
    per-epoch permutations, so the batches depend only on (seed, step)."""

    def __init__(self, n: int, batch_size: int, seed: int):
        self.n, self.batch_size, self.seed = n, batch_size, seed
        self._perms: dict[int, list[int]] = {}

    def _perm(self, epoch: int) -> list[int]:
        if epoch not in self._perms:
            if len(self._perms) > 2:
                self._perms.pop(min(self._perms))
            g = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
            self._perms[epoch] = torch.randperm(self.n, generator=g).tolist()
        return self._perms[epoch]

    def rows(self, step: int) -> list[int]:
        start = step * self.batch_size
        return [self._perm(k // self.n)[k % self.n] for k in range(start, start + self.batch_size)]


def lr_at(step: int, steps: int, lr: float, warmup: int) -> float:
    """Learning rate of (0-based) step: linear warm-up to lr, cosine decay to lr/10 at `steps`."""
    if step < warmup:
        return lr * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, steps - warmup))
    min_lr = 0.1 * lr
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (lr - min_lr)


@torch.no_grad()
def evaluate(model: GPT, data: _Data, pad_id: int, batch_size: int, device) -> float | None:
    """Mean cross-entropy over every scored target of `data` (None when there are none)."""
    if not len(data) or not data.scored:
        return None
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    order = np.argsort(data.lengths, kind="stable").tolist()  # little padding
    for i in range(0, len(order), batch_size):
        x, y, _ = data.batch(order[i:i + batch_size], pad_id, device)
        logits, _ = model(x)
        total += float(F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1),
                                       ignore_index=-100, reduction="sum"))
        count += int((y != -100).sum())
    model.train(was_training)
    return total / count


# -- checkpoints of a training run ---------------------------------------------------------

def _finite(x: float | None) -> float | None:
    """JSON-safe loss: None for a missing or non-finite (diverged) value."""
    return x if x is not None and math.isfinite(x) else None


def _same_shape(a: GPTConfig, b: GPTConfig) -> bool:
    da, db = dataclasses.asdict(a), dataclasses.asdict(b)
    da.pop("dropout"), db.pop("dropout")
    return da == db


def optimizer(model: GPT, lr: float, weight_decay: float) -> torch.optim.AdamW:
    """AdamW with weight decay on the 2-D weights only (not biases, LayerNorm gains)."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}], lr=lr, betas=(0.9, 0.95))


def _plot(history: list[dict], path: str) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4.2), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    tr = [(h["step"], h["train_loss"]) for h in history if h.get("train_loss") is not None]
    va = [(h["step"], h["val_loss"]) for h in history if h.get("val_loss") is not None]
    if tr:
        ax.plot(*zip(*tr), label="train", lw=1.2)
    if va:
        ax.plot(*zip(*va), "o-", label="validation", lw=1.2, ms=3)
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats/token)")
    ax.set_title(f"{os.path.basename(os.path.dirname(os.path.abspath(path)))}: loss")
    ax.grid(alpha=0.3)
    if tr or va:
        ax.legend()
    fig.tight_layout()
    atomic_write(path, lambda tmp: fig.savefig(tmp, format="png"))


# -- the training loop ---------------------------------------------------------------------

def pretrain(sequences, val_sequences, config: GPTConfig,
             out_dir: str, pad_id: int, steps: int, batch_size: int = 32, lr: float = 3e-4,
             warmup: int = 100, weight_decay: float = 0.1, seed: int = 0, eval_every: int = 200,
             log: Callable[[str], None] | None = print, loss_mask: Callable | None = None,
             init_from: str | None = None, time_limit: float | None = None,
             extra: dict | None = None, device: str = "cpu", threads: int | None = None,
             bf16: bool = False) -> dict:
    """Train (or resume training) a GPT on token-id sequences (lists, or a `Packed`);
    returns the final stats.

    `loss_mask(seq)` -> flags, one per token of seq (flag i: is token i scored, i.e.
    predicted from seq[:i]; flag 0 is ignored) or one per target (seq[1:]).
    `init_from`: a checkpoint directory whose weights start a fresh run (ignored when
    resuming). `time_limit`: seconds after which training stops, checkpointed, at the
    end of the current step. `extra`: more JSON stored in the checkpoint's config.json.
    `threads`: torch intra-op threads while training (default os.cpu_count(); the
    previous setting is restored on return). `bf16`: forward passes under bfloat16
    autocast (weights, gradients and optimizer state stay float32); on a CPU with
    AVX512-BF16 or a GPU it is several times faster.
    """
    t_call = time.monotonic()
    log = log or (lambda s: None)
    if steps < 0 or batch_size < 1 or eval_every < 1 or warmup < 0:
        raise ModelError("pretrain needs steps >= 0, batch_size >= 1, eval_every >= 1, warmup >= 0")
    if not 0 <= pad_id < config.vocab_size:
        raise ModelError(f"pad_id {pad_id} is outside the vocabulary 0..{config.vocab_size - 1}")
    train = _Data(sequences, config, loss_mask, "training")
    val = _Data(val_sequences or [], config, loss_mask, "validation")
    if not len(train) or not train.scored:
        raise ModelError("pretrain needs at least one training sequence with a scored target")
    os.makedirs(out_dir, exist_ok=True)
    state_path = os.path.join(out_dir, TRAIN_STATE)
    hist_path = os.path.join(out_dir, HISTORY)

    old_threads = torch.get_num_threads()
    torch.set_num_threads(threads or os.cpu_count() or 1)
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            # -- start: resume, init_from, or fresh ----------------------------------------
            resumed_from = None
            history: list[dict] = []
            step, tokens_seen, elapsed0, best_val = 0, 0, 0.0, None
            if os.path.exists(os.path.join(out_dir, CONFIG)):
                saved_cfg, meta = read_config(out_dir)
                train_meta = meta.get("train")
                if not isinstance(train_meta, dict) or not os.path.isfile(state_path):
                    raise ModelError(f"{out_dir} holds a model checkpoint but no training state; "
                                     "pass it as init_from with a new out_dir")
                if not _same_shape(saved_cfg, config):
                    raise ModelError(f"{out_dir} holds a run of config {dataclasses.asdict(saved_cfg)}, "
                                     f"not {dataclasses.asdict(config)}")
                if sha256_file(state_path) != meta.get("train_state_sha256"):
                    raise ModelError(f"{state_path} does not match its checkpoint (interrupted save?)")
                loaded, _ = load_checkpoint(out_dir)
                model = GPT(config)
                model.load_state_dict(loaded.state_dict())
                step = int(train_meta["step"])
                tokens_seen = int(train_meta.get("tokens_seen", 0))
                elapsed0 = float(train_meta.get("elapsed_seconds", 0.0))
                best_val = train_meta.get("best_val_loss")
                resumed_from = step
                if os.path.isfile(hist_path):
                    try:
                        with open(hist_path, encoding="utf-8") as f:
                            history = [h for h in json.load(f) if h["step"] <= step]
                    except (OSError, ValueError, TypeError, KeyError) as e:
                        raise ModelError(f"{hist_path} is unreadable: {e}") from None
                if step >= steps:
                    log(f"{out_dir}: already trained {step} steps (asked for {steps})")
                    return {**train_meta, "out_dir": out_dir, "completed": True, "stopped_early": False,
                            "resumed_from": step, "tokens_per_second": None,
                            "params": model.num_params()}
                log(f"{out_dir}: resuming at step {step} of {steps}")
                if init_from:
                    log(f"(init_from {init_from} ignored: resuming)")
            else:
                model = GPT(config)
                if init_from:
                    base, _ = load_checkpoint(init_from)
                    if not _same_shape(base.config, config):
                        raise ModelError(f"init_from {init_from} has config {dataclasses.asdict(base.config)}, "
                                         f"not {dataclasses.asdict(config)}")
                    model.load_state_dict(base.state_dict())
                    log(f"{out_dir}: starting from the weights of {init_from}")
            model.to(device).train()
            opt = optimizer(model, lr, weight_decay)
            if resumed_from is not None:
                load_training_state(state_path, model, opt, step)
            order = _Order(len(train), batch_size, seed)
            n_params = model.num_params()
            log(f"{out_dir}: {n_params:,} parameters, {len(train)} training sequences "
                f"({train.scored:,} scored tokens), {len(val)} validation; batch {batch_size}, "
                f"{steps} steps, {torch.get_num_threads()} threads")

            log_every = max(1, eval_every // 10)
            run_loss, run_n = 0.0, 0
            train_loss = val_loss = None
            step_time, call_tokens = 0.0, 0
            stopped_early = False
            meta_extra = dict(extra or {})

            def elapsed() -> float:
                return elapsed0 + time.monotonic() - t_call

            def checkpoint() -> None:
                tensors = training_state(model, opt)
                atomic_write(state_path, lambda tmp: save_file(
                    tensors, tmp, metadata={"format": _STATE_FORMAT, "step": str(step)}))
                atomic_write_text(hist_path, json.dumps(history, indent=1) + "\n")
                train_meta = {"step": step, "steps": steps, "tokens_seen": tokens_seen,
                              "elapsed_seconds": round(elapsed(), 3), "train_loss": _finite(train_loss),
                              "val_loss": _finite(val_loss), "best_val_loss": _finite(best_val),
                              "batch_size": batch_size,
                              "lr": lr, "warmup": warmup, "weight_decay": weight_decay, "seed": seed,
                              "eval_every": eval_every, "init_from": init_from, "bf16": bf16,
                              "loss_mask": loss_mask is not None, "params": n_params}
                save_checkpoint(model, out_dir, extra={**meta_extra, "train": train_meta,
                                                       "train_state_sha256": sha256_file(state_path)})
                _plot(history, os.path.join(out_dir, PLOT))

            while step < steps:
                t0 = time.monotonic()
                cur_lr = lr_at(step, steps, lr, warmup)
                for g in opt.param_groups:
                    g["lr"] = cur_lr
                x, y, real = train.batch(order.rows(step), pad_id, device)
                if bool((y != -100).any()):
                    with torch.autocast(torch.device(device).type, torch.bfloat16, enabled=bf16):
                        _, loss = model(x, y)
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                    opt.step()
                    run_loss += float(loss.detach())
                    run_n += 1
                step += 1
                tokens_seen += real
                call_tokens += real
                step_time += time.monotonic() - t0
                out_of_time = time_limit is not None and time.monotonic() - t_call >= time_limit
                do_eval = step % eval_every == 0 or step == steps or out_of_time
                if step % log_every == 0 or do_eval:
                    train_loss = run_loss / run_n if run_n else None
                    run_loss, run_n = 0.0, 0
                    val_loss = evaluate(model, val, pad_id, batch_size, device) if do_eval else None
                    if val_loss is not None and (best_val is None or val_loss < best_val):
                        best_val = val_loss
                    history.append({"step": step, "train_loss": _finite(train_loss),
                                    "val_loss": _finite(val_loss),
                                    "lr": cur_lr, "tokens_seen": tokens_seen,
                                    "elapsed_seconds": round(elapsed(), 3)})
                    tps = call_tokens / step_time if step_time else 0.0
                    msg = f"step {step}/{steps}"
                    msg += f" | loss {train_loss:.4f}" if train_loss is not None else ""
                    msg += f" | val {val_loss:.4f}" if val_loss is not None else ""
                    log(f"{msg} | lr {cur_lr:.2e} | {tps:,.0f} tok/s | {elapsed():.0f}s")
                    if do_eval:
                        checkpoint()
                if out_of_time and step < steps:
                    stopped_early = True
                    log(f"time limit {time_limit}s reached at step {step}; checkpointed")
                    break
            else:
                if resumed_from is None and steps == 0:  # nothing trained: still leave a checkpoint
                    val_loss = evaluate(model, val, pad_id, batch_size, device)
                    best_val = val_loss
                    checkpoint()

            return {"out_dir": out_dir, "step": step, "steps": steps, "completed": step >= steps,
                    "stopped_early": stopped_early, "resumed_from": resumed_from,
                    "train_loss": train_loss, "val_loss": val_loss, "best_val_loss": best_val,
                    "tokens_seen": tokens_seen, "elapsed_seconds": round(elapsed(), 3),
                    "tokens_per_second": call_tokens / step_time if step_time else None,
                    "params": n_params}
    finally:
        torch.set_num_threads(old_threads)
