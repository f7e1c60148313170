"""Large-scale sampling of unlabelled tensor sentences (paper Alg. 1).

Random traces of every task of a workload split, drawn in parallel worker processes,
de-duplicated per task, streamed to a JSON-lines file one task at a time. A rerun with
the same output file skips the tasks it already holds, so a killed run resumes.
"""
from __future__ import annotations

import json
import multiprocessing as mp
import os
import random
from typing import Callable

from ..errors import TlmirError
from ..runtime.target import HardwareParams, host_hardware


def _task_sentences(args: tuple) -> tuple[str, str, list[str]]:
    """Worker: `per_task` distinct sentences of task `index` of `split`."""
    split, index, per_task, seed, hw, version = args
    from ..schedule.space import SearchSpace
    from ..workloads import split_tasks
    from .language import trace_to_sentence
    task = split_tasks(split)[index]
    space = SearchSpace(task.outputs, hw)
    rng = random.Random(seed * 1_000_003 + index)
    seen: dict[str, None] = {}
    for _ in range(per_task * 4):
        if len(seen) >= per_task:
            break
        _, trace = space.sample(rng)
        seen.setdefault(trace_to_sentence(task, hw, trace, version), None)
    return task.key, task.name, list(seen)


def done_tasks(path: str) -> set[str]:
    """Task keys already in an output file (a torn last line is ignored and rewritten)."""
    keys: set[str] = set()
    if not os.path.exists(path):
        return keys
    with open(path) as fh:
        for line in fh:
            try:
                keys.add(json.loads(line)["key"])
            except (ValueError, KeyError):
                continue
    return keys


def _check_version(path: str, version: str) -> None:
    """A resumed file must hold sentences of the version being sampled: never mix them."""
    if not os.path.exists(path):
        return
    with open(path) as fh:
        first = fh.readline()
    try:
        found = json.loads(first)["sentence"].split()[1]
    except (ValueError, KeyError, TypeError, IndexError):
        return  # empty or torn: nothing to mix with
    if found != version:
        raise TlmirError(f"{path} holds {found} sentences; sampling {version} sentences into it "
                         f"would mix language versions (use another --out)")


def sample_split(split: str, per_task: int, out_path: str, workers: int = 0, seed: int = 0,
                 hw: HardwareParams | None = None, limit: int | None = None,
                 log: Callable[[str], None] = print, version: str | None = None) -> int:
    """Append sentences (in language `version`, default the current one) for every
    not-yet-sampled task of `split`; returns tasks written."""
    from .language import VERSION
    from ..workloads import split_tasks
    hw, version = hw or host_hardware(), version or VERSION
    tasks = split_tasks(split)[:limit]
    have = done_tasks(out_path)
    _check_version(out_path, version)
    todo = [(split, i, per_task, seed, hw, version) for i, t in enumerate(tasks) if t.key not in have]
    if not todo:
        return 0
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    workers = workers or os.cpu_count() or 1
    written = 0
    ctx = mp.get_context("spawn")
    try:
        with ctx.Pool(workers) as pool, open(out_path, "a") as fh:
            for key, name, sentences in pool.imap_unordered(_task_sentences, todo):
                fh.write("".join(json.dumps({"key": key, "task": name, "sentence": s}) + "\n"
                                 for s in sentences))
                fh.flush()
                written += 1
                log(f"[sample] {written}/{len(todo)} {name}: {len(sentences)} sentences")
    except OSError as e:
        raise TlmirError(f"cannot write sentences to {out_path!r}: {e}") from None
    return written


def read_sentences(path: str) -> list[dict]:
    """The records of a sentences file; a malformed line is an error naming the line."""
    out = []
    try:
        with open(path) as fh:
            for n, line in enumerate(fh, 1):
                try:
                    d = json.loads(line)
                    out.append({"key": d["key"], "task": d["task"], "sentence": d["sentence"]})
                except (ValueError, KeyError, TypeError):
                    if n == 1 or line.endswith("\n"):
                        raise TlmirError(f"{path}:{n}: malformed sentence record") from None
    except OSError as e:
        raise TlmirError(f"cannot read sentences file {path!r}: {e}") from None
    return out


def convert_file(src: str, dst: str, version: str, hw: HardwareParams | None = None) -> int:
    """Write every sentence of `src` in language `version` to `dst` (same keys and tasks,
    same traces); returns the count. Into v3 each trace is replayed in its task's space
    (tasks are found by key among the workloads), so `hw` must be what it was sampled for."""
    from ..workloads import split_tasks
    from .language import convert_sentence
    hw = hw or host_hardware()
    tasks = {t.key: t for split in ("train", "held-out") for t in split_tasks(split)}
    records = read_sentences(src)
    lines = []
    for n, r in enumerate(records, 1):
        task = tasks.get(r["key"])
        if task is None:
            raise TlmirError(f"{src}:{n}: task {r['task']!r} (key {r['key']}) is not a workload task")
        try:
            lines.append(json.dumps({**r, "sentence": convert_sentence(r["sentence"], version, task, hw)}) + "\n")
        except TlmirError as e:
            raise type(e)(f"{src}:{n}: {e}") from None
    tmp = f"{dst}.tmp{os.getpid()}"
    try:
        os.makedirs(os.path.dirname(os.path.abspath(dst)), exist_ok=True)
        with open(tmp, "w") as fh:
            fh.writelines(lines)
        os.replace(tmp, dst)
    except OSError as e:
        raise TlmirError(f"cannot write sentences to {dst!r}: {e}") from None
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return len(lines)
