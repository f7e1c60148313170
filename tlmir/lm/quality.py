"""Quality-conditioned fine-tuning: every measured program, labelled with its tier.

SFT on demonstrations learns from the best program of each task (and of each sketch near
it): about one in twenty of the programs `tlmir iterate` measures. Here every measured,
verified program becomes a training sentence whose prompt says how fast it ran against
the best program measured for its task:

    <s> v4 task ... hw cpu avx512 cores 2 ... quality 0 sketch 3 ... </s>

Tier 0 is within `bounds[0]` (1.1x) of the task's best, tier 1 within `bounds[1]`, and so
on; the last tier is everything slower. The model learns what the programs of every tier
look like, the slow ones included, instead of never seeing them, and generation asks for
tier 0 (return conditioning, as a decision transformer asks for a high return). The tier
bounds and the tier asked for are stored in the model's config.json (`quality`), so a
conditioned model writes its quality prompt wherever it is loaded.

    rows = quality_sentences(read_records(["runs/iterate/records.db"]), tasks, hw)        # [{key, task, seconds, quality, sentence}]
    sft(base, [r["sentence"] for r in rows], out, quality=quality_config())
"""
from __future__ import annotations

import json
import random
from typing import Iterable, Sequence

from ..errors import ModelError
from ..runtime.records import Record
from ..runtime.target import HardwareParams
from ..schedule.decider import Trace
from .language import trace_to_sentence

DEFAULT_BOUNDS = (1.1, 1.5, 3.0)  # latency / task best: tiers 0, 1, 2; slower is tier 3


def tier(ratio: float, bounds: Sequence[float] = DEFAULT_BOUNDS) -> int:
    """The tier of a program `ratio` times slower than its task's best."""
    return next((i for i, b in enumerate(bounds) if ratio <= b), len(bounds))


def quality_config(bounds: Sequence[float] = DEFAULT_BOUNDS, generate: int = 0) -> dict:
    """What a conditioned model's config.json keeps: its tiers and the one it asks for."""
    bounds = [float(b) for b in bounds]
    if not bounds or any(b < 1.0 for b in bounds) or bounds != sorted(bounds):
        raise ModelError(f"quality bounds must be ascending ratios >= 1, got {bounds}")
    if not 0 <= generate <= len(bounds):
        raise ModelError(f"quality tier {generate} is not one of 0..{len(bounds)}")
    return {"bounds": bounds, "generate": int(generate)}


def prompt_tier(meta: dict) -> int | None:
    """The tier a model asks for in its prompts (None: the model is not conditioned)."""
    q = meta.get("quality")
    if q is None:
        return None
    try:
        return quality_config(q["bounds"], q["generate"])["generate"]
    except (KeyError, TypeError) as e:
        raise ModelError(f"model config's quality entry {q!r} is malformed ({e})") from None


def quality_sentences(records: Iterable[Record], tasks: Sequence, hw: HardwareParams,
                      bounds: Sequence[float] = DEFAULT_BOUNDS, last_tier_share: float = 1.0,
                      seed: int = 0) -> list[dict]:
    """Every verified program of `records` measured for one of `tasks` on `hw`, once per
    trace, as a sentence with its quality prompt. `last_tier_share` keeps that share (drawn
    at random) of the slowest tier, which is most of what a search measures."""
    rng = random.Random(seed)
    by_task: dict[str, dict[str, float]] = {t.key: {} for t in tasks}
    for rec in records:
        fastest = by_task.get(rec.task_key)
        if fastest is not None and rec.hw_key == hw.key and rec.best is not None:
            fastest[rec.trace] = min(rec.best, fastest.get(rec.trace, rec.best))
    rows = []
    for task in tasks:
        fastest = by_task[task.key]
        if not fastest:
            continue
        top = min(fastest.values())
        for trace, seconds in fastest.items():
            q = tier(seconds / top, bounds)
            if q == len(bounds) and rng.random() >= last_tier_share:
                continue
            rows.append({"key": task.key, "task": task.name, "seconds": seconds, "quality": q,
                         "sentence": trace_to_sentence(task, hw, Trace.from_json(trace), quality=q)})
    return rows


def tier_counts(rows: Sequence[dict], bounds: Sequence[float] = DEFAULT_BOUNDS) -> list[int]:
    return [sum(r["quality"] == q for r in rows) for q in range(len(bounds) + 1)]


def write_rows(rows: Sequence[dict], path: str) -> None:
    from ..runtime.files import atomic_write_text
    atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in rows))
