"""The shipped models by name (`default`, `base`, `tlm`) or directory, loading one, and
the OpenMP setting every process that runs torch here starts with."""
from __future__ import annotations

import os

from ..errors import ModelError

MODELS = os.path.join(os.path.dirname(__file__), "models")
BASE_MODEL = os.path.join(MODELS, "base")    # pre-trained only
TUNED_MODEL = os.path.join(MODELS, "tlm")    # + iterative SFT on this CPU class: the default
TOKENIZER_FILE = "tokenizer.json"


def model_dir(name: str) -> str:
    """`base` and `tlm` name the models shipped in the package, `default` the one used
    when none is given (the SFT'd `tlm`); anything else is a directory."""
    if name == "default":
        return TUNED_MODEL if os.path.isfile(os.path.join(TUNED_MODEL, "config.json")) else BASE_MODEL
    if name in ("base", "tlm"):
        return {"base": BASE_MODEL, "tlm": TUNED_MODEL}[name]
    if not os.path.isdir(name):
        raise ModelError(f"unknown model {name!r}: give default, base, tlm or a model directory")
    return name


def passive_openmp() -> None:
    """Idle OpenMP threads sleep instead of spinning: on a shared 2-core machine spinning
    torch threads made training 2-3x slower. Must run before torch is first imported."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def load_model(name: str):
    """(model, tokenizer, meta) from a model directory holding a checkpoint + tokenizer."""
    from .checkpoint import load_checkpoint
    from .tokenizer import Tokenizer
    directory = model_dir(name)
    tok = Tokenizer.load(os.path.join(directory, TOKENIZER_FILE))
    model, meta = load_checkpoint(directory, expect_vocab_size=tok.vocab_size)
    return model, tok, meta
