"""Transformer networks (float32), written from their model configs.

Modelling conventions (M = batch * seq tokens, d = hidden / heads):

* Linear layers -> `dense` (X: M x K, W: N x K) with bias, GELU fused into the first FFN
  dense (GPT-2's tanh-approximate GELU modelled as the erf GELU); LLaMA's are bias-free.
* Attention -> `batch_matmul` with (batch * heads) as the batch: scores Q K^T
  (M=seq, N=kv_len, K=d), then `softmax` over kv_len, then context P V (M=seq, N=d,
  K=kv_len). The 1/sqrt(d) scale, the attention / causal mask, RoPE and the head
  reshapes / transposes (layout only) are left out.
* Residual adds -> `add`; norms -> `layernorm` / `rmsnorm` with the model's eps (so e.g.
  BERT's eps 1e-12 and GPT-2's 1e-5 layernorms are different tasks, as in the real models).
* Embedding lookups (gathers) are not tasks; the encoder's pooler is left out.
"""
from __future__ import annotations

from .common import Net


def bert(layers: int, hidden: int, heads: int, seq: int = 128, batch: int = 1,
         ffn: int | None = None) -> Net:
    """BERT encoder (post-LN): embedding LN, then per layer Q/K/V/out dense, attention,
    add + LN, FFN (dense+GELU, dense), add + LN."""
    net = Net(batch)
    M, d, ffn, L = batch * seq, hidden // heads, ffn or 4 * hidden, layers
    net.layernorm(M, hidden, eps=1e-12)                                   # embeddings
    net.dense(M, hidden, hidden, times=4 * L)                             # Q, K, V, attn out
    net.batch_matmul(batch * heads, seq, seq, d, times=L)
    net.softmax(batch * heads * seq, seq, times=L)
    net.batch_matmul(batch * heads, seq, d, seq, times=L)
    net.residual((M, hidden), times=2 * L)
    net.layernorm(M, hidden, eps=1e-12, times=2 * L)
    net.dense(M, ffn, hidden, act="gelu", times=L)
    net.dense(M, hidden, ffn, times=L)
    return net


def gpt2(layers: int = 12, hidden: int = 768, heads: int = 12, seq: int = 128, batch: int = 1,
         vocab: int = 50257) -> Net:
    """GPT-2 decoder (pre-LN, fused QKV `c_attn`), final LN and the (bias-free) LM head."""
    net = Net(batch)
    M, d, L = batch * seq, hidden // heads, layers
    net.layernorm(M, hidden, eps=1e-5, times=2 * L + 1)
    net.dense(M, 3 * hidden, hidden, times=L)                             # c_attn
    net.batch_matmul(batch * heads, seq, seq, d, times=L)
    net.softmax(batch * heads * seq, seq, times=L)
    net.batch_matmul(batch * heads, seq, d, seq, times=L)
    net.dense(M, hidden, hidden, times=L)                                 # attn c_proj
    net.residual((M, hidden), times=2 * L)
    net.dense(M, 4 * hidden, hidden, act="gelu", times=L)                 # mlp c_fc
    net.dense(M, hidden, 4 * hidden, times=L)                             # mlp c_proj
    net.dense(M, vocab, hidden, bias=False)                               # lm_head
    return net


def vit(layers: int = 12, hidden: int = 768, heads: int = 12, image: int = 224, patch: int = 16,
        batch: int = 1, classes: int = 1000) -> Net:
    """ViT (timm style, pre-LN eps 1e-6, fused qkv): patch-embedding conv, encoder on
    (image/patch)^2 + 1 tokens, final LN, head on the class token."""
    net = Net(batch)
    net.conv(3, image, image, hidden, patch, stride=patch, relu=False)    # patch embedding
    seq = (image // patch) ** 2 + 1
    M, d, L = batch * seq, hidden // heads, layers
    net.layernorm(M, hidden, eps=1e-6, times=2 * L + 1)
    net.dense(M, 3 * hidden, hidden, times=L)
    net.batch_matmul(batch * heads, seq, seq, d, times=L)
    net.softmax(batch * heads * seq, seq, times=L)
    net.batch_matmul(batch * heads, seq, d, seq, times=L)
    net.dense(M, hidden, hidden, times=L)
    net.residual((M, hidden), times=2 * L)
    net.dense(M, 4 * hidden, hidden, act="gelu", times=L)
    net.dense(M, hidden, 4 * hidden, times=L)
    net.dense(batch, classes, hidden)
    return net


def llama_layer(seq: int, kv_len: int, batch: int = 1, hidden: int = 4096, heads: int = 32,
                ffn: int = 11008, eps: float = 1e-6) -> Net:
    """One LLaMA decoder layer (LLaMA-7B sizes): RMSNorm, bias-free q/k/v/o projections,
    attention of `seq` new tokens over `kv_len` cached + new keys, add, RMSNorm, SiLU-gated
    MLP (gate and up denses, silu(gate) * up, down dense), add.
    Prefill: seq = kv_len; decode: seq = 1."""
    net = Net(batch)
    M, d = batch * seq, hidden // heads
    net.rmsnorm(M, hidden, eps=eps, times=2)
    net.dense(M, hidden, hidden, bias=False, times=4)                     # q, k, v, o
    net.batch_matmul(batch * heads, seq, kv_len, d)
    net.softmax(batch * heads * seq, kv_len)
    net.batch_matmul(batch * heads, seq, d, kv_len)
    net.residual((M, hidden), times=2)
    net.dense(M, ffn, hidden, bias=False, times=2)                        # gate, up
    net.silu_mul(M, ffn)
    net.dense(M, hidden, ffn, bias=False)                                 # down
    return net


def llama_prefill(seq: int = 128, batch: int = 1, hidden: int = 4096, heads: int = 32,
                  ffn: int = 11008) -> Net:
    """One LLaMA decoder layer over a `seq`-token prompt (kv_len = seq); LLaMA-7B sizes
    by default, LLaMA-13B with hidden 5120, heads 40, ffn 13824."""
    return llama_layer(seq, seq, batch, hidden=hidden, heads=heads, ffn=ffn)
