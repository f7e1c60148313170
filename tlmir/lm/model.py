"""The tensor language model: a GPT-2 decoder in plain PyTorch.

    config = GPTConfig.preset("tiny", vocab_size=812)
    model = GPT(config)
    logits, loss = model(idx, targets)          # training: [B, T] -> [B, T, V]

Architecture (GPT-2): token + learned position embeddings, `n_layer` pre-LayerNorm
blocks (LN -> causal self-attention -> residual, LN -> 4x MLP with GELU -> residual),
a final LayerNorm and an output head whose weight *is* the token embedding (tied).
Initialisation: normal(0, 0.02) everywhere, residual output projections scaled by
1/sqrt(2 * n_layer), biases zero.

Generation uses a ragged KV cache, so that a batch of candidates that each need a
different number of tokens fed can advance together in one call:

    cache = model.new_cache(1)
    logits = model.step(prompt[None], torch.tensor([len(prompt)]), cache)
    cache = cache.expand(64)                    # the prompt is computed once, shared
    logits = model.step(tokens, n_new, cache)   # row b feeds tokens[b, :n_new[b]]

The cache's tensors start with room for a few positions and double as rows grow
(up to `capacity`, by default block_size), so a batch of 64 short rows stays small.
`step` runs under `torch.inference_mode()`; it never builds an autograd graph.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..errors import ModelError

# Shape hyper-parameters of the named model sizes (parameters without the embeddings):
# tiny 0.8 M, mini 4.7 M, small 10.6 M, medium 25 M, gpt2-small 85 M (the paper's GPT-2).
PRESETS: dict[str, dict] = {
    "tiny": dict(n_layer=4, n_head=4, n_embd=128),
    "mini": dict(n_layer=6, n_head=8, n_embd=256),
    "small": dict(n_layer=6, n_head=6, n_embd=384),
    "medium": dict(n_layer=8, n_head=8, n_embd=512),
    "gpt2-small": dict(n_layer=12, n_head=12, n_embd=768),
}


@dataclass
class GPTConfig:
    vocab_size: int
    n_layer: int
    n_head: int
    n_embd: int
    block_size: int = 1024   # longest sequence (number of positions) the model can see
    dropout: float = 0.0
    bias: bool = True        # biases in Linear and LayerNorm layers

    def __post_init__(self):
        for name in ("vocab_size", "n_layer", "n_head", "n_embd", "block_size"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise ModelError(f"GPTConfig.{name} must be a positive integer, got {v!r}")
        if self.n_embd % self.n_head:
            raise ModelError(f"GPTConfig.n_embd={self.n_embd} is not divisible by n_head={self.n_head}")
        if not isinstance(self.dropout, (int, float)) or not 0.0 <= self.dropout < 1.0:
            raise ModelError(f"GPTConfig.dropout must be in [0, 1), got {self.dropout!r}")
        if not isinstance(self.bias, bool):
            raise ModelError(f"GPTConfig.bias must be a bool, got {self.bias!r}")

    @classmethod
    def preset(cls, name: str, vocab_size: int, block_size: int = 1024, **overrides) -> "GPTConfig":
        """The named shape (see PRESETS) for a vocabulary; `overrides` set dropout, bias..."""
        if name not in PRESETS:
            raise ModelError(f"unknown model preset {name!r}; presets: {', '.join(PRESETS)}")
        return cls(vocab_size=vocab_size, block_size=block_size, **{**PRESETS[name], **overrides})

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head


class KVCache:
    """Per-layer keys and values of the positions already fed, for a batch of rows.

    `k[i]`, `v[i]`: [B, n_head, allocated, head_dim] for layer i; `lengths`: [B] (long),
    the number of valid positions of each row (row b's are 0 .. lengths[b]-1; anything
    beyond is stale). Rows are independent: each may have a different length.
    `capacity` is the most positions a row may reach; the tensors start smaller and
    grow (doubling) as rows get longer, so a wide batch costs memory only for the
    positions actually used.
    """

    INITIAL = 128  # positions allocated up front

    def __init__(self, k: list[torch.Tensor], v: list[torch.Tensor], lengths: torch.Tensor,
                 capacity: int | None = None):
        self.k, self.v, self.lengths = k, v, lengths
        self.capacity = k[0].shape[2] if capacity is None else capacity

    @property
    def batch_size(self) -> int:
        return self.lengths.shape[0]

    @property
    def allocated(self) -> int:
        return self.k[0].shape[2]

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.k + self.v)

    @torch.inference_mode()
    def reserve(self, positions: int) -> None:
        """Make room for `positions` (<= capacity) positions per row."""
        have = self.allocated
        if positions <= have:
            return
        if positions > self.capacity:
            raise ModelError(f"cache: {positions} positions exceed its capacity {self.capacity}")
        size = min(self.capacity, max(positions, 2 * have))
        n = int(self.lengths.max()) if self.batch_size else 0

        def grow(t: torch.Tensor) -> torch.Tensor:
            out = t.new_zeros(t.shape[0], t.shape[1], size, t.shape[3])
            out[:, :, :n] = t[:, :, :n]
            return out

        self.k = [grow(t) for t in self.k]
        self.v = [grow(t) for t in self.v]

    @torch.inference_mode()
    def select(self, rows) -> "KVCache":
        """Keep only `rows` (indices, in that order; repeats allowed; or a [B] bool mask).

        Modifies this cache in place and returns it, so `cache = cache.select(rows)` and
        `cache.select(rows)` both work.
        """
        rows = torch.as_tensor(rows, device=self.lengths.device)
        if rows.dtype == torch.bool:
            if rows.shape != self.lengths.shape:
                raise ModelError(f"select: mask of shape {tuple(rows.shape)} for a cache of {self.batch_size} rows")
            rows = rows.nonzero().flatten()
        rows = rows.long().flatten()
        if rows.numel() and (int(rows.min()) < 0 or int(rows.max()) >= self.batch_size):
            raise ModelError(f"select: row index out of range for a cache of {self.batch_size} rows")
        self.k = [t.index_select(0, rows) for t in self.k]
        self.v = [t.index_select(0, rows) for t in self.v]
        self.lengths = self.lengths.index_select(0, rows)
        return self

    @torch.inference_mode()
    def expand(self, batch_size: int, capacity: int | None = None) -> "KVCache":
        """A new cache of `batch_size` copies of this batch-1 cache's row (e.g. a prompt
        computed once, shared by every candidate). `capacity` defaults to this cache's;
        only the valid prefix is copied. This cache is left unchanged."""
        if self.batch_size != 1:
            raise ModelError(f"expand needs a batch-1 cache, this one has {self.batch_size} rows")
        capacity = self.capacity if capacity is None else capacity
        n = int(self.lengths[0])
        if capacity < n:
            raise ModelError(f"expand: capacity {capacity} is below the cached length {n}")
        size = min(capacity, max(n + self.INITIAL, self.allocated))

        def copy(t: torch.Tensor) -> torch.Tensor:
            out = t.new_zeros(batch_size, t.shape[1], size, t.shape[3])
            out[:, :, :n] = t[:, :, :n]
            return out

        return KVCache([copy(t) for t in self.k], [copy(t) for t in self.v],
                       self.lengths.expand(batch_size).clone(), capacity)

    def repeat(self, n: int) -> "KVCache":
        """Same as `expand(n)` (a batch-1 cache repeated n times)."""
        return self.expand(n)

    @torch.inference_mode()
    def clone(self) -> "KVCache":
        return KVCache([t.clone() for t in self.k], [t.clone() for t in self.v], self.lengths.clone(),
                       self.capacity)


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.n_head, self.n_embd = config.n_head, config.n_embd
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = config.dropout
        self.resid_dropout = nn.Dropout(config.dropout)

    def _qkv(self, x: torch.Tensor):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        shape = (B, T, self.n_head, C // self.n_head)
        return (q.view(shape).transpose(1, 2), k.view(shape).transpose(1, 2),
                v.view(shape).transpose(1, 2))

    def _out(self, y: torch.Tensor) -> torch.Tensor:
        B, H, T, D = y.shape
        return self.resid_dropout(self.c_proj(y.transpose(1, 2).reshape(B, T, H * D)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self._qkv(x)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                           dropout_p=self.dropout if self.training else 0.0)
        return self._out(y)

    def step(self, x, k_cache, v_cache, where, span: int, mask):
        """Cached attention; `where` = (rows, new-token indices, positions) of the valid
        new tokens, whose keys/values are written into the cache before attending."""
        q, k, v = self._qkv(x)
        rows, cols, pos = where
        k_cache[rows, :, pos] = k[rows, :, cols]
        v_cache[rows, :, pos] = v[rows, :, cols]
        y = F.scaled_dot_product_attention(q, k_cache[:, :, :span], v_cache[:, :, :span], attn_mask=mask)
        return self._out(y)


class MLP(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))

    def step(self, x, k_cache, v_cache, where, span, mask) -> torch.Tensor:
        x = x + self.attn.step(self.ln_1(x), k_cache, v_cache, where, span, mask)
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.block_size, config.n_embd)
        self.drop = nn.Dropout(config.dropout)
        self.h = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # tied: one tensor, two uses
        self.apply(self._init_weights)
        resid_std = 0.02 / math.sqrt(2 * config.n_layer)
        for block in self.h:
            nn.init.normal_(block.attn.c_proj.weight, mean=0.0, std=resid_std)
            nn.init.normal_(block.mlp.c_proj.weight, mean=0.0, std=resid_std)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def grow_vocab(self, vocab_size: int) -> "GPT":
        """A copy of this model for a vocabulary extended at its end (`Tokenizer.extended`):
        the new words' embedding rows start at the mean of the old ones, every other weight
        is this model's."""
        if vocab_size < self.config.vocab_size:
            raise ModelError(f"grow_vocab: {vocab_size} words is fewer than the model's {self.config.vocab_size}")
        grown = GPT(dataclasses.replace(self.config, vocab_size=vocab_size))
        state = {k: v.clone() for k, v in self.state_dict().items()}
        old = state["wte.weight"]
        extra = old.mean(dim=0, keepdim=True).expand(vocab_size - old.shape[0], -1)
        state["wte.weight"] = state["lm_head.weight"] = torch.cat([old, extra])
        grown.load_state_dict(state)
        return grown.train(self.training)

    def num_params(self, non_embedding: bool = False) -> int:
        """Parameter count (the tied head counted once); optionally without position embeddings."""
        n = sum(p.numel() for p in self.parameters())
        return n - self.wpe.weight.numel() if non_embedding else n

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        """Logits [B, T, V] for every position, and the mean next-token cross-entropy over
        the targets that are not -100 (None without targets)."""
        B, T = idx.shape
        if T > self.config.block_size:
            raise ModelError(f"sequence of {T} tokens exceeds block_size {self.config.block_size}")
        pos = torch.arange(T, device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1), ignore_index=-100)
        return logits, loss

    # -- generation --------------------------------------------------------------------

    def new_cache(self, batch_size: int, capacity: int | None = None) -> KVCache:
        """An empty cache for `batch_size` rows of up to `capacity` (<= block_size) positions."""
        cfg = self.config
        capacity = cfg.block_size if capacity is None else capacity
        if not 0 < capacity <= cfg.block_size:
            raise ModelError(f"cache capacity {capacity} must be in 1..block_size ({cfg.block_size})")
        p = self.wte.weight
        with torch.inference_mode():
            shape = (batch_size, cfg.n_head, min(capacity, KVCache.INITIAL), cfg.head_dim)
            k = [torch.zeros(shape, dtype=p.dtype, device=p.device) for _ in range(cfg.n_layer)]
            v = [torch.zeros(shape, dtype=p.dtype, device=p.device) for _ in range(cfg.n_layer)]
            lengths = torch.zeros(batch_size, dtype=torch.long, device=p.device)
        return KVCache(k, v, lengths, capacity)

    @torch.inference_mode()
    def step(self, tokens: torch.Tensor, n_new: torch.Tensor, cache: KVCache) -> torch.Tensor:
        """Feed row b its tokens[b, :n_new[b]] at positions cache.lengths[b] onwards.

        Each new token attends to its row's cached positions and the new tokens before
        it; their keys/values are stored and cache.lengths grows by n_new. Returns logits
        [B, L, V]; those at padding positions (j >= n_new[b]) are unspecified.
        """
        cfg = self.config
        tokens = torch.as_tensor(tokens)
        if tokens.dim() != 2 or tokens.dtype not in (torch.int64, torch.int32):
            raise ModelError(f"step: tokens must be integer ids [B, L], got {tokens.dtype} {tuple(tokens.shape)}")
        B, L = tokens.shape
        if cache.batch_size != B or len(cache.k) != cfg.n_layer:
            raise ModelError(f"step: {B} rows of tokens for a cache of {cache.batch_size} rows "
                             f"and {len(cache.k)} layers (model has {cfg.n_layer})")
        device = cache.lengths.device
        tokens = torch.as_tensor(tokens, device=device)
        n_new = torch.as_tensor(n_new, device=device).long().reshape(-1)
        if n_new.shape[0] != B:
            raise ModelError(f"step: n_new has {n_new.shape[0]} entries for {B} rows")
        if B == 0 or L == 0:
            return torch.zeros(B, L, cfg.vocab_size, device=device)
        if int(n_new.min()) < 0 or int(n_new.max()) > L:
            raise ModelError(f"step: n_new must be in 0..{L} (the width of tokens)")
        new_lengths = cache.lengths + n_new
        span = int(new_lengths.max())
        limit = min(cache.capacity, cfg.block_size)
        if span > limit:
            raise ModelError(f"step: a row would reach {span} positions, beyond the cache capacity "
                             f"{cache.capacity} / block_size {cfg.block_size}")
        if span == 0:  # nothing fed anywhere, nothing cached
            return torch.zeros(B, L, cfg.vocab_size, device=device)

        j = torch.arange(L, device=device)
        pos = cache.lengths[:, None] + j[None, :]          # [B, L] absolute positions
        valid = j[None, :] < n_new[:, None]                # [B, L] real (non-padding) tokens
        rows, cols = valid.nonzero(as_tuple=True)
        where = (rows, cols, pos[rows, cols])
        # padding may hold any id and run past the limit: neutralise it (its logits are unused)
        idx = torch.where(valid, tokens, torch.zeros_like(tokens))
        if int(idx.min()) < 0 or int(idx.max()) >= cfg.vocab_size:
            raise ModelError(f"step: token id outside the vocabulary 0..{cfg.vocab_size - 1}")
        cache.reserve(span)
        x = self.wte(idx) + self.wpe(pos.clamp(max=limit - 1))
        # query (b, j) sees key position p iff p <= pos[b, j]: its own cache + new tokens up to j
        mask = (torch.arange(span, device=device)[None, None, :] <= pos[:, :, None]).unsqueeze(1)
        for i, block in enumerate(self.h):
            x = block.step(x, cache.k[i], cache.v[i], where, span, mask)
        cache.lengths = new_lengths
        return self.lm_head(self.ln_f(x))
