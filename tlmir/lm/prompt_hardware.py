"""Which hardware a fine-tuned model is prompted with.

Pre-training sentences are uniformly random programs, so their hardware prompt says
nothing about which programs are good: what a model knows of good programs for a
hardware class it learns from fine-tuning alone. Prompted with a class it was never
fine-tuned on, it writes what it would for no class in particular. The shipped `tlm`,
fine-tuned on two 2-core classes (AVX-512 with 32K/1024K caches, AVX2 with 32K/512K),
asked for BERT's 128x3072x768 dense+GELU under a Sapphire Rapids prompt (48K/2048K), put
one row in the register tile of 546 of 640 programs; under the nearest class it was
tuned on, 148 (docs/model.md, "Prompting with the hardware a model was tuned on").

So fine-tuning records the hardware prompts of its demonstrations in the model's
config.json (`sft.hardware`), and with SearchParams.tlm_prompt = "nearest" generation
prompts with the host's own hardware if the model was tuned on it, else with the nearest
class it was tuned on of the same kind, ISA and vector width (nearest in log core count
and cache sizes). The space the model's answers are masked to is always the host's.
Measured there, ranked TLM-10 was no better for it (within a seed's spread) and one
`make demo` run was 7% slower, so the default prompt stays the host's.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Iterable

from ..errors import ModelError
from ..runtime.target import HardwareParams
from .language import hw_prompt

_SIZES = ("cores", "l1_kb", "l2_kb")


def demonstrated_hardware(sentences: Iterable[str]) -> list[str]:
    """The distinct hardware prompts ("hw cpu avx512 cores 2 ...") of these sentences."""
    seen: set[str] = set()
    for s in sentences:
        words = s.split()
        if "hw" in words:
            start = words.index("hw")
            end = next((i for i in range(start, len(words)) if words[i] in ("quality", "sketch")), len(words))
            seen.add(" ".join(words[start:end]))
    return sorted(seen)


def _fields(prompt: str) -> dict:
    """kind, isa and the numeric fields of a hardware prompt (inverse of language.hw_prompt
    for what the nearest-class choice compares)."""
    words = prompt.split()
    if len(words) < 5 or words[0] != "hw" or (len(words) - 3) % 2:
        raise ModelError(f"model config: {prompt!r} is not a hardware prompt ('hw KIND ISA NAME VALUE ...')")
    pairs = dict(zip(words[3::2], words[4::2]))
    try:
        return {"kind": words[1], "isa": words[2], "cores": int(pairs.get("cores", pairs.get("sms"))),
                "vec": pairs.get("vec"), "l1_kb": int(pairs["l1"].removesuffix("K")),
                "l2_kb": int(pairs["l2"].removesuffix("K"))}
    except (KeyError, TypeError, ValueError):
        raise ModelError(f"model config: hardware prompt {prompt!r} lacks cores, l1 or l2") from None


def tuned_hardware(meta: dict) -> list[str]:
    """The hardware prompts a model was fine-tuned on ([] for a pre-trained model, or one
    fine-tuned before fine-tuning recorded them)."""
    found = (meta.get("sft") or {}).get("hardware", [])
    if not isinstance(found, list) or not all(isinstance(p, str) for p in found):
        raise ModelError(f"model config: sft.hardware must be a list of hardware prompts, got {found!r}")
    return found


def prompt_hardware(hw: HardwareParams, meta: dict) -> HardwareParams:
    """The hardware to write in the prompt for a model with config `meta` on `hw`."""
    tuned = tuned_hardware(meta)
    if not tuned or " ".join(hw_prompt(hw)) in tuned:
        return hw
    vec = str(hw.vector_lanes) if hw.kind != "cuda" else None
    same = [f for f in map(_fields, tuned) if (f["kind"], f["isa"], f["vec"]) == (hw.kind, hw.isa, vec)]
    if not same:
        return hw

    def distance(f: dict) -> float:
        return sum(abs(math.log(max(f[k], 1) / max(getattr(hw, k), 1))) for k in _SIZES)

    near = min(same, key=distance)
    return dataclasses.replace(hw, **{k: near[k] for k in _SIZES})
