"""Generative models: the PyTorch DCGAN example's generator and one LLaMA-style
decoder layer, both in plain torch and torch.export-friendly."""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..errors import DefinitionError


class DCGANGenerator(nn.Module):
    """(N, nz, 1, 1) noise -> (N, nc, 64, 64) image: five 4x4 transposed convs (no bias),
    BN + ReLU between them, Tanh at the end (pytorch/examples dcgan `Generator`)."""

    def __init__(self, nz: int = 100, ngf: int = 64, nc: int = 3):
        super().__init__()
        layers: list[nn.Module] = [nn.ConvTranspose2d(nz, ngf * 8, 4, 1, 0, bias=False),
                                   nn.BatchNorm2d(ngf * 8), nn.ReLU(True)]
        for mult in (8, 4, 2):
            layers += [nn.ConvTranspose2d(ngf * mult, ngf * mult // 2, 4, 2, 1, bias=False),
                       nn.BatchNorm2d(ngf * mult // 2), nn.ReLU(True)]
        layers += [nn.ConvTranspose2d(ngf, nc, 4, 2, 1, bias=False), nn.Tanh()]
        self.main = nn.Sequential(*layers)
        for m in self.modules():     # the example's weights_init
            if isinstance(m, nn.ConvTranspose2d):
                nn.init.normal_(m.weight, 0.0, 0.02)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.normal_(m.weight, 1.0, 0.02)
                nn.init.zeros_(m.bias)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.main(z)


def dcgan_generator(nz: int = 100, ngf: int = 64, nc: int = 3) -> nn.Module:
    return DCGANGenerator(nz, ngf, nc)


class RMSNorm(nn.Module):
    """x * rsqrt(mean(x^2) + eps) * weight over the last axis."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Attention(nn.Module):
    """Causal multi-head softmax attention with bias-free q/k/v/o projections; the
    additive causal mask is a (max_seq, max_seq) buffer sliced to the sequence length."""

    def __init__(self, dim: int, n_heads: int, max_seq: int = 2048):
        super().__init__()
        self.n_heads = n_heads
        self.head_dim = dim // n_heads
        self.wq = nn.Linear(dim, dim, bias=False)
        self.wk = nn.Linear(dim, dim, bias=False)
        self.wv = nn.Linear(dim, dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)
        mask = torch.triu(torch.full((max_seq, max_seq), float("-inf")), diagonal=1)
        self.register_buffer("mask", mask, persistent=False)

    def _heads(self, x: torch.Tensor, b: int, s: int) -> torch.Tensor:
        return x.view(b, s, self.n_heads, self.head_dim).transpose(1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q = self._heads(self.wq(x), b, s)
        k = self._heads(self.wk(x), b, s)
        v = self._heads(self.wv(x), b, s)
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.head_dim)
        scores = scores + self.mask[:s, :s]
        out = torch.matmul(torch.softmax(scores, dim=-1), v)
        return self.wo(out.transpose(1, 2).reshape(b, s, d))


class FeedForward(nn.Module):
    """SwiGLU MLP: w2(silu(w1 x) * w3 x), no biases."""

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class LlamaDecoderLayer(nn.Module):
    """Pre-norm block: h = x + attn(rmsnorm(x)); out = h + ffn(rmsnorm(h)).

    Rotary position embeddings are left out (they do not change the layer's operator
    mix much and keep the graph simple); the module names follow Meta's reference code.
    """

    def __init__(self, dim: int = 4096, n_heads: int = 32, hidden: int = 11008,
                 eps: float = 1e-6, max_seq: int = 2048):
        super().__init__()
        if dim % n_heads:
            raise DefinitionError(f"llama layer: dim {dim} is not divisible by n_heads {n_heads}")
        self.attention_norm = RMSNorm(dim, eps)
        self.attention = Attention(dim, n_heads, max_seq)
        self.ffn_norm = RMSNorm(dim, eps)
        self.feed_forward = FeedForward(dim, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x + self.attention(self.attention_norm(x))
        return h + self.feed_forward(self.ffn_norm(h))


def llama_decoder_layer(dim: int = 4096, n_heads: int = 32, hidden: int = 11008,
                        eps: float = 1e-6, max_seq: int = 2048) -> nn.Module:
    """One LLaMA-7B-shaped decoder layer (no rotary embedding); input (batch, seq, dim),
    seq <= max_seq."""
    return LlamaDecoderLayer(dim, n_heads, hidden, eps, max_seq)
