"""Model checkpoints: a directory with `model.safetensors` + `config.json`.

    save_checkpoint(model, "runs/tlm", extra={"tokenizer_vocab": 812})
    model, meta = load_checkpoint("runs/tlm", expect_vocab_size=tok.vocab_size)

`config.json` holds the GPTConfig fields, `format: "tlmir-gpt"`, `version: 1`, the
SHA-256 of the weights file and whatever `extra` the caller adds (flat, next to the
config fields). The tied output head is stored once, as the token embedding.

Nothing is ever unpickled: weights are safetensors, everything else JSON. Each file is
written to a temporary name, fsynced and renamed into place, config.json last; the
weights hash it records catches a half-finished pair. Every problem with a checkpoint
raises ModelError naming the path.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os

import torch
from safetensors.torch import load_file, save_file

from ..errors import ModelError
from ..runtime.files import atomic_write, atomic_write_text
from .model import GPT, GPTConfig

FORMAT = "tlmir-gpt"
VERSION = 1
WEIGHTS = "model.safetensors"
CONFIG = "config.json"
_TIED = "lm_head.weight"  # same tensor as wte.weight; stored once
_RESERVED = {"format", "version", "weights_sha256"} | {f.name for f in dataclasses.fields(GPTConfig)}


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def model_tensors(model: GPT) -> dict[str, torch.Tensor]:
    """The state dict as stored: contiguous CPU tensors, the tied head left out."""
    return {k: v.detach().to("cpu").contiguous() for k, v in model.state_dict().items() if k != _TIED}


def extra_of(meta: dict) -> dict:
    """The entries of a config.json beyond the model's own fields: what `save_checkpoint`
    was given as `extra`, to carry into a checkpoint derived from it."""
    return {k: v for k, v in meta.items() if k not in _RESERVED}


def save_checkpoint(model: GPT, directory: str, extra: dict | None = None) -> None:
    """Write `model.safetensors` and `config.json` into `directory` (created if missing)."""
    extra = dict(extra or {})
    clash = sorted(_RESERVED & set(extra))
    if clash:
        raise ModelError(f"checkpoint extra keys {clash} clash with the config's own fields")
    os.makedirs(directory, exist_ok=True)
    weights = os.path.join(directory, WEIGHTS)
    tensors = model_tensors(model)
    atomic_write(weights, lambda tmp: save_file(tensors, tmp, metadata={"format": FORMAT}))
    config = {"format": FORMAT, "version": VERSION, **dataclasses.asdict(model.config),
              "weights_sha256": sha256_file(weights), **extra}
    try:
        text = json.dumps(config, indent=2, sort_keys=False, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise ModelError(f"checkpoint extra for {directory} is not plain JSON: {e}") from None
    atomic_write_text(os.path.join(directory, CONFIG), text + "\n")


def read_config(directory: str) -> tuple[GPTConfig, dict]:
    """The GPTConfig and the whole config.json of a checkpoint directory (weights not read)."""
    if not os.path.isdir(directory):
        raise ModelError(f"checkpoint directory {directory} does not exist")
    path = os.path.join(directory, CONFIG)
    if not os.path.isfile(path):
        raise ModelError(f"checkpoint {directory} has no {CONFIG}")
    try:
        with open(path, encoding="utf-8") as f:
            meta = json.load(f)
    except (OSError, ValueError) as e:
        raise ModelError(f"checkpoint config {path} is unreadable: {e}") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        got = meta.get("format") if isinstance(meta, dict) else type(meta).__name__
        raise ModelError(f"{path} is not a {FORMAT} checkpoint config (format {got!r})")
    if meta.get("version") != VERSION:
        raise ModelError(f"{path} has {FORMAT} version {meta.get('version')!r}; this tlmir reads version {VERSION}")
    names = [f.name for f in dataclasses.fields(GPTConfig)]
    missing = [n for n in names if n not in meta]
    if missing:
        raise ModelError(f"{path} lacks config fields {missing}")
    try:
        config = GPTConfig(**{n: meta[n] for n in names})
    except (ModelError, TypeError) as e:
        raise ModelError(f"{path}: invalid model config: {e}") from None
    return config, meta


def load_checkpoint(directory: str, expect_vocab_size: int | None = None) -> tuple[GPT, dict]:
    """(model in eval mode, config.json contents) of a checkpoint directory."""
    config, meta = read_config(directory)
    if expect_vocab_size is not None and config.vocab_size != expect_vocab_size:
        raise ModelError(f"checkpoint {directory}: checkpoint vocabulary {config.vocab_size} "
                         f"does not match the tokenizer's {expect_vocab_size}")
    weights = os.path.join(directory, WEIGHTS)
    if not os.path.isfile(weights):
        raise ModelError(f"checkpoint {directory} has no {WEIGHTS}")
    digest = meta.get("weights_sha256")
    if digest is not None and sha256_file(weights) != digest:
        raise ModelError(f"{weights} does not match the hash in its {CONFIG} "
                         "(corrupt, or an interrupted save)")
    try:
        tensors = load_file(weights)
    except Exception as e:  # safetensors raises its own error types for corrupt files
        raise ModelError(f"{weights} is not a readable safetensors file: {e}") from None
    model = GPT(config)
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items() if k != _TIED}
    got = {k: tuple(v.shape) for k, v in tensors.items()}
    if set(got) != set(expected):
        extra_names = sorted(set(got) - set(expected))[:5]
        missing_names = sorted(set(expected) - set(got))[:5]
        raise ModelError(f"{weights} does not hold this config's tensors "
                         f"(missing {missing_names}, unexpected {extra_names})")
    for k, shape in expected.items():
        if got[k] != shape:
            raise ModelError(f"{weights}: tensor {k} has shape {list(got[k])}, the config needs {list(shape)}")
        if not tensors[k].is_floating_point():
            raise ModelError(f"{weights}: tensor {k} has dtype {tensors[k].dtype}, expected floating point")
    model.load_state_dict(tensors, strict=False)  # the tied head comes with wte.weight
    model.eval()
    return model, meta


def training_state(model: torch.nn.Module, opt: torch.optim.Optimizer) -> dict[str, torch.Tensor]:
    """The optimizer state (AdamW moments and step per parameter) and the torch RNG state as
    tensors, to store beside a checkpoint's weights as safetensors (never a pickle)."""
    out = {"rng.torch": torch.get_rng_state().clone()}
    for name, p in model.named_parameters():
        st = opt.state.get(p)
        if not st:
            continue
        out[f"opt.{name}.exp_avg"] = st["exp_avg"].detach().cpu().contiguous()
        out[f"opt.{name}.exp_avg_sq"] = st["exp_avg_sq"].detach().cpu().contiguous()
        out[f"opt.{name}.step"] = torch.as_tensor(st["step"], dtype=torch.float32).reshape(1).cpu()
    return out


def load_training_state(path: str, model: torch.nn.Module, opt: torch.optim.Optimizer, step: int) -> None:
    """Restore what `training_state` stored (the optimizer state only if `step` > 0)."""
    try:
        tensors = load_file(path)
    except Exception as e:
        raise ModelError(f"{path} is not a readable safetensors file: {e}") from None
    if "rng.torch" not in tensors:
        raise ModelError(f"{path} lacks the RNG state")
    if step > 0:
        for name, p in model.named_parameters():
            keys = [f"opt.{name}.{k}" for k in ("exp_avg", "exp_avg_sq", "step")]
            if any(k not in tensors for k in keys):
                raise ModelError(f"{path} lacks the optimizer state of {name}")
            a, s, n = (tensors[k] for k in keys)
            if tuple(a.shape) != tuple(p.shape) or tuple(s.shape) != tuple(p.shape):
                raise ModelError(f"{path}: optimizer state of {name} has the wrong shape")
            opt.state[p] = {"step": n.reshape(()).clone(), "exp_avg": a.to(p.device).clone(),
                            "exp_avg_sq": s.to(p.device).clone()}
    torch.set_rng_state(tensors["rng.torch"])
