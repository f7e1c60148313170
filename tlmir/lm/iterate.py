"""Iterative optimization (paper §5.3, Figure 8): generate with the TLM, measure, keep
the best programs as demonstrations, fine-tune, repeat.

    it = Iteration("models/tlm", base="tlmir/lm/models/base", tasks=split_tasks("train"),
                   config=IterateConfig(rounds=8))
    it.run()

The training tasks are sorted by type and dealt round-robin into `batches` batches;
round r measures batch r mod batches: `per_task` programs per task, written by the
newest fine-tuned model finished at that point (the base model before any). Ranked
(`rank_per_slot` > 1), the model writes `rank_per_slot` programs per measurement and the
world-model evaluator picks all but `explore` of the measured ones; the `explore` others
are drawn at random from the rest, so the demonstrations are not only what the evaluator
already believes. After a
round, the best program of every task (and of every sketch close enough to it) becomes
a demonstration, and a fresh copy of the base model is fine-tuned on all
demonstrations so far — in a separate process at the lowest CPU priority, so it soaks up
what the measurements leave idle (generation, ranking). It is stopped (SIGSTOP) while
programs are timed: a parallel kernel timed beside any running process, even one at nice
19, can wait a whole scheduler tick at a barrier and be recorded 100x slow. The next round
uses whichever fine-tuned model is finished.

`out` holds everything: `records.db` (every measurement, `round` = the round),
`progress.json` (reference latencies, finished (round, task) pairs, the convergence
curve), `sft-r<k>/` (the model fine-tuned after round k), `curve.json`/`curve.png`
(normalized total latency vs measurements) and, at the end, the final model itself
(`out` is then a model directory: `tlmir tune --model <out>`). A killed run restarts
where it stopped: finished measurements are never repeated.
"""
from __future__ import annotations

import json
import math
import multiprocessing as mp
import os
import shutil
import signal
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Callable

import numpy as np

from ..errors import TlmirError
from ..runtime.records import Record, RecordDB, export_jsonl, import_jsonl
from ..runtime.run_lock import run_lock
from ..runtime.target import HardwareParams, SearchParams, host_hardware
from ..runtime.task import task_type
from ..schedule.decider import Trace
from ..schedule.lower import lower
from ..schedule.schedule import create_schedule
from ..schedule.space import SearchSpace
from ..search.measurer import Measurer
from ..search.strategy import make_candidates
from ..search.tune import measure_candidate
from ..runtime.files import atomic_write, atomic_write_text
from .checkpoint import read_config
from .language import hw_prompt, trace_to_sentence

STRATEGY = "iterate"
PROGRESS = "progress.json"
ARCHIVE_RECORDS = "records.jsonl.xz"
MODEL_FILES = ("config.json", "model.safetensors", "tokenizer.json")
ARCHIVE_EVERY = 25  # tasks: with --archive, the measurements are also archived this often within a round


@dataclass
class IterateConfig:
    rounds: int = 8
    per_task: int = 8          # k_p: programs generated and measured per task and round
    batches: int = 4           # k_b: the task set is measured in this many batches
    sft_epochs: float = 8.0
    sft_batch_size: int = 16
    sft_lr: float = 5e-4
    demo_sketch_slack: float = 1.5  # a sketch's best program is a demonstration within this x task best
    temperature: float = 1.0
    rank_per_slot: int = 4     # programs written per program measured; > 1: the evaluator picks
    explore: int = 4           # ranked: measured programs drawn at random from the written rest
    sft_data: str = "best"     # "best": demonstrations; "quality": every measured program with
                               # its quality tier in the prompt (tlmir.lm.quality)
    last_tier_share: float = 0.35  # "quality": share of the slowest tier kept
    seed: int = 0
    start_model: str = ""      # writes the rounds before the first fine-tuning ("": the base)
    extra_demos: str = ""      # demonstrations (.jsonl) every fine-tuning learns besides the run's:
                               # another CPU class's, so the model keeps what it knew of that class


def fastest_by_sketch(records) -> dict[str, dict[int, Record]]:
    """task key -> sketch id -> the fastest verified record of that sketch."""
    best: dict[str, dict[int, Record]] = {}
    for rec in records:
        if rec.ok:
            per_sketch = best.setdefault(rec.task_key, {})
            sketch = json.loads(rec.trace)["sketch"]
            if sketch not in per_sketch or rec.best < per_sketch[sketch].best:
                per_sketch[sketch] = rec
    return best


def best_demonstrations(records, tasks: dict, hw: HardwareParams, slack: float) -> list[dict]:
    """Per task of `tasks` (key -> Task), in that order: the fastest verified program of the
    records measured on `hw`, plus each other sketch's fastest within `slack` x of it, as
    {key, task, sentence, seconds} rows (what `tlmir train sft --data` reads)."""
    best = fastest_by_sketch(r for r in records if r.hw_key == hw.key and r.task_key in tasks)
    out = []
    for key, task in tasks.items():
        if key not in best:
            continue
        top = min(r.best for r in best[key].values())
        for s, trace in sorted((r.best, r.trace) for r in best[key].values()):
            if s <= top * slack:
                out.append({"key": key, "task": task.name, "seconds": s,
                            "sentence": trace_to_sentence(task, hw, Trace.from_json(trace))})
    return out


def by_type(tasks: list) -> list:
    """`tasks` sorted by type, then FLOPs, then key."""
    return sorted(tasks, key=lambda t: (task_type(t), t.flops, t.key))


def spread(tasks: list, n: int) -> list:
    """n of `tasks`, taken at even steps through them sorted by type, FLOPs and key: every
    type keeps its share, small and large."""
    order = by_type(tasks)
    if n >= len(order):
        return order
    return [order[i * len(order) // n] for i in range(n)]


def task_batches(tasks: list, k: int) -> list[list]:
    """Tasks sorted by type (then FLOPs, key), dealt round-robin into k batches, so every
    batch holds every type."""
    order = by_type(tasks)
    return [order[i::k] for i in range(k)]


def running_tasks(out: str, archive: str | None = None) -> list[str]:
    """The task keys of the run in `out` (or, before it has progress, in `archive`): [] if
    none has started."""
    for d in (out, archive):
        path = os.path.join(d, PROGRESS) if d else None
        if path and os.path.exists(path):
            try:
                with open(path) as fh:
                    batches = json.load(fh).get("batches") or []
            except (OSError, ValueError) as e:
                raise TlmirError(f"{path} is unreadable ({e}); remove it to start the run over") from None
            return [key for b in batches for key in b]
    return []


def sft_finished(directory: str) -> bool:
    try:
        _, meta = read_config(directory)
    except TlmirError:
        return False
    train = meta.get("train") or {}
    return bool(train) and train.get("step", 0) >= train.get("steps", 1)


def _die_with_parent() -> None:
    """Ask Linux to kill this process when its parent dies: the parent stops it while it
    measures, and a stopped orphan would otherwise wait forever."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: a killed run may leave its fine-tuning running on


def _sft_process(base: str, sentences: list, out_dir: str, cfg: dict, log_path: str,
                 quality: dict | None = None) -> None:
    """Entry point of the fine-tuning process (lowest CPU priority, one thread)."""
    from .registry import passive_openmp
    _die_with_parent()
    passive_openmp()
    try:
        os.nice(19)
    except OSError:
        pass
    from .sft import sft
    with open(log_path, "a") as fh:
        def log(msg: str) -> None:
            fh.write(msg + "\n")
            fh.flush()
        sft(base, sentences, out_dir, epochs=cfg["sft_epochs"], batch_size=cfg["sft_batch_size"],
            lr=cfg["sft_lr"], seed=cfg["seed"], threads=1, log=log, quality=quality)


class Iteration:
    def __init__(self, out: str, base: str, tasks: list, config: IterateConfig | None = None,
                 hw: HardwareParams | None = None, sp: SearchParams | None = None,
                 log: Callable[[str], None] | None = print, archive: str | None = None):
        from .registry import TOKENIZER_FILE, model_dir
        from .tokenizer import Tokenizer
        self.out, self.base = out, model_dir(base)
        Tokenizer.load(os.path.join(self.base, TOKENIZER_FILE))  # a model of an older language fails here
        self.cfg = config or IterateConfig()
        if min(self.cfg.rounds, self.cfg.per_task, self.cfg.batches, self.cfg.rank_per_slot) < 1:
            raise TlmirError("iterate needs rounds, per_task, batches and rank_per_slot >= 1")
        if self.cfg.explore < 0:
            raise TlmirError("iterate needs explore >= 0")
        if self.cfg.sft_data not in ("best", "quality"):
            raise TlmirError(f"iterate's sft_data must be 'best' or 'quality', got {self.cfg.sft_data!r}")
        if not tasks:
            raise TlmirError("iterate needs at least one task")
        if self.cfg.extra_demos and self.cfg.sft_data != "best":
            raise TlmirError("iterate's extra_demos are demonstrations: they need sft_data 'best'")
        self.start = model_dir(self.cfg.start_model) if self.cfg.start_model else self.base
        self.tasks = {t.key: t for t in tasks}
        self.hw, self.sp = hw or host_hardware(), sp or SearchParams()
        self.extra_rows = self._extra_rows()
        self.log = log or (lambda m: None)
        os.makedirs(out, exist_ok=True)
        self._t0 = time.monotonic()
        self.archive = archive
        if archive:
            self._restore()
        self.progress = self._load_progress()
        self.batches = self._batches()
        self.db = RecordDB(os.path.join(out, "records.db"))
        self._sft: tuple | None = None  # (process, round) of the fine-tuning in flight

    # ------------------------------------------------------------------ state
    def _load_progress(self) -> dict:
        path = os.path.join(self.out, PROGRESS)
        if not os.path.exists(path):
            return {"config": asdict(self.cfg), "reference": {}, "done": [], "curve": [],
                    "wall_seconds": 0.0}
        try:
            with open(path) as fh:
                prog = json.load(fh)
            prog["done"] = [list(d) for d in prog["done"]]
            prog["config"] = asdict(self.cfg)  # this run's; each curve point names its ranking
            for k in ("reference", "curve", "wall_seconds"):
                prog[k]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise TlmirError(f"{path} is unreadable ({e}); remove it to start the run over") from None
        return prog

    def _batches(self) -> list[list]:
        """The run's batches: dealt once and kept in progress.json, so a resumed run (or a
        newer version of the dealing rule) never moves a task to another batch."""
        k = min(self.cfg.batches, len(self.tasks))
        saved = self.progress.get("batches")
        if saved is None and self.progress["done"]:  # a run from before batches were saved
            last = max(r for r, _ in self.progress["done"])
            saved = [[key for r, key in self.progress["done"]
                      if r == max((x for x in range(last + 1) if x % k == b), default=-1)]
                     for b in range(k)]
        if saved is None:
            saved = [[t.key for t in b] for b in task_batches(list(self.tasks.values()), k)]
        if len(saved) != k or {key for b in saved for key in b} - set(self.tasks):
            raise TlmirError(f"{self.out} holds a run over other tasks or batches; use a new --out")
        self._join(saved)
        self.progress["batches"] = saved
        self._save_progress()
        return [[self.tasks[key] for key in b if key in self.tasks] for b in saved]

    def _join(self, saved: list[list[str]]) -> None:
        """Deal the tasks the run does not hold yet (op types the workloads gained since it
        started) into its batches, round-robin by type; they join from the first round
        not yet measured in full, the earlier rounds count as done for them."""
        held = {key for b in saved for key in b}
        new = [t for t in self.tasks.values() if t.key not in held]
        if not new:
            return
        done = {tuple(d) for d in self.progress["done"]}
        first = next((r for r in range(self.cfg.rounds)
                      if not all((r, key) in done for key in saved[r % len(saved)])), self.cfg.rounds)
        for batch, dealt in zip(saved, task_batches(new, len(saved))):
            batch += [t.key for t in dealt]
        for t in new:
            self.progress["done"] += [[r, t.key] for r in range(first)]
            self.progress.setdefault("joined", {})[t.key] = first
        self.log(f"[iterate] {len(new)} new tasks join the run from round {first}")

    def _save_progress(self) -> None:
        self.progress["wall_seconds"] = self._wall()
        self._t0 = time.monotonic()
        atomic_write_text(os.path.join(self.out, PROGRESS), json.dumps(self.progress, indent=1) + "\n")

    def _wall(self) -> float:
        return self.progress["wall_seconds"] + time.monotonic() - self._t0

    def _is_done(self, rnd: int, key: str) -> bool:
        return [rnd, key] in self.progress["done"]

    def _last_complete_round(self) -> int:
        """The newest round whose every task was measured (-1: none)."""
        done = {tuple(d) for d in self.progress["done"]}
        rnds = [r for r in range(self.cfg.rounds)
                if all((r, t.key) in done for t in self.batches[r % len(self.batches)])]
        return max(rnds, default=-1)

    # ------------------------------------------------------------------ models
    def _sft_dir(self, rnd: int) -> str:
        return os.path.join(self.out, f"sft-r{rnd}")

    def latest_model(self, before: int) -> tuple[str, int]:
        """(directory, round) of the newest finished fine-tuned model of a round < before;
        (the start model, -1) if none."""
        for r in range(before - 1, -1, -1):
            if sft_finished(self._sft_dir(r)):
                return self._sft_dir(r), r
        return self.start, -1

    def _extra_rows(self) -> list[dict]:
        """The extra demonstrations but those of this run's CPU class (a shipped model's file
        may hold some): the run's own measurements of its class supersede them."""
        if not self.cfg.extra_demos:
            return []
        from .sample import read_sentences  # an unreadable file or row: an error naming it
        own = f" {' '.join(hw_prompt(self.hw))} "
        return [r for r in read_sentences(self.cfg.extra_demos) if own not in r["sentence"]]

    def demonstrations(self) -> list[dict]:
        """The best program per task, plus each sketch's best within `demo_sketch_slack`
        ({key, task, sentence, seconds}, the format `tlmir train sft --data` reads)."""
        return best_demonstrations(self.db.records(hw_key=self.hw.key, ok_only=True), self.tasks, self.hw,
                                   self.cfg.demo_sketch_slack)

    def export_demonstrations(self, path: str) -> int:
        """Write what the next fine-tuning would learn (the extra demonstrations, then the
        run's) as a `tlmir train sft --data` file, e.g. of a run stopped between rounds, or
        to ship beside a model; returns how many rows."""
        rows = self.extra_rows + self.demonstrations()
        atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in rows))
        return len(rows)

    def training_sentences(self) -> tuple[list[str], dict | None]:
        """(sentences, quality config) the next fine-tuning learns from: the demonstrations
        (also written to demonstrations.jsonl), or with sft_data "quality" every measured
        program with its tier."""
        if self.cfg.sft_data == "quality":
            from .quality import quality_config, quality_sentences
            quality = quality_config()
            rows = quality_sentences(self.db.records(hw_key=self.hw.key, ok_only=True),
                                     list(self.tasks.values()), self.hw, quality["bounds"],
                                     self.cfg.last_tier_share, self.cfg.seed)
            return [r["sentence"] for r in rows], quality
        demos = self.demonstrations()
        if demos:
            atomic_write_text(os.path.join(self.out, "demonstrations.jsonl"),
                              "".join(json.dumps(d) + "\n" for d in demos))
        return [d["sentence"] for d in demos + self.extra_rows], None

    def _start_sft(self, rnd: int) -> None:
        sentences, quality = self.training_sentences()
        if not sentences:
            return
        if os.path.isdir(self._sft_dir(rnd)):
            shutil.rmtree(self._sft_dir(rnd))  # unfinished, from a killed run: start it over
        self._write_sources(self._sft_dir(rnd))
        ctx = mp.get_context("spawn")
        proc = ctx.Process(target=_sft_process, daemon=True,
                           args=(self.base, sentences, self._sft_dir(rnd), asdict(self.cfg),
                                 os.path.join(self.out, "sft.log"), quality))
        proc.start()
        self._sft = (proc, rnd)
        what = "programs with their quality" if quality else "demonstrations"
        self.log(f"[iterate] fine-tuning on {len(sentences)} {what} -> {self._sft_dir(rnd)} "
                 f"(pid {proc.pid}, in the background)")

    def _write_sources(self, directory: str) -> None:
        """The transfer sources of the model fine-tuned into `directory`: the start model's
        library updated with this run's fastest program of every task, so the model
        borrows what the run measured (search/transfer_sources.py)."""
        from ..search.transfer_sources import SOURCES_FILE, SourceLibrary
        lib = SourceLibrary.from_records(self.db.records(ok_only=True), self.tasks, self.sp)
        start = SourceLibrary.of_model(self.start)
        if start is not None:
            lib = start.merge(lib)
        if len(lib):
            os.makedirs(directory, exist_ok=True)
            lib.save(os.path.join(directory, SOURCES_FILE))

    def _sft_running(self) -> bool:
        if self._sft is None:
            return False
        proc, rnd = self._sft
        if proc.is_alive():
            return True
        proc.join()
        if proc.exitcode != 0:
            self.log(f"[iterate] fine-tuning after round {rnd} failed (exit {proc.exitcode}); "
                     f"see {os.path.join(self.out, 'sft.log')}")
        self._sft = None
        return False

    @contextmanager
    def _sft_stopped(self):
        """The fine-tuning process stopped for the duration: nothing runs beside the timing."""
        proc = self._sft[0] if self._sft is not None and self._sft[0].is_alive() else None
        if proc is not None:
            os.kill(proc.pid, signal.SIGSTOP)
        try:
            yield
        finally:
            if proc is not None and proc.is_alive():
                os.kill(proc.pid, signal.SIGCONT)

    # ------------------------------------------------------------------ measuring
    def _reference(self, task, measurer: Measurer) -> float:
        """Latency of the untuned default schedule (the curve's 1.0)."""
        if task.key not in self.progress["reference"]:
            with self._sft_stopped():
                res = measurer.measure(task, lower(create_schedule(task.outputs), task.args), cutoff=0.05)
            self.progress["reference"][task.key] = res.min if res.ok else None
            self._save_progress()
        return self.progress["reference"][task.key]

    def _measure_task(self, rnd: int, task, gen, measurer: Measurer) -> int:
        space = SearchSpace(task.outputs, self.hw, self.sp)
        mine = [r for r in self.db.records(task.key, self.hw.key) if r.strategy == STRATEGY]
        need = self.cfg.per_task - sum(r.round == rnd for r in mine)
        seen = {r.trace for r in mine}
        best = min((r.best for r in mine if r.best is not None), default=math.inf)
        n = 0
        if need > 0:
            cands = self._pick(rnd, task, space, gen, need, seen)
            with self._sft_stopped():
                for cand in cands:
                    rec = measure_candidate(measurer, task, cand, best, self.hw, self.sp, STRATEGY, rnd)
                    self.db.append(rec)
                    if rec.best is not None:
                        best = min(best, rec.best)
                    n += 1
        self.progress["done"].append([rnd, task.key])
        self._save_progress()
        return n

    def _pick(self, rnd: int, task, space: SearchSpace, gen, need: int, seen: set) -> list:
        """Up to `need` new candidates: the first written, or ranked, the evaluator's top
        need - explore of need x rank_per_slot written plus `explore` drawn from the rest.
        A program measured before is never measured twice."""
        written = {}
        for g in gen.generate(task, need * self.cfg.rank_per_slot, 64, space):
            key = g.trace.to_json() if g.trace is not None else None
            if key is not None and key not in seen:
                written.setdefault(key, (g.schedule, g.trace))
        if self.cfg.rank_per_slot == 1 or len(written) <= need:
            return make_candidates(space, task.args, list(written.values())[:need])
        from ..search.rankers import WorldRanker
        ranker = WorldRanker(space, task)
        cands = make_candidates(space, task.args, list(written.values()), features=ranker.reads_features)
        order = np.argsort(-ranker.score(cands), kind="stable")
        top = max(need - self.cfg.explore, 0)
        rest = [int(i) for i in order[top:]]
        rng = np.random.default_rng([self.cfg.seed, rnd, len(seen)])
        explore = rng.choice(rest, size=min(need - top, len(rest)), replace=False)
        return [cands[i] for i in order[:top]] + [cands[i] for i in sorted(explore)]

    def normalized_latency(self) -> float:
        """Σ_tasks min(best, untuned) / Σ_tasks untuned: 1.0 = nothing tuned."""
        num = den = 0.0
        for key, ref in self.progress["reference"].items():
            if key not in self.tasks or not ref:
                continue
            best = self.db.best(key, self.hw.key)
            num += min(ref, best[0].best) if best else ref
            den += ref
        return num / den if den else math.nan

    # ------------------------------------------------------------------ the loop
    def run(self) -> dict:
        """The rounds not yet measured, then the final model; one process per run directory."""
        with run_lock(self.out, "iterate run"):
            return self._rounds()

    def _rounds(self) -> dict:
        from .generate import Generator, Sampling
        from .registry import load_model
        measurer = Measurer()
        try:
            todo = [t for t in self.tasks.values() if t.key not in self.progress["reference"]]
            if todo:
                self.log(f"[iterate] timing the untuned default schedule of {len(todo)} tasks")
            for t in todo:
                self._reference(t, measurer)
            if not self.progress["curve"]:
                self._point(-1, "none")
            last = self._last_complete_round()
            if 0 <= last < self.cfg.rounds - 1 and not sft_finished(self._sft_dir(last)):
                self._start_sft(last)  # the run was killed while fine-tuning: start it again
            for rnd in range(self.cfg.rounds):
                batch = self.batches[rnd % len(self.batches)]
                left = [t for t in batch if not self._is_done(rnd, t.key)]
                if left:
                    mdir, mround = self.latest_model(rnd)
                    model, tok, meta = load_model(mdir)
                    gen = Generator.for_model(model, tok, meta, self.hw, Sampling(self.cfg.temperature),
                                              seed=self.cfg.seed * 1000 + rnd, prompt=self.sp.tlm_prompt)
                    self.log(f"[iterate] round {rnd}: {len(left)} of {len(batch)} tasks, "
                             f"model {os.path.basename(mdir)}")
                    for i, t in enumerate(left):
                        n = self._measure_task(rnd, t, gen, measurer)
                        self.log(f"[iterate] r{rnd} {i + 1}/{len(left)} {t.name}: {n} measured")
                        if self.archive and (i + 1) % ARCHIVE_EVERY == 0 and i + 1 < len(left):
                            self._save_archive()  # a round takes most of an hour: keep what it measured
                    self._point(rnd, os.path.basename(mdir))
                    if not self._sft_running():  # else the next round's fine-tuning takes these too
                        self._start_sft(rnd)
            while self._sft_running():
                time.sleep(1.0)
            last = self.cfg.rounds - 1
            if not sft_finished(self._sft_dir(last)):
                self._start_sft(last)
                while self._sft_running():
                    time.sleep(1.0)
            final, _ = self.latest_model(self.cfg.rounds)
            for f in MODEL_FILES:
                shutil.copyfile(os.path.join(final, f), os.path.join(self.out, f + ".tmp"))
            for f in MODEL_FILES[::-1]:  # config.json last: the directory is a model once it lands
                os.replace(os.path.join(self.out, f + ".tmp"), os.path.join(self.out, f))
            self._plot()
            self._save_progress()
            return {"out": self.out, "final_model": final, "curve": self.progress["curve"]}
        finally:
            measurer.close()
            if self._sft is not None and self._sft[0].is_alive():
                self._sft[0].terminate()  # resumable: pretrain restarts it from its checkpoint
                os.kill(self._sft[0].pid, signal.SIGCONT)  # a stopped process acts on SIGTERM once continued
            self.db.close()

    def _point(self, rnd: int, model: str) -> None:
        pt = {"round": rnd, "measurements": self.db.count(hw_key=self.hw.key),
              "normalized_latency": self.normalized_latency(), "wall_seconds": round(self._wall(), 1),
              "model": model, "rank_per_slot": self.cfg.rank_per_slot, "tasks": len(self.tasks)}
        self.progress["curve"] = [p for p in self.progress["curve"] if p["round"] != rnd] + [pt]
        self._save_progress()
        atomic_write_text(os.path.join(self.out, "curve.json"),
                          json.dumps(self.progress["curve"], indent=1) + "\n")
        self.log(f"[iterate] after round {rnd}: {pt['measurements']} measurements, normalized "
                 f"latency {pt['normalized_latency']:.4f}, {pt['wall_seconds']:.0f}s")
        self._plot()
        if self.archive:
            self._save_archive()

    # ------------------------------------------------------------------ archive
    def _save_archive(self) -> None:
        """Copy the measurements and progress into `archive` (a directory kept in the
        repository: measurements cost hours, a new machine resumes from them)."""
        os.makedirs(self.archive, exist_ok=True)
        n = export_jsonl(self.db, os.path.join(self.archive, ARCHIVE_RECORDS))
        atomic_write(os.path.join(self.archive, PROGRESS),
                     lambda tmp: shutil.copyfile(os.path.join(self.out, PROGRESS), tmp))
        self.log(f"[iterate] archived {n} measurements and the progress to {self.archive}")

    def _restore(self) -> None:
        """A run directory without progress starts from the archive's, if there is one."""
        src = os.path.join(self.archive, PROGRESS)
        if os.path.exists(os.path.join(self.out, PROGRESS)) or not os.path.exists(src):
            return
        with RecordDB(os.path.join(self.out, "records.db")) as db:
            n = import_jsonl(os.path.join(self.archive, ARCHIVE_RECORDS), db)
        shutil.copyfile(src, os.path.join(self.out, PROGRESS))
        self.log(f"[iterate] resumed from the archive {self.archive}: {n} measurements")

    def _plot(self) -> None:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        curve = self.progress["curve"]
        fig = Figure(figsize=(6.5, 4), dpi=110)
        FigureCanvasAgg(fig)
        ax = fig.add_subplot(1, 1, 1)
        ax.plot([p["measurements"] for p in curve], [p["normalized_latency"] for p in curve], "o-")
        ax.set_xlabel("measurements")
        ax.set_ylabel("total latency / untuned (log)")
        ax.set_yscale("log")  # the late rounds gain a few percent each: visible only on a log axis
        ax.set_title(f"iterative optimization ({len(self.tasks)} tasks, "
                     f"{self.cfg.batches} batches, {self.cfg.per_task} per task)")
        ax.grid(alpha=0.3)
        fig.tight_layout()
        atomic_write(os.path.join(self.out, "curve.png"), lambda tmp: fig.savefig(tmp, format="png"))
