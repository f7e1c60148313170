"""Training, scoring and storing the world-model evaluator (world_model.py) on measured records.

    programs = programs_from_records(db.records(), tasks_by_key)
    ev = train_evaluator(programs, tokenizer, WorldModelConfig(tokenizer.vocab_size), steps=2000)
    ev.save("runs/evaluator"); ev = Evaluator.load("runs/evaluator")
    scores = ev.score([p.sentence for p in programs])        # higher = predicted faster
    ranking_metrics(programs, scores)                         # pairwise accuracy, top-k recall, tau

Every measurement the project keeps (iterate archives, eval and tune databases) is a
training example: the program's sentence and its latency, normalised within its task
(the task's best / this latency; a failed program is 0). A directory holds the weights
(safetensors, never a pickle), `config.json` (format, config fields, the weights' SHA-256)
and the tokenizer the words were read with.
"""
from __future__ import annotations

import copy
import dataclasses
import json
import math
import os
import random
import shutil
import time
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from ..errors import ModelError, TlmirError
from ..lm.checkpoint import sha256_file
from ..runtime.files import atomic_write, atomic_write_text
from ..lm.language import trace_to_sentence
from ..lm.tokenizer import Tokenizer
from ..runtime.records import Record, drop_tick_artefacts, read_records
from ..runtime.target import HardwareParams
from ..schedule.decider import Trace
from ..schedule.lower import lower
from ..schedule.space import SearchSpace
from . import cost_model
from .features import program_features
from .world_model import WorldModel, WorldModelConfig, collate, numeric_features, ranking_loss, split_sentence

FORMAT = "tlmir-world-model"
VERSION = 1
WEIGHTS, CONFIG, TOKENIZER = "model.safetensors", "config.json", "tokenizer.json"
STATE = "train_state.safetensors"  # a checkpoint's optimizer state and step


@dataclass(frozen=True)
class Program:
    """One measured program: its task (key), sentence, latency (None: it failed), the
    lowered program's features (search/features.py; None where not computed) and the
    hardware it was measured on (its key)."""
    task_key: str
    sentence: str
    seconds: float | None
    features: np.ndarray | None = None
    hw_key: str = ""

    @property
    def group(self) -> str:
        """What latencies compare within: one task on one CPU class (the same task measured
        on an AVX2 and an AVX-512 host are two rankings)."""
        return f"{self.task_key}@{self.hw_key}"


def programs_from_records(records: Iterable, tasks: dict, with_features: bool = True) -> list[Program]:
    """Records whose task is in `tasks` (key -> Task) as Programs; a trace the current
    space cannot replay (or lower) any more is skipped."""
    out, hws, spaces = [], {}, {}
    for rec in records:
        task = tasks.get(rec.task_key)
        if task is None:
            continue
        if rec.hw_key not in hws:
            hws[rec.hw_key] = HardwareParams.from_key(rec.hw_key)
        hw = hws[rec.hw_key]
        try:
            trace = Trace.from_json(rec.trace)
            sentence = trace_to_sentence(task, hw, trace)
            feats = None
            if with_features:
                space = spaces.get((rec.task_key, rec.hw_key))
                if space is None:
                    space = spaces[rec.task_key, rec.hw_key] = SearchSpace(task.outputs, hw)
                feats = program_features(lower(space.replay(trace), task.args), hw)
        except TlmirError:
            continue
        out.append(Program(rec.task_key, sentence, rec.best if rec.ok else None, feats, rec.hw_key))
    return out


def group_indices(programs: Sequence[Program]) -> dict[str, list[int]]:
    """Program.group -> the indices of its programs, in order: what rankings compare within."""
    out: dict[str, list[int]] = {}
    for i, p in enumerate(programs):
        out.setdefault(p.group, []).append(i)
    return out


def normalized_throughput(programs: Sequence[Program]) -> np.ndarray:
    """Per program: the best latency of its group (task and CPU class) / its latency (0 if
    it failed)."""
    return cost_model.normalized_throughput(np.array([1.0 / p.seconds if p.seconds else 0.0 for p in programs]),
                                            np.array([p.group for p in programs]))


class Evaluator:
    """A WorldModel with the tokenizer it reads sentences with."""

    def __init__(self, model: WorldModel, tok: Tokenizer):
        self.model, self.tok = model, tok
        self._cache: dict[str, tuple] = {}

    def encode(self, sentence: str) -> tuple:
        if sentence not in self._cache:
            prompt, actions = split_sentence(sentence)
            self._cache[sentence] = (
                self.tok.encode(prompt), np.array([numeric_features(w) for w in prompt], np.float32),
                [np.array(self.tok.encode(a)) for a in actions],
                [np.array([numeric_features(w) for w in a], np.float32) for a in actions])
        return self._cache[sentence]

    def copy(self) -> "Evaluator":
        """An evaluator with weights of its own (to fine-tune) and the same tokenizer."""
        return Evaluator(copy.deepcopy(self.model), self.tok)

    @property
    def reads_features(self) -> bool:
        return self.model.config.n_features > 0

    def batch(self, sentences: Sequence[str], features: Sequence[np.ndarray] | None = None) -> dict:
        if self.reads_features:
            if features is None or len(features) != len(sentences):
                raise TlmirError("this evaluator reads program features: give one row per sentence")
            features = np.stack(features)
        return collate([self.encode(s) for s in sentences], self.model.config.max_decision_words,
                       features if self.reads_features else None)

    @torch.no_grad()
    def score(self, sentences: Sequence[str], features: Sequence[np.ndarray] | None = None,
              batch_size: int = 256) -> np.ndarray:
        """Ranking scores, higher = predicted faster (comparable within a task); `features`:
        the programs' feature rows, for an evaluator that reads them."""
        self.model.eval()
        out = [self.model(self.batch(sentences[i:i + batch_size],
                                     None if features is None else features[i:i + batch_size]))[0]
               for i in range(0, len(sentences), batch_size)]
        return torch.cat(out).numpy() if out else np.zeros(0)

    def score_programs(self, programs: Sequence[Program]) -> np.ndarray:
        return self.score([p.sentence for p in programs],
                          [p.features for p in programs] if self.reads_features else None)

    def fit_feature_scale(self, programs: Sequence[Program]) -> None:
        """Standardise the features by the training programs' mean and spread."""
        if self.reads_features:
            x = torch.as_tensor(np.stack([p.features for p in programs]), dtype=torch.float32)
            self.model.feature_mean.copy_(x.mean(0))
            self.model.feature_std.copy_(x.std(0).clamp(min=1e-3))

    def fine_tune(self, programs: Sequence[Program], steps: int = 20, lr: float = 2e-4, seed: int = 0) -> None:
        """Train further on measured programs (online, a task's as a search measures them):
        every step ranks a sample of 64 of them, each against the others of its
        `Program.group` (task and CPU class)."""
        if len({p.seconds for p in programs}) < 2:
            return
        y = torch.tensor(normalized_throughput(programs), dtype=torch.float32)
        ids: dict[str, int] = {}
        group = torch.tensor([ids.setdefault(p.group, len(ids)) for p in programs])
        gen = torch.Generator().manual_seed(seed)
        opt = torch.optim.AdamW(self.model.parameters(), lr=lr, weight_decay=1e-4)
        self.model.train()
        for _ in range(steps):
            idx = torch.randperm(len(programs), generator=gen)[:64].tolist()
            loss = self._loss([programs[i] for i in idx], y[idx], group[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
            opt.step()
        self.model.eval()

    def _loss(self, programs: Sequence[Program], target: torch.Tensor, groups: torch.Tensor,
              regression_weight: float = 1.0) -> torch.Tensor:
        """Pairwise ranking within each group + squared error of the predicted throughput."""
        scores, pred = self.model(self.batch([p.sentence for p in programs],
                                             [p.features for p in programs] if self.reads_features else None))
        return ranking_loss(scores, target, groups) + regression_weight * F.mse_loss(pred, target)

    # ------------------------------------------------------------------ storage
    def save(self, directory: str, extra: dict | None = None) -> None:
        from safetensors.torch import save_file
        os.makedirs(directory, exist_ok=True)
        state = {k: v.detach().contiguous() for k, v in self.model.state_dict().items()}
        atomic_write(os.path.join(directory, WEIGHTS), lambda tmp: save_file(state, tmp))
        self.tok.save(os.path.join(directory, TOKENIZER))
        meta = {"format": FORMAT, "version": VERSION, **dataclasses.asdict(self.model.config),
                "weights_sha256": sha256_file(os.path.join(directory, WEIGHTS)), **(extra or {})}
        atomic_write_text(os.path.join(directory, CONFIG), json.dumps(meta, indent=1) + "\n")

    @classmethod
    def load(cls, directory: str) -> "Evaluator":
        from safetensors import SafetensorError
        from safetensors.torch import load_file
        path = os.path.join(directory, CONFIG)
        try:
            with open(path) as f:
                meta = json.load(f)
        except (OSError, ValueError) as e:
            raise ModelError(f"evaluator {directory}: cannot read {CONFIG}: {e}") from None
        if not isinstance(meta, dict) or meta.get("format") != FORMAT or meta.get("version") != VERSION:
            raise ModelError(f"evaluator {directory}: {CONFIG} is not a {FORMAT} v{VERSION} config")
        fields = {f.name for f in dataclasses.fields(WorldModelConfig)}
        try:
            cfg = WorldModelConfig(**{k: v for k, v in meta.items() if k in fields})
        except TypeError as e:
            raise ModelError(f"evaluator {directory}: bad config: {e}") from None
        weights = os.path.join(directory, WEIGHTS)
        if not os.path.isfile(weights) or sha256_file(weights) != meta.get("weights_sha256"):
            raise ModelError(f"evaluator {directory}: {WEIGHTS} is missing or does not match {CONFIG}")
        tok = Tokenizer.load(os.path.join(directory, TOKENIZER))
        if tok.vocab_size != cfg.vocab_size:
            raise ModelError(f"evaluator {directory}: the tokenizer has {tok.vocab_size} words, "
                             f"the model {cfg.vocab_size}")
        model = WorldModel(cfg)
        try:
            model.load_state_dict(load_file(weights))
        except (SafetensorError, RuntimeError) as e:
            raise ModelError(f"evaluator {directory}: {WEIGHTS} does not fit the config: "
                             f"{str(e)[:200]}") from None
        return cls(model.eval(), tok)


def is_evaluator(directory: str) -> bool:
    """Whether `directory` holds an evaluator (its config names this format), not a TLM."""
    try:
        with open(os.path.join(directory, CONFIG)) as f:
            meta = json.load(f)
    except (OSError, ValueError):
        return False
    return isinstance(meta, dict) and meta.get("format") == FORMAT


def grow_evaluator_vocab(directory: str, tok: Tokenizer) -> None:
    """Rewrite the evaluator in `directory` for `tok`, its vocabulary with words appended
    (`WorldModel.grow_vocab`); the config's entries beyond the model's (how it was
    trained) are kept."""
    ev = Evaluator.load(directory)
    with open(os.path.join(directory, CONFIG)) as f:
        meta = json.load(f)
    own = {"format", "version", "weights_sha256", *dataclasses.asdict(ev.model.config)}
    Evaluator(ev.model.grow_vocab(tok.vocab_size), tok).save(
        directory, {k: v for k, v in meta.items() if k not in own})


def train_evaluator(programs: Sequence[Program], tok: Tokenizer, cfg: WorldModelConfig, steps: int = 2000,
                    tasks_per_batch: int = 16, per_task: int = 16, lr: float = 2e-3,
                    regression_weight: float = 1.0, seed: int = 0, threads: int = 1,
                    log: Callable[[str], None] | None = None, checkpoint: str | None = None,
                    checkpoint_every: int = 100) -> Evaluator:
    """Train an evaluator: each step takes `per_task` programs of each of `tasks_per_batch`
    tasks; loss = pairwise ranking within tasks + squared error of the predicted
    normalised throughput. With `checkpoint` (a directory) the weights, optimizer state and
    step are saved there every `checkpoint_every` steps, and a run started again with the
    same settings goes on from the last one: same batches, same schedule."""
    y = normalized_throughput(programs)
    by_task = group_indices(programs)
    keys = sorted(k for k, ix in by_task.items() if len(ix) >= 2)
    if not keys:
        raise TlmirError("training an evaluator needs a task with at least two measured programs")
    rng = random.Random(seed)
    torch.manual_seed(seed)
    prev_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    ev = Evaluator(WorldModel(cfg), tok)
    ev.fit_feature_scale(programs)
    opt = torch.optim.AdamW(ev.model.parameters(), lr=lr, weight_decay=1e-4)
    run = {"steps": steps, "seed": seed, "lr": lr, "programs": len(programs)}
    start = _resume(checkpoint, ev, opt, run, log) if checkpoint else 0
    t0 = time.perf_counter()
    try:
        ev.model.train()
        for step in range(steps):
            idx, groups = [], []
            for gi, k in enumerate(rng.sample(keys, min(tasks_per_batch, len(keys)))):
                pick = rng.sample(by_task[k], min(per_task, len(by_task[k])))
                idx += pick
                groups += [gi] * len(pick)
            if step < start:  # drawn only to keep the batches those of an unbroken run
                continue
            for g in opt.param_groups:  # cosine decay
                g["lr"] = lr * 0.5 * (1 + math.cos(math.pi * step / steps))
            loss = ev._loss([programs[i] for i in idx], torch.tensor(y[idx], dtype=torch.float32),
                            torch.tensor(groups), regression_weight)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(ev.model.parameters(), 1.0)
            opt.step()
            if log and (step % 100 == 0 or step == steps - 1):
                log(f"step {step + 1}/{steps} | loss {loss.item():.4f} | {time.perf_counter() - t0:.0f}s")
            if checkpoint and (step + 1) % checkpoint_every == 0 and step + 1 < steps:
                _save_checkpoint(checkpoint, ev, opt, {**run, "step": step + 1})
    finally:
        torch.set_num_threads(prev_threads)
    ev.model.eval()
    return ev


def _save_checkpoint(directory: str, ev: Evaluator, opt, run: dict) -> None:
    """Training state first, then the evaluator (whose config.json, written last, says the step)."""
    from safetensors.torch import save_file

    from ..lm.checkpoint import training_state
    os.makedirs(directory, exist_ok=True)
    state = {**training_state(ev.model, opt), "step": torch.tensor([run["step"]])}
    atomic_write(os.path.join(directory, STATE), lambda tmp: save_file(state, tmp))
    ev.save(directory, extra={"run": run})


def _resume(directory: str, ev: Evaluator, opt, run: dict, log) -> int:
    """The step a checkpoint in `directory` reached (0 if there is none), its weights and
    optimizer state loaded into `ev` and `opt`."""
    from safetensors.torch import load_file

    from ..lm.checkpoint import load_training_state
    if not os.path.isfile(os.path.join(directory, CONFIG)):
        return 0
    saved = Evaluator.load(directory)
    with open(os.path.join(directory, CONFIG)) as f:
        meta = json.load(f)
    step = meta.get("run", {}).get("step", 0)
    if saved.model.config != ev.model.config or {**meta.get("run", {}), "step": 0} != {**run, "step": 0}:
        raise ModelError(f"evaluator checkpoint {directory} was trained with other settings "
                         f"({meta.get('run')}); remove it to start afresh")
    ev.model.load_state_dict(saved.model.state_dict())
    state = os.path.join(directory, STATE)
    if os.path.isfile(state) and int(load_file(state)["step"][0]) == step:
        load_training_state(state, ev.model, opt, step)
    if log:
        log(f"[evaluator] resumed from {directory} at step {step}")
    return step


def ranking_metrics(programs: Sequence[Program], scores: np.ndarray, k: int = 10) -> dict:
    """How well `scores` rank each task's programs, averaged over tasks with a measured
    best: pairwise accuracy (pairs of distinct latency, a failure slower than anything),
    top-1 / top-k recall (the measured best is the top pick / among the top k picks) and
    Kendall's tau."""
    y = normalized_throughput(programs)
    by_task = group_indices(programs)
    acc, top1, topk, taus = [], [], [], []
    for ix in by_task.values():
        if len(ix) < 2 or max(y[ix]) <= 0:
            continue
        t, s = y[ix], np.asarray(scores)[ix]
        dt = np.sign(t[:, None] - t[None, :])
        ds = np.sign(s[:, None] - s[None, :])
        pairs = np.triu(dt != 0, 1)
        if pairs.any():
            acc.append(float((dt[pairs] == ds[pairs]).mean()))
            taus.append(float((dt[pairs] * ds[pairs]).sum() / pairs.sum()))
        order = np.argsort(-s, kind="stable")
        best = int(np.argmax(t))
        top1.append(float(order[0] == best))
        topk.append(float(best in order[:k]))
    mean = (lambda xs: float(np.mean(xs)) if xs else math.nan)
    return {"tasks": len(top1), "pairwise_accuracy": mean(acc), "top1_recall": mean(top1),
            f"top{k}_recall": mean(topk), "kendall_tau": mean(taus)}


def drop_stale(records: Sequence[Record], stale: Sequence[tuple[str, float]]) -> list[Record]:
    """The records but the superseded ones: of a task whose name matches a pattern of
    `stale`, measured before its time, where the task was measured again after it on the
    same CPU class ((pattern, Unix seconds) pairs). A task with only old records keeps
    them: they are all it knows of its op type; a record of unknown time is kept."""
    import re
    rules = [(re.compile(p), t) for p, t in stale]
    remeasured = {(r.task_key, r.hw_key, i) for r in records for i, (pat, t) in enumerate(rules)
                  if r.timestamp is not None and r.timestamp >= t and pat.search(r.task_name)}
    return [r for r in records if not any(r.timestamp is not None and r.timestamp < t
                                          and (r.task_key, r.hw_key, i) in remeasured
                                          for i, (_, t) in enumerate(rules))]


def train_from_records(paths: Sequence[str], out: str, tokenizer: str, cfg_fields: dict | None = None,
                       steps: int = 2000, seed: int = 0, log: Callable[[str], None] | None = print,
                       stale: Sequence[tuple[str, float]] = ()) -> dict:
    """Train on the training split's programs in `paths`, score the held-out split's (never
    trained on), save to `out` (checkpoints in `out`/checkpoint until it is done: a killed
    run started again goes on from the last); returns the held-out ranking metrics. `cfg_fields`:
    WorldModelConfig fields (`n_features=NUM_FEATURES`: the head reads program features).
    `stale`: (task-name pattern, Unix time) pairs; a training record of a matching task
    measured before its time, where the task was measured again since, is left out
    (`drop_stale`: shuffled strided loads made the programs that vectorize strided reads
    fastest, which older records of strided convs rank slowest). Scheduler-tick artefacts
    (`records.tick_artefact`: parallel programs timed beside another job) are left out of
    both sides."""
    from ..workloads import split_tasks
    recs = read_records(paths)
    fresh = drop_stale(recs, stale)
    if log and len(fresh) < len(recs):
        log(f"[evaluator] {len(recs) - len(fresh)} stale records left out")
    clean = drop_tick_artefacts(fresh)
    if log and len(clean) < len(fresh):
        log(f"[evaluator] {len(fresh) - len(clean)} scheduler-tick artefacts left out")
    recs = clean
    tok = Tokenizer.load(tokenizer)
    train = programs_from_records(recs, {t.key: t for t in split_tasks("train")})
    held = programs_from_records(recs, {t.key: t for t in split_tasks("held-out")})
    if log:
        log(f"[evaluator] {len(train)} training programs of {len({p.task_key for p in train})} tasks, "
            f"{len(held)} held-out programs of {len({p.task_key for p in held})} tasks")
    cfg = WorldModelConfig(tok.vocab_size, **(cfg_fields or {}))
    checkpoint = os.path.join(out, "checkpoint")
    ev = train_evaluator(train, tok, cfg, steps=steps, seed=seed, log=log, checkpoint=checkpoint)
    metrics = ranking_metrics(held, ev.score_programs(held)) if held else {}
    ev.save(out, extra={"trained_on": len(train), "held_out_metrics": metrics})
    shutil.rmtree(checkpoint, ignore_errors=True)
    return metrics
