"""The world-model evaluator: a schedule scored by rolling its decisions through latent dynamics.

After "Toward Compiler World Models" (the second seed): a program is not a static snapshot
but the sequence of scheduling actions that produced it. Here that sequence is the
program's tensor-language sentence (tlmir.lm.language):

    <s> v4 task <task prompt> hw <hardware prompt> | sketch 3 | tile C.i 1024 = 256 32 1 | ...
    '---------------- state s0 ----------------'   '---------- actions a_1 ... a_T ---------'

- the state encoder reads the task and hardware prompt (a GRU over its words) into s0;
- the action encoder embeds each decision (its words, their place in the decision, and
  the log-magnitude of every number) into a_t;
- the transition model rolls the state forward once per decision, s_t = GRUCell(a_t, s_t-1),
  so a decision is read in the context of every decision before it;
- the ranking head scores [s_T, s0, mean_t a_t] (and, with `n_features`, the lowered
  program's features from search/features.py, standardised and embedded: what the
  decisions made of the loop nest); a second output predicts the program's throughput
  normalised within its task (1 = the task's best).

`transition=False` is the ablation the paper makes: the same encoders, no dynamics, the
head reading a bag of decisions (mean and max of the a_t) instead of s_T.
Words come from the TLM's vocabulary (built from the space itself, so every answer has
a token); the evaluator keeps its own copy of the tokenizer beside its weights.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from ..errors import ModelError
from ..lm.language import EOS, QUESTION_KEYWORDS

N_NUMERIC = 3  # per word: is a number, log2(1 + |n|) / 16, n < 0


@dataclass
class WorldModelConfig:
    vocab_size: int
    d_model: int = 96
    max_decision_words: int = 48  # words of one decision beyond this are dropped
    transition: bool = True       # False: the static, no-dynamics ablation
    n_features: int = 0           # > 0: the head also reads the lowered program's features


def numeric_features(word: str) -> tuple[float, float, float]:
    """What a word says as a number: sizes and tile factors differ in magnitude, which a
    word embedding alone only learns per word."""
    text = word[:-1] if word[-1:] in ("K", "M") else word
    try:
        n = int(text)
    except ValueError:
        return (0.0, 0.0, 0.0)
    n *= {"K": 1024, "M": 1 << 20}.get(word[-1:], 1)
    return (1.0, math.log2(1 + abs(n)) / 16.0, float(n < 0))


def split_sentence(sentence: str) -> tuple[list[str], list[list[str]]]:
    """(prompt words, one word list per decision) of a sentence: the sketch choice is the
    first decision, every question keyword starts the next."""
    words = sentence.split()
    if words and words[-1] == EOS:
        words = words[:-1]
    start = words.index("sketch") if "sketch" in words else len(words)
    actions: list[list[str]] = []
    for w in words[start:]:
        if w == "sketch" or w in QUESTION_KEYWORDS or not actions:
            actions.append([w])
        else:
            actions[-1].append(w)
    return words[:start], actions


class WordEncoder(nn.Module):
    """Word id + numeric features + position in its span -> a d_model vector."""

    def __init__(self, cfg: WorldModelConfig, max_pos: int):
        super().__init__()
        self.emb = nn.Embedding(cfg.vocab_size, cfg.d_model, padding_idx=0)
        self.pos = nn.Embedding(max_pos, cfg.d_model)
        self.num = nn.Linear(N_NUMERIC, cfg.d_model)

    def forward(self, ids: torch.Tensor, num: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(ids.shape[-1], device=ids.device).clamp(max=self.pos.num_embeddings - 1)
        return self.emb(ids) + self.pos(pos) + self.num(num)


def _mlp(d_in: int, d: int, d_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(d_in, d), nn.GELU(), nn.Linear(d, d_out))


class WorldModel(nn.Module):
    def __init__(self, cfg: WorldModelConfig):
        super().__init__()
        self.config = cfg
        d = cfg.d_model
        self.prompt_words = WordEncoder(cfg, 512)
        self.action_words = WordEncoder(cfg, cfg.max_decision_words)
        self.state = nn.GRU(d, d, batch_first=True)
        self.action = _mlp(d, d, d)
        self.transition = nn.GRUCell(d, d) if cfg.transition else None
        self.features = _mlp(cfg.n_features, d, d) if cfg.n_features else None
        if cfg.n_features:  # standardisation fitted on the training programs, saved with the weights
            self.register_buffer("feature_mean", torch.zeros(cfg.n_features))
            self.register_buffer("feature_std", torch.ones(cfg.n_features))
        self.head = _mlp((4 if cfg.n_features else 3) * d, d, 2)  # ranking score, throughput logit

    def grow_vocab(self, vocab_size: int) -> "WorldModel":
        """A copy of this model for a vocabulary extended at its end (`Tokenizer.extended`):
        the new words' embedding rows start at the mean of the old ones."""
        if vocab_size < self.config.vocab_size:
            raise ModelError(f"grow_vocab: {vocab_size} words is fewer than the evaluator's "
                             f"{self.config.vocab_size}")
        grown = WorldModel(dataclasses.replace(self.config, vocab_size=vocab_size))
        state = {k: v.clone() for k, v in self.state_dict().items()}
        for key in ("prompt_words.emb.weight", "action_words.emb.weight"):
            old = state[key]
            state[key] = torch.cat([old, old[1:].mean(0, keepdim=True).expand(vocab_size - len(old), -1)])
        grown.load_state_dict(state)
        return grown.train(self.training)

    def forward(self, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """(ranking scores [B], predicted normalised throughput [B]) of an encoded batch
        (see `collate`): the distinct prompts (prompt_ids/num [U, P], prompt_len [U]) and
        each program's (prompt_index [B]), action_ids/num [B, T, W], action_mask [B, T, W]
        and, with n_features, features [B, n_features]."""
        s0 = self.encode_state(batch)[batch["prompt_index"]]
        a = self.encode_actions(batch)  # [B, T, d]
        step = batch["action_mask"].any(-1)  # [B, T] real decisions
        w = step.unsqueeze(-1).float()
        mean_a = (a * w).sum(1) / w.sum(1).clamp(min=1.0)
        if self.transition is not None:
            s = s0
            for t in range(a.shape[1]):
                s = torch.where(step[:, t:t + 1], self.transition(a[:, t], s), s)
            final = s
        else:
            final = a.masked_fill(~step.unsqueeze(-1), -1e4).max(1).values.clamp(min=-1e3)
        parts = [final, s0, mean_a]
        if self.features is not None:
            parts.append(self.features((batch["features"] - self.feature_mean) / self.feature_std))
        out = self.head(torch.cat(parts, dim=-1))
        return out[:, 0], torch.sigmoid(out[:, 1])

    def encode_state(self, batch: dict) -> torch.Tensor:
        x = self.prompt_words(batch["prompt_ids"], batch["prompt_num"])
        packed = nn.utils.rnn.pack_padded_sequence(x, batch["prompt_len"].cpu(), batch_first=True,
                                                   enforce_sorted=False)
        _, h = self.state(packed)
        return h[-1]

    def encode_actions(self, batch: dict) -> torch.Tensor:
        B, T, W = batch["action_ids"].shape
        x = self.action_words(batch["action_ids"].view(B * T, W), batch["action_num"].view(B * T, W, -1))
        m = batch["action_mask"].view(B * T, W, 1).float()
        pooled = (x * m).sum(1) / m.sum(1).clamp(min=1.0)
        return self.action(pooled).view(B, T, -1)


def collate(encoded: list[tuple], max_words: int, features: np.ndarray | None = None) -> dict:
    """Pad encoded programs (prompt ids, prompt numeric features [P, 3], per-decision ids,
    per-decision numeric features [W, 3] each) into the tensors `WorldModel.forward`
    reads; `features`: the programs' feature rows [B, n_features], if the model reads
    them. Programs of one task share a prompt: it is encoded once per batch."""
    prompts: dict[tuple, int] = {}
    index = [prompts.setdefault(tuple(e[0]), len(prompts)) for e in encoded]
    first = {}
    for e, u in zip(encoded, index):
        first.setdefault(u, e)
    U, B = len(prompts), len(encoded)
    P = max(len(e[0]) for e in encoded)
    T = max(max(len(e[2]) for e in encoded), 1)
    W = min(max((len(a) for e in encoded for a in e[2]), default=1), max_words)
    out = {"prompt_ids": torch.zeros(U, P, dtype=torch.long), "prompt_num": torch.zeros(U, P, N_NUMERIC),
           "prompt_len": torch.ones(U, dtype=torch.long), "prompt_index": torch.tensor(index),
           "action_ids": torch.zeros(B, T, W, dtype=torch.long), "action_num": torch.zeros(B, T, W, N_NUMERIC),
           "action_mask": torch.zeros(B, T, W, dtype=torch.bool)}
    for u, (pids, pnum, _, _) in first.items():
        out["prompt_ids"][u, :len(pids)] = torch.tensor(pids)
        out["prompt_num"][u, :len(pids)] = torch.as_tensor(pnum).view(-1, N_NUMERIC)
        out["prompt_len"][u] = max(len(pids), 1)
    ids = np.zeros((B, T, W), dtype=np.int64)
    num = np.zeros((B, T, W, N_NUMERIC), dtype=np.float32)
    for b, (_, _, aids, anum) in enumerate(encoded):
        for t, (a, n) in enumerate(zip(aids, anum)):
            k = min(len(a), W)
            ids[b, t, :k] = a[:k]
            num[b, t, :k] = n[:k]
    out["action_ids"] = torch.from_numpy(ids)
    out["action_num"] = torch.from_numpy(num)
    out["action_mask"] = out["action_ids"] != 0
    if features is not None:
        out["features"] = torch.as_tensor(np.asarray(features, np.float32))
    return out


def ranking_loss(scores: torch.Tensor, targets: torch.Tensor, groups: torch.Tensor) -> torch.Tensor:
    """Pairwise logistic loss over every pair of programs of the same task whose normalised
    throughputs differ, weighted by how much they differ (LambdaRank-lite)."""
    same = groups.unsqueeze(0) == groups.unsqueeze(1)
    gap = targets.unsqueeze(1) - targets.unsqueeze(0)  # > 0: i faster than j
    pairs = same & (gap > 1e-3)
    if not pairs.any():
        return scores.sum() * 0.0
    diff = scores.unsqueeze(1) - scores.unsqueeze(0)
    return (F.softplus(-diff)[pairs] * gap[pairs]).sum() / gap[pairs].sum()
