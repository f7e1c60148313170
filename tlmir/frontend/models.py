"""Model specs for the command line: `zoo:resnet50`, `transformers:bert-base`.

Transformers models are built from their configs with random weights (no hub access):
the config table below holds each architecture's published sizes. Attention is
transformers' default, scaled_dot_product_attention, which capture decomposes into the
matmuls and softmax tlmir maps (`attention.py`); no key / value cache is returned.
"""
from __future__ import annotations

from typing import Callable

import torch

from ..errors import FrontendError


def _built(family: str, model_kw: dict | None = None, **config_kw):
    """(transformers' `{family}Model` from `{family}Config(**config_kw)`, SDPA attention,
    no cache (torch.export cannot return one); its vocabulary size)."""
    import transformers
    cfg = getattr(transformers, f"{family}Config")(use_cache=False, **config_kw)
    cfg._attn_implementation = "sdpa"
    return getattr(transformers, f"{family}Model")(cfg, **(model_kw or {})), cfg.vocab_size


_BERT = dict(model_kw=dict(add_pooling_layer=False))
TRANSFORMERS: dict[str, Callable] = {
    "bert-base": lambda: _built("Bert", **_BERT),
    "bert-large": lambda: _built("Bert", **_BERT, hidden_size=1024, num_hidden_layers=24,
                                 num_attention_heads=16, intermediate_size=4096),
    "bert-tiny": lambda: _built("Bert", **_BERT, hidden_size=128, num_hidden_layers=2,
                                num_attention_heads=2, intermediate_size=512),
    "gpt2": lambda: _built("GPT2"),
    "gpt2-tiny": lambda: _built("GPT2", n_embd=64, n_layer=2, n_head=4, n_positions=64, vocab_size=256),
    "llama-7b-layer": lambda: _built("Llama", hidden_size=4096, intermediate_size=11008,
                                     num_hidden_layers=1, num_attention_heads=32,
                                     num_key_value_heads=32, vocab_size=32000),
    "llama-tiny": lambda: _built("Llama", hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                 num_attention_heads=4, num_key_value_heads=2, vocab_size=256),
}


def parse_shape(text: str) -> tuple[int, ...]:
    try:
        shape = tuple(int(s) for s in text.split(","))
    except ValueError:
        shape = ()
    if not shape or any(s < 1 for s in shape):
        raise FrontendError(f"--input: expected positive comma-separated sizes like 1,3,224,224, "
                            f"got {text!r}")
    return shape


def load(spec: str, input_shape: str) -> tuple[torch.nn.Module, tuple, str]:
    """(module in eval mode, example inputs, name) for `zoo:NAME` or `transformers:NAME`;
    a transformers model takes token ids of shape `input_shape` (batch, seq)."""
    kind, _, name = spec.partition(":")
    shape = parse_shape(input_shape)
    torch.manual_seed(0)
    if kind == "zoo":
        from .. import zoo
        return zoo.get(name).eval(), (torch.randn(shape),), name
    if kind == "transformers":
        if name not in TRANSFORMERS:
            raise FrontendError(f"unknown transformers model {name!r}; known: {', '.join(TRANSFORMERS)}")
        if len(shape) != 2:
            raise FrontendError(f"--input: transformers:{name} takes token ids (batch,seq), got {shape}")
        model, vocab = TRANSFORMERS[name]()
        return model.eval(), (torch.randint(0, vocab, shape),), name
    raise FrontendError(f"model spec {spec!r}: expected zoo:NAME or transformers:NAME")
