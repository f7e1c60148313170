"""The tuning loop: propose candidates, measure them in isolation, record every result.

Every measurement is appended to the records database as it finishes, so a killed tuner
loses at most the candidate in flight; a rerun with the same database continues where
it stopped (measured traces are not measured again and count towards the budget).
"""
from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, field

from ..errors import TlmirError
from ..runtime.records import CONFIRM, Record, RecordDB, confirmed_best
from ..runtime.target import HardwareParams, SearchParams, host_hardware, parse_target
from ..runtime.task import Task
from ..schedule.decider import ReplayDecider, Trace
from ..schedule.lower import lower
from ..schedule.space import SearchSpace
from .measurer import Measurer
from .parallel_lower import replay_request
from .strategy import Candidate, build_candidates, make_candidate, make_strategy


@dataclass
class TuneResult:
    task: Task
    best_seconds: float = math.inf
    best_trace: Trace | None = None
    measurements: int = 0
    failures: int = 0
    curve: list = field(default_factory=list)  # (measurements, best seconds so far)
    wall_seconds: float = 0.0
    space: SearchSpace | None = None
    confirmed: bool = False  # best_seconds is the median of a confirmation, not one record's

    @property
    def gflops(self) -> float:
        return self.task.flops / self.best_seconds / 1e9 if self.best_trace else 0.0

    def best_schedule(self):
        if self.best_trace is None:
            raise TlmirError(f"task {self.task.name!r}: no successful measurement to build")
        return self.space.replay(self.best_trace)

    def build(self):
        """The best kernel found, compiled in this process for the hardware it was tuned for."""
        from ..runtime.backend import compile_func
        return compile_func(lower(self.best_schedule(), self.task.args, kernel_name(self.task.name)), self.space.hw)

    def to_dict(self) -> dict:
        return {"name": self.task.name, "key": self.task.key, "flops": self.task.flops,
                "best_seconds": self.best_seconds if self.best_trace else None,
                "gflops": self.gflops, "measurements": self.measurements, "failures": self.failures,
                "wall_seconds": self.wall_seconds, "confirmed": self.confirmed,
                "trace": self.best_trace.to_dict() if self.best_trace else None}


def kernel_name(name: str) -> str:
    """A task name as a symbol name (what a compiled kernel is called)."""
    return "".join(ch if ch.isalnum() else "_" for ch in name) or "kernel"


class Progress:
    """Progress on stderr: on a terminal one status line redrawn in place (a progress bar
    without a dependency); elsewhere (a log, a pipe) one line per round of measurements."""

    def __init__(self, total: int, label: str, enabled: bool = True):
        self.total, self.label, self.enabled = total, label, enabled
        self.tty = sys.stderr.isatty()
        self.t0 = time.perf_counter()
        self.last: tuple[int, float] | None = None

    def _status(self, done: int, gflops: float) -> str:
        return f"{done}/{self.total}  best {gflops:8.2f} GFLOP/s  {time.perf_counter() - self.t0:6.1f}s"

    def show(self, done: int, best: float, flops: int) -> None:
        if not self.enabled:
            return
        gf = flops / best / 1e9 if math.isfinite(best) else 0.0
        self.last = (done, gf)
        if self.tty:
            width = 24
            filled = int(width * done / max(self.total, 1))
            sys.stderr.write(f"\r{self.label[:40]:<40} [{'#' * filled}{'.' * (width - filled)}] "
                             + self._status(done, gf))
            sys.stderr.flush()

    def line(self, text: str) -> None:
        """A line of its own where there is no terminal to redraw (one per round)."""
        if self.enabled and not self.tty:
            sys.stderr.write(f"[{time.perf_counter() - self.t0:6.1f}s] {text}\n")
            sys.stderr.flush()

    def close(self) -> None:
        if not self.enabled:
            return
        if self.tty:
            sys.stderr.write("\n")
        elif self.last is not None:
            sys.stderr.write(f"{self.label}: {self._status(*self.last)}\n")
            sys.stderr.flush()


def measure_candidate(measurer: Measurer, task: Task, cand: Candidate, best: float, hw: HardwareParams,
                      sp: SearchParams, strategy: str, round: int) -> Record:
    """The record of one candidate: measured (timed once if `cutoff_factor` x slower than
    `best`), or failed with the lowering / measuring error."""
    if not cand.lowered:
        err, kind, times, seconds = cand.error, "lower", [], None
    else:
        res = measurer.measure(task, cand.func, cutoff=best * sp.cutoff_factor if math.isfinite(best) else None)
        err, kind = res.error, (None if res.ok else res.kind)
        times, seconds = (list(res.times), res.min) if res.ok else ([], None)
    return Record(task.key, task.name, hw.key, cand.trace.to_json(), times, seconds, err, kind, strategy, round)


class TaskTuner:
    """Tuning state of one task; `step(n)` measures one round of up to n candidates."""

    def __init__(self, task: Task, strategy: str, db: RecordDB, measurer: Measurer,
                 hw: HardwareParams, sp: SearchParams, seed: int = 0, model: str = "default"):
        self.task, self.db, self.measurer, self.hw, self.sp = task, db, measurer, hw, sp
        self.space = SearchSpace(task.outputs, hw, sp)
        self.search = make_strategy(strategy, self.space, task, seed, model)
        self.strategy = strategy
        self.result = TuneResult(task, space=self.space)
        self._resume()

    def _resume(self) -> None:
        """Count the database's measurements of this task and teach the search from them
        (re-measurements of a confirmation count, but teach nothing new)."""
        past = []
        records = self.db.records(self.task.key, self.hw.key)
        for rec in records:
            trace = Trace.from_json(rec.trace)
            seconds = rec.best if rec.ok else None
            if rec.strategy == CONFIRM:
                self._account(trace, None, searched=False)
                continue
            self._account(trace, seconds)
            past.append((trace, seconds))
        # a trace recorded under an older space fails to replay: counted, not learned from
        learned = iter(build_candidates(self.space, self.task.args,
                                        [replay_request(t) for t, sec in past if sec is not None],
                                        self.search.lowers_features))
        past = [(next(learned) if sec is not None else Candidate(t), sec) for t, sec in past]
        if past:
            self.search.update(past)
        self._take_confirmed(records)

    def _account(self, trace: Trace, seconds: float | None, searched: bool = True) -> None:
        """One more measurement; `searched`=False for a confirmation's (not a failure when None)."""
        r = self.result
        r.measurements += 1
        if seconds is None:
            r.failures += searched
        elif seconds < r.best_seconds:
            r.best_seconds, r.best_trace = seconds, trace
        r.curve.append((r.measurements, r.best_seconds))

    def _take_confirmed(self, records: list[Record]) -> None:
        """Make the confirmed best the result, if a confirmation with a successful
        re-measurement ends `records`."""
        confirmed = confirmed_best(records)
        if confirmed:
            trace, seconds = confirmed
            self.result.best_trace, self.result.best_seconds = Trace.from_json(trace), seconds
            self.result.confirmed = True

    def confirm(self, budget: int, progress: Progress | None = None) -> None:
        """Measure the `confirm_top` fastest programs again, `confirm_rounds` times each and in
        turns, within `budget` measurements, and make the one with the lowest median the
        result. Out of ~1000 noisy measurements the fastest is partly luck: dense's best
        recorded 1.63 ms at 2 threads and re-times at 1.8-1.9 ms, and the machine drifts by
        up to 10% over a search, so programs measured minutes apart are not comparable. A
        confirmation cut short resumes where it stopped."""
        records = self.db.records(self.task.key, self.hw.key)
        done = 0
        while done < len(records) and records[len(records) - 1 - done].strategy == CONFIRM:
            done += 1
        top: list[str] = []
        for rec in sorted((r for r in records if r.ok and r.strategy != CONFIRM), key=lambda r: r.best):
            if rec.trace not in top:
                top.append(rec.trace)
            if len(top) == self.sp.confirm_top:
                break
        plan = (top * self.sp.confirm_rounds)[done:][:budget]
        for text in plan:
            trace = Trace.from_json(text)
            cand = make_candidate(self.space, self.task.args, self.space.apply(trace.sketch, ReplayDecider(trace)))
            rec = measure_candidate(self.measurer, self.task, cand, math.inf, self.hw, self.sp, CONFIRM,
                                    len(self.result.curve))
            self.db.append(rec)
            records.append(rec)
            self._account(trace, None, searched=False)
            if progress:
                progress.show(self.result.measurements, self.result.best_seconds, self.task.flops)
        self._take_confirmed(records)

    def round_size(self) -> int:
        """How many programs the next round should measure (the search decides)."""
        return self.search.round_size(self.result.measurements)

    def step(self, n: int, progress: Progress | None = None, done_before: int = 0) -> int:
        t0 = time.perf_counter()
        measured = []
        cands = self.search.propose(n)
        self.measurer.prepare([c.func for c in cands if c.lowered])
        for cand in cands:
            rec = measure_candidate(self.measurer, self.task, cand, self.result.best_seconds, self.hw, self.sp,
                                    self.strategy, len(self.result.curve))
            self.db.append(rec)
            seconds = rec.best
            self._account(cand.trace, seconds)
            measured.append((cand, seconds))
            if progress:
                progress.show(done_before + len(measured), self.result.best_seconds, self.task.flops)
        self.search.update(measured)
        self.result.wall_seconds += time.perf_counter() - t0
        return len(measured)


def tune(task: Task, target: str = "cpu", trials: int = 64, strategy: str = "evolutionary",
         db: str | RecordDB | None = None, seed: int = 0, progress: bool = True,
         hw: HardwareParams | None = None, sp: SearchParams | None = None,
         measurer: Measurer | None = None, model: str = "default",
         max_seconds: float | None = None) -> TuneResult:
    """Search `task`'s schedule space for `trials` measurements in total (database included),
    compiled for `target` ("cpu", "cpu:avx2", ...: runtime.target.parse_target) unless `hw`
    names the hardware. `model`: the TLM of the tlm strategies (`default`: the shipped one,
    or a directory). `max_seconds`: start no round after this long (the first always runs;
    a borrowed machine's minutes spread over several tasks)."""
    if not isinstance(task, Task):
        raise TlmirError(f"tune expects a tlmir.Task, got {type(task).__name__}")
    if max_seconds is not None and not max_seconds >= 0:
        raise TlmirError(f"tune: max_seconds must be >= 0, got {max_seconds!r}")
    start = time.perf_counter()
    hw, sp = hw or parse_target(target), sp or SearchParams()
    own_db = not isinstance(db, RecordDB)
    rdb = db if isinstance(db, RecordDB) else RecordDB(db or ":memory:")
    meas = measurer or Measurer(hw=hw)
    try:
        tuner = TaskTuner(task, strategy, rdb, meas, hw, sp, seed, model)
        bar = Progress(trials, task.name, progress)
        if tuner.result.measurements:
            bar.line(f"{task.name}: {tuner.result.measurements} measurements resumed from {rdb.path}")
        confirm = sp.confirm_top * sp.confirm_rounds if trials >= sp.confirm_min_trials else 0
        rounds, out_of_time = 0, False
        while tuner.result.measurements < trials - confirm:
            before = tuner.result.measurements
            out_of_time = max_seconds is not None and rounds > 0 and time.perf_counter() - start >= max_seconds
            if out_of_time:
                bar.line(f"{task.name}: out of time ({max_seconds:g} s) at {before} measurements")
                break
            rounds += 1
            n = min(tuner.round_size(), trials - confirm - before)
            if tuner.step(n, bar, before) == 0:
                break  # the space is exhausted
            bar.line(f"{task.name}: {tuner.result.measurements}/{trials} measured, "
                     f"best {tuner.result.gflops:.2f} GFLOP/s")
        if confirm and tuner.result.measurements < trials and not out_of_time:
            tuner.confirm(trials - tuner.result.measurements, bar)
        bar.close()
        return tuner.result
    finally:
        if own_db:
            rdb.close()
        if measurer is None:
            meas.close()


@dataclass
class WorkloadResult:
    results: list                      # TuneResult per task
    weights: list

    @property
    def weighted_seconds(self) -> float:
        """Σ weight × best latency: the workload's end-to-end latency estimate."""
        return sum(w * r.best_seconds for r, w in zip(self.results, self.weights))

    @property
    def measurements(self) -> int:
        return sum(r.measurements for r in self.results)


def _pick_task(tuners: list, weights: list, rounds: list, sp: SearchParams,
               exhausted: set[int] = frozenset()) -> int:
    """The task whose weighted latency is expected to drop fastest per measurement: the
    drop over its last round (backward gradient) plus an optimistic share of its current
    latency that shrinks with the measurements already spent on it (Ansor's scheduler,
    simplified). Tasks whose space is exhausted are never picked."""
    best_score, best_i = -1.0, -1
    for i, (t, w) in enumerate(zip(tuners, weights)):
        if i in exhausted:
            continue
        r = t.result
        if not math.isfinite(r.best_seconds):
            return i  # no working program yet: nothing is more urgent
        curve = r.curve
        back = 0.0
        if rounds[i] >= 2 and len(curve) > sp.measures_per_round:
            prev = curve[-sp.measures_per_round - 1][1]
            back = max(prev - r.best_seconds, 0.0) / sp.measures_per_round
        forward = r.best_seconds / (r.measurements + 1)
        score = w * (back + sp.scheduler_optimism * forward)
        if score > best_score:
            best_score, best_i = score, i
    return best_i


def tune_workload(tasks: list, trials_per_task: int, strategy: str = "evolutionary",
                  db: str | RecordDB | None = None, seed: int = 0, progress: bool = True,
                  hw: HardwareParams | None = None, sp: SearchParams | None = None,
                  model: str = "default") -> WorkloadResult:
    """Tune weighted tasks with a total budget of trials_per_task × len(tasks)
    measurements; every task gets one round first, then the scheduler decides."""
    hw, sp = hw or host_hardware(), sp or SearchParams()
    own_db = not isinstance(db, RecordDB)
    rdb = db if isinstance(db, RecordDB) else RecordDB(db or ":memory:")
    meas = Measurer(hw=hw)
    try:
        tuners = [TaskTuner(t, strategy, rdb, meas, hw, sp, seed, model) for t, _ in tasks]
        weights = [w for _, w in tasks]
        budget = trials_per_task * len(tasks)
        rounds = [0] * len(tasks)
        bar = Progress(budget, f"{len(tasks)} tasks", progress)
        spent = sum(t.result.measurements for t in tuners)
        if spent:
            bar.line(f"{spent} measurements resumed from {rdb.path}")
        exhausted: set[int] = set()
        while spent < budget and len(exhausted) < len(tasks):
            fresh = [i for i in range(len(tasks))
                     if rounds[i] == 0 and tuners[i].result.measurements < trials_per_task]
            i = fresh[0] if fresh else _pick_task(tuners, weights, rounds, sp, exhausted)
            t = tuners[i]
            n = t.step(min(t.round_size(), trials_per_task, budget - spent), bar, spent)
            rounds[i] += 1
            spent += n
            bar.line(f"{spent}/{budget} {t.task.name}: {t.result.measurements} measured, "
                     f"best {t.result.gflops:.2f} GFLOP/s")
            if n == 0:
                exhausted.add(i)  # its space is measured out; the budget goes to the others
        bar.close()
        return WorkloadResult([t.result for t in tuners], weights)
    finally:
        meas.close()
        if own_db:
            rdb.close()
