"""Large-scale sampling of unlabelled tensor sentences (paper Alg. 1): the pre-training corpus.

    sample_corpus(split_tasks("train"), "data/corpus", per_task=640)

A corpus is a directory of shards. Shard i holds every sentence of tasks
i*shard_tasks .. (i+1)*shard_tasks-1 of the task list: for each task, random traces under
`hw_per_task` hardware prompts (the host's first, then CPU classes of
`target.hardware_variants()` drawn at random, so the model does not assume one machine;
for a GPU target, `sample --target cuda:sm_90`, it first and then the other GPU classes),
de-duplicated within the task. Shards are drawn in parallel worker processes and each is
written whole (to a temporary name, then renamed), so a killed run loses at most the
shards in flight and a rerun draws only the missing ones. `corpus.json` fixes the task
list and parameters; a rerun with other ones is refused rather than mixed in.

Each shard is gzip'd JSON lines `{"key", "task", "hw", "sentence"}`.
"""
from __future__ import annotations

import functools
import glob
import gzip
import hashlib
import json
import multiprocessing as mp
import os
import random
from typing import Callable, Iterator, Sequence

from ..errors import TlmirError
from ..runtime.files import atomic_write, atomic_write_text
from ..runtime.target import HardwareParams, gpu_variants, hardware_variants, host_hardware

MANIFEST = "corpus.json"


def _shard_path(out_dir: str, index: int) -> str:
    return os.path.join(out_dir, f"shard-{index:05d}.jsonl.gz")


def _task_hardware(rng: random.Random, host: HardwareParams, n: int) -> list[HardwareParams]:
    """The host first, then n - 1 other CPU classes / core counts (GPU classes, for a GPU
    host) drawn without repeats."""
    variants = [hw for hw in (gpu_variants() if host.kind == "cuda" else hardware_variants()) if hw != host]
    return [host] + rng.sample(variants, min(n - 1, len(variants)))


def task_sentences(task, per_task: int, seed: int, hws: Sequence[HardwareParams]) -> list[dict]:
    """Up to `per_task` distinct random sentences of `task`, spread evenly over `hws`."""
    from ..schedule.space import SearchSpace
    from .language import trace_to_sentence
    rng = random.Random(seed)
    out: list[dict] = []
    seen: set[str] = set()
    for n, hw in enumerate(hws):
        want = per_task * (n + 1) // len(hws) - per_task * n // len(hws)
        space = SearchSpace(task.outputs, hw)
        got = 0
        for _ in range(want * 4):  # small spaces run out of distinct programs
            if got >= want:
                break
            _, trace = space.sample(rng)
            s = trace_to_sentence(task, hw, trace)
            if s not in seen:
                seen.add(s)
                got += 1
                out.append({"key": task.key, "task": task.name, "hw": hw.key, "sentence": s})
    return out


@functools.cache
def _tasks_by_key(split: str) -> dict:
    """A worker's tasks of `split` by key, built once per process."""
    from .novel_tasks import split_tasks_or_novel
    return {t.key: t for t in split_tasks_or_novel(split)}


def _draw_shard(args: tuple) -> tuple[int, int]:
    """Worker: draw and write shard `index`; returns (index, sentences)."""
    out_dir, index, split, keys, per_task, hw_per_task, seed, host = args
    by_key = _tasks_by_key(split)
    lines = []
    for key in keys:
        task = by_key[key]
        task_seed = int(hashlib.sha1(f"{seed}:{key}".encode()).hexdigest()[:12], 16)
        hws = _task_hardware(random.Random(task_seed), host, hw_per_task)
        lines += [json.dumps(r) + "\n" for r in task_sentences(task, per_task, task_seed, hws)]
    def write(tmp: str) -> None:
        with gzip.open(tmp, "wt", compresslevel=6) as fh:
            fh.writelines(lines)
    atomic_write(_shard_path(out_dir, index), write)
    return index, len(lines)


def _manifest(out_dir: str, params: dict) -> None:
    """Write the corpus parameters, or check a resumed corpus was drawn with the same ones."""
    path = os.path.join(out_dir, MANIFEST)
    if os.path.exists(path):
        try:
            with open(path) as fh:
                old = json.load(fh)
        except (OSError, ValueError) as e:
            raise TlmirError(f"{path} is unreadable: {e}") from None
        if old != params:
            diff = sorted(k for k in set(old) | set(params) if old.get(k) != params.get(k))
            raise TlmirError(f"{out_dir} holds a corpus drawn with other {', '.join(diff)}; "
                             f"resume it with the same parameters or use another directory")
        return
    os.makedirs(out_dir, exist_ok=True)
    atomic_write_text(path, json.dumps(params, indent=1))


def sample_corpus(split: str, out_dir: str, per_task: int = 600, hw_per_task: int = 8,
                  shard_tasks: int = 16, workers: int = 0, seed: int = 0,
                  limit: int | None = None, host: HardwareParams | None = None,
                  log: Callable[[str], None] = print) -> int:
    """Draw the missing shards of the corpus of `split` into `out_dir`; returns the
    sentences written by this call."""
    if per_task < 1 or hw_per_task < 1 or shard_tasks < 1:
        raise TlmirError("sample needs per_task, hw_per_task and shard_tasks >= 1")
    host = host or host_hardware()
    from .novel_tasks import split_tasks_or_novel
    keys = [t.key for t in split_tasks_or_novel(split)][:limit]
    shards = [keys[i:i + shard_tasks] for i in range(0, len(keys), shard_tasks)]
    params = {"split": split, "tasks": len(keys),
              "tasks_sha1": hashlib.sha1("\n".join(keys).encode()).hexdigest(),
              "per_task": per_task, "hw_per_task": hw_per_task, "shard_tasks": shard_tasks,
              "seed": seed, "host": host.key}
    _manifest(out_dir, params)
    for stale in glob.glob(os.path.join(out_dir, ".shard-*.tmp")):  # a killed writer's (atomic_write)
        os.remove(stale)
    todo = [(out_dir, i, split, ks, per_task, hw_per_task, seed, host)
            for i, ks in enumerate(shards) if not os.path.exists(_shard_path(out_dir, i))]
    log(f"[sample] {out_dir}: {len(shards) - len(todo)} of {len(shards)} shards present, "
        f"drawing {len(todo)}")
    written = 0
    if not todo:
        return 0
    try:
        with mp.get_context("spawn").Pool(workers or os.cpu_count() or 1) as pool:
            for done, (index, n) in enumerate(pool.imap_unordered(_draw_shard, todo), 1):
                written += n
                log(f"[sample] shard {index}: {n} sentences ({done}/{len(todo)}, {written} so far)")
    except OSError as e:
        raise TlmirError(f"cannot write the corpus to {out_dir!r}: {e}") from None
    return written


def corpus_shards(path: str) -> list[str]:
    """The shard files of a corpus directory, in order (an error if there are none)."""
    shards = sorted(glob.glob(os.path.join(path, "shard-*.jsonl.gz")))
    if not shards:
        raise TlmirError(f"{path} holds no corpus shards (shard-*.jsonl.gz); run `tlmir sample`")
    return shards


def read_sentences(path: str) -> list[dict]:
    """The records of a sentences file (.jsonl, or .jsonl.gz) or of a whole corpus
    directory; a malformed line is an error naming the file and line."""
    if os.path.isdir(path):
        return [r for shard in corpus_shards(path) for r in iter_records(shard)]
    return list(iter_records(path))


def iter_records(path: str) -> Iterator[dict]:
    """The records of one sentences file, one at a time."""
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rt") as fh:
            for n, line in enumerate(fh, 1):
                try:
                    d = json.loads(line)
                    yield {"key": d["key"], "task": d["task"], "sentence": d["sentence"]}
                except (ValueError, KeyError, TypeError):
                    if n == 1 or line.endswith("\n"):
                        raise TlmirError(f"{path}:{n}: malformed sentence record") from None
    except (OSError, EOFError) as e:
        raise TlmirError(f"cannot read sentences file {path!r}: {e}") from None


def _key_fraction(key: str) -> float:
    """A task's fixed position in [0, 1): validation takes whole tasks below a fraction."""
    return int(hashlib.sha1(key.encode()).hexdigest()[:8], 16) / 0x100000000


def encode_corpus(path: str, tok, log: Callable[[str], None] = print):
    """(Packed token ids of every sentence, each sentence's task position in [0, 1)) of a
    corpus directory or sentences file. A directory's encoding is cached beside its shards
    (`tokens-<tokenizer hash>.npz`), so a resumed pre-training does not encode again."""
    import numpy as np

    from .train import Packed
    cache = os.path.join(path, f"tokens-{tok.hash}.npz") if os.path.isdir(path) else None
    if cache and os.path.exists(cache):
        with np.load(cache) as z:
            if int(z["shards"]) == len(corpus_shards(path)):
                return Packed(z["ids"], z["offsets"]), z["where"]
    records = read_sentences(path)
    if tok.places:  # each sentence through its own prompt's names
        encoded = [tok.encode(r["sentence"]) for r in records]
    else:
        encoded = [e.ids for e in tok.hf.encode_batch([r["sentence"] for r in records])]
    lengths = np.fromiter((len(e) for e in encoded), np.int64, len(encoded))
    offsets = np.zeros(len(records) + 1, np.int64)
    offsets[1:] = np.cumsum(lengths)
    ids = np.fromiter((i for e in encoded for i in e), np.int32, int(offsets[-1]))
    unknown = int((ids == tok.unk_id).sum())
    if unknown:
        log(f"[encode] {unknown} of {ids.size} tokens are <unk> (words outside the vocabulary)")
    if unknown > ids.size // 1000:
        raise TlmirError(f"{path}: {unknown} of {ids.size} tokens are outside the vocabulary of "
                         f"{tok.vocab_size} words; rebuild the tokenizer (`tlmir tokenizer build`)")
    ids = ids.astype(np.uint16 if tok.vocab_size <= 65535 else np.int32)
    where = np.array([_key_fraction(r["key"]) for r in records], np.float32)
    if cache:
        def write(tmp: str) -> None:
            with open(tmp, "wb") as fh:  # a file object: savez would append .npz to a name
                np.savez(fh, ids=ids, offsets=offsets, where=where, shards=len(corpus_shards(path)))
        atomic_write(cache, write)
    return Packed(ids, offsets), where
