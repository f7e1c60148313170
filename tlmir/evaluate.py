"""The paper's evaluation (§6.3–6.4): TLM at k measurements against search baselines.

    tlmir eval --split held-out --budgets 1,10,32,64 --tlm tlm@none tlm@world \
        --baseline evolutionary:64,1000 evolutionary@world:64

Tasks: one representative per category of the split (op family, and kernel size for
convolutions), the median-FLOP task of each. Frameworks: `tlm-<k>` is an independent
TLM run of k measurements per task (`tlm@world`: the TLM's samples ranked by the world
model, `tlm@none`: measured as written); `<strategy>-<k>` of a baseline is the best after
the first k measurements of one run of the largest budget (search is sequential, so
the first 64 of a 1000-measurement run are a 64-measurement run).

Two phases. `search` tunes, one records DB per run under `out`, and keeps the wall
clock each run has spent per task in `<db>.wall.json` after every round, so a killed
evaluation resumes where it stopped. `report` re-times every framework's 3 best programs
of every task in one process, in 3 passes with the programs alternating (each program's
median of repeats, all cores; a framework keeps its fastest), next to PyTorch:
search-time measurements were taken under whatever else ran, and one timing per
framework lets a stall of a shared machine decide; the report's are comparable.
Framework_k = Σ_tasks best latency over the tasks every framework has; the speedup
matrices hold Framework_col / Framework_row over the tasks both frameworks have (Σ, and
the geometric mean of per-task ratios).

With an `archive` directory (kept in the repository) every run's records
(`<db>.jsonl.xz`) and wall clock are copied there after each task, and an `out` without
a run's DB starts from the archive's: a baseline searched once serves every later model.

`network_report` is the end-to-end view: a network's weighted latency (Σ weight ×
subgraph latency) after tuning every subgraph, next to PyTorch eager running the same
layers (each subgraph's fastest path: the default call or oneDNN) and to the untuned
default schedules. `make demo` prints one.
"""
from __future__ import annotations

import json
import math
import os
import shutil
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .errors import TlmirError
from .runtime.records import RecordDB
from .runtime.run_lock import run_lock
from .runtime.target import HardwareParams, SearchParams, host_hardware
from .runtime.task import Task, category, task_type

EXHAUSTED = "exhausted"  # wall-file entry: the run measured every program of the task's space


def representative_tasks(split: str = "held-out") -> list[Task]:
    """The median-FLOP task of every category of the split, in category order."""
    from .workloads import split_tasks
    return median_per_category(split_tasks(split))


def median_per_category(tasks: list[Task]) -> list[Task]:
    """The median-FLOP task of every category among `tasks`, in category order."""
    groups: dict[str, list[Task]] = {}
    for t in tasks:
        groups.setdefault(category(t), []).append(t)
    out = []
    for cat in sorted(groups):
        ts = sorted(groups[cat], key=lambda t: (t.flops, t.key))
        out.append(ts[(len(ts) - 1) // 2])
    return out


@dataclass(frozen=True)
class Framework:
    strategy: str
    k: int
    run_budget: int  # measurements of the run it is read from

    @property
    def label(self) -> str:
        return f"{self.strategy}-{self.k}"

    @property
    def db_name(self) -> str:
        """TLM budgets are independent runs; a baseline's budgets are prefixes of one run."""
        return f"{self.strategy}-{self.k}.db" if self.strategy.startswith("tlm") else f"{self.strategy}.db"


def frameworks(budgets: list[int], baselines: str | list[str], tlm: str | list[str] = "tlm") -> list[Framework]:
    """Each TLM strategy (`tlm`, `tlm@none`, ...) at each budget, and each baseline
    `strategy:k1,k2,...` as prefixes of one run of it."""
    from .search.strategy import parse_strategy
    tlms = [tlm] if isinstance(tlm, str) else list(tlm)
    for spec in tlms:
        if not spec.startswith("tlm"):
            raise TlmirError(f"--tlm {spec!r}: expected a tlm strategy (tlm, tlm@world, tlm@none)")
        parse_strategy(spec)
    out = [Framework(spec, k, k) for spec in tlms for k in sorted(budgets)]
    for baseline in ([baselines] if isinstance(baselines, str) else baselines):
        if not baseline:
            continue
        strategy, _, ks = baseline.partition(":")
        try:
            bks = sorted(int(k) for k in ks.split(","))
        except ValueError:
            raise TlmirError(f"--baseline {baseline!r}: expected STRATEGY:K1,K2,...") from None
        parse_strategy(strategy)
        out += [Framework(strategy, k, bks[-1]) for k in bks]
    if any(f.k < 1 for f in out):
        raise TlmirError("measurement budgets must be >= 1")
    return out


def task_baselines(tasks, threads: int, spread: bool = False) -> list[dict]:
    """{framework: seconds} of each task at `threads` ({} for a task without an op), all
    timed in child processes of their own (ops.baselines.baselines_isolated); with
    `spread`, {framework: (fastest, median, slowest)} of the repeated timings."""
    from .ops.baselines import baselines_isolated
    has_op = [getattr(t, "op", None) is not None for t in tasks]
    times = iter(baselines_isolated([t.op for t, ok in zip(tasks, has_op) if ok], [threads], spread=spread))
    return [next(times)[threads] if ok else {} for ok in has_op]


def pytorch_fastest(base: dict) -> float | None:
    """PyTorch's fastest path of one task's baselines (`task_baselines`): its default call
    or oneDNN, whichever is faster (None where it has neither)."""
    return min((base[f] for f in ("torch", "onednn") if base.get(f)), default=None)


def program_timer(task: Task, trace_json: str, repeat: int = 15,
                  hw: HardwareParams | None = None) -> Callable[[int], float]:
    """A function of the thread count giving the median seconds of a recorded program, which
    is rebuilt from its trace (for `hw`: default this host) and checked once, here: reports
    time one program at several thread counts and rounds without compiling it again for each."""
    from .build import reference_outputs
    from .runtime.backend import compile_func
    from .runtime.measure import check_outputs
    from .schedule.decider import Trace
    from .schedule.lower import lower
    from .schedule.space import SearchSpace
    space = SearchSpace(task.outputs, hw) if hw is not None else SearchSpace(task.outputs)
    kernel = compile_func(lower(space.replay(Trace.from_json(trace_json)), task.args), hw)
    ins = task.random_inputs(0)
    outs = [np.zeros(t.shape, t.dtype) for t in task.outputs]
    kernel(*ins, *outs)
    wrong = check_outputs(outs, reference_outputs(task, ins), 1e-3, 1e-3)
    if wrong:
        raise TlmirError(f"task {task.name}: the recorded program is wrong on re-run: {wrong}")

    def seconds(threads: int) -> float:
        kernel.num_threads = threads
        return kernel.benchmark(*ins, *outs, repeat=repeat).median
    return seconds


def confirmed_seconds(task: Task, programs: dict[str, list[str]], threads: int,
                      rounds: int = 3) -> dict[str, float]:
    """label -> seconds of its fastest program: every label's programs (traces, e.g. a run's
    few best as its search timed them) are built and checked once, then timed in `rounds`
    passes with the programs alternating within a pass; each keeps its fastest pass. One
    timing per run lets a stall of a shared machine decide a comparison; a measurement taken
    during a stall can also have ranked a run's programs wrongly, so its best few compete."""
    timers = [(label, program_timer(task, trace)) for label, traces in programs.items() for trace in traces]
    secs = {label: math.inf for label, _ in timers}
    for _ in range(rounds):
        for label, timer in timers:
            secs[label] = min(secs[label], timer(threads))
    return secs


def time_program(task: Task, trace_json: str, threads: int, repeat: int = 15) -> float:
    """Median seconds of a recorded program, rebuilt from its trace and checked first."""
    return program_timer(task, trace_json, repeat)(threads)


def default_seconds(task: Task, threads: int, repeat: int = 5) -> float:
    """Median seconds of the untuned default schedule (every stage at root, no annotations)."""
    from .runtime.backend import compile_func
    from .schedule.lower import lower
    from .schedule.schedule import create_schedule
    kernel = compile_func(lower(create_schedule(task.outputs), task.args))
    kernel.num_threads = threads
    return kernel_seconds(task, kernel, repeat)


def kernel_seconds(task: Task, kernel, repeat: int = 5) -> float:
    """Median seconds of a built kernel of `task` on the task's random inputs."""
    ins = task.random_inputs(0)
    outs = [np.zeros(t.shape, t.dtype) for t in task.outputs]
    return kernel.benchmark(*ins, *outs, warmup=1, repeat=repeat).median


class Evaluation:
    def __init__(self, out: str, tasks: list[Task], fws: list[Framework], model: str = "default",
                 sp: SearchParams | None = None, log: Callable[[str], None] | None = print,
                 archive: str | None = None, seed: int = 0):
        self.out, self.tasks, self.fws, self.model, self.seed = out, tasks, fws, model, seed
        self.sp = sp or SearchParams()
        self.hw = host_hardware()
        self.log = log or (lambda m: None)
        self.archive = archive
        os.makedirs(out, exist_ok=True)
        if archive:
            for db_name in sorted({f.db_name for f in fws}):
                self._restore(db_name)
        self.wall: dict = {}  # db name -> task key -> {measurements: seconds spent}
        legacy = os.path.join(out, "wall.json")  # one file for every run (before per-run files)
        if os.path.exists(legacy):
            for db_name, run in self._read(legacy).items():
                for key, sec in run.items():
                    if "@" in key:
                        task_key, m = key.rsplit("@", 1)
                        self.wall.setdefault(db_name, {}).setdefault(task_key, {})[m] = sec
        for f in fws:
            path = self._wall_path(f.db_name)
            if os.path.exists(path):
                self.wall[f.db_name] = self._read(path)

    def _wall_path(self, db_name: str) -> str:
        """One file per run: evaluations searching different runs at once never collide."""
        return os.path.join(self.out, db_name + ".wall.json")

    @staticmethod
    def _read(path: str) -> dict:
        try:
            with open(path) as fh:
                return json.load(fh)
        except (OSError, ValueError) as e:
            raise TlmirError(f"{path} is unreadable: {e}") from None

    def _save_wall(self, db_name: str) -> None:
        from .runtime.files import atomic_write_text
        atomic_write_text(self._wall_path(db_name), json.dumps(self.wall[db_name], indent=1) + "\n")

    # ------------------------------------------------------------------ archive
    def _archived(self, db_name: str) -> tuple[str, str]:
        """(records, wall clock) of a run in the archive."""
        base = os.path.join(self.archive, db_name.removesuffix(".db"))
        return base + ".jsonl.xz", base + ".wall.json"

    def _restore(self, db_name: str) -> None:
        """A run this `out` lacks starts from the archive's records and wall clock."""
        from .runtime.records import import_jsonl
        records, wall = self._archived(db_name)
        if os.path.exists(os.path.join(self.out, db_name)) or not os.path.exists(records):
            return
        with RecordDB(os.path.join(self.out, db_name)) as db:
            n = import_jsonl(records, db, dedup=False)
            here = db.count(hw_key=self.hw.key)
        if os.path.exists(wall):
            shutil.copyfile(wall, self._wall_path(db_name))
        self.log(f"[eval] {db_name}: {n} measurements restored from the archive {self.archive}, "
                 f"{here} of them on this host's class {self.hw.key}"
                 + ("" if here else " (a search measures its budget again here: records of "
                                    "another CPU class do not count)"))

    def _save_archive(self, db_name: str, db: RecordDB) -> None:
        from .runtime.records import export_jsonl
        from .runtime.files import atomic_write
        records, wall = self._archived(db_name)
        export_jsonl(db, records)
        atomic_write(wall, lambda tmp: shutil.copyfile(self._wall_path(db_name), tmp))

    # ------------------------------------------------------------------ search
    def search(self, which: str = "all") -> None:
        """Tune every framework's runs (`which`: all | tlm | baseline), smallest budgets
        first. Different runs may be searched by different processes, one run by one."""
        from .search.measurer import Measurer
        from .search.tune import TaskTuner
        runs = sorted({(f.strategy, f.run_budget, f.db_name) for f in self.fws
                       if which == "all" or (which == "tlm") == f.strategy.startswith("tlm")},
                      key=lambda r: (r[1], r[0]))
        meas = Measurer()
        try:
            for strategy, budget, db_name in runs:
                prefixes = sorted(f.k for f in self.fws if f.db_name == db_name)
                with run_lock(self.out, f"evaluation run {db_name} in", db_name + ".lock"), \
                        RecordDB(os.path.join(self.out, db_name)) as db:
                    for k in prefixes:  # every task reaches 64 before any goes on to 1000
                        for task in self.tasks:
                            tuner = TaskTuner(task, strategy, db, meas, self.hw, self.sp, self.seed,
                                              self.model)
                            tuned = self._tune(tuner, strategy, db_name, k)
                            if tuned and self.archive:
                                self._save_archive(db_name, db)
        finally:
            meas.close()

    def _tune(self, tuner, strategy: str, db_name: str, k: int) -> bool:
        """Tune the task up to k measurements; False if it had them already."""
        spent = self.wall.setdefault(db_name, {}).setdefault(tuner.task.key, {})
        r = tuner.result
        if r.measurements >= k or EXHAUSTED in spent:
            return False
        seconds = max((v for m, v in spent.items() if m != EXHAUSTED), default=0.0)
        while r.measurements < k:
            before = r.measurements
            t0 = time.perf_counter()
            if tuner.step(min(tuner.round_size(), k - before)) == 0:
                spent[EXHAUSTED] = r.measurements  # the space has no more programs: complete
                self._save_wall(db_name)
                break
            seconds += time.perf_counter() - t0
            spent[str(r.measurements)] = seconds
            self._save_wall(db_name)
        self.log(f"[eval] {strategy}-{k} {tuner.task.name}: {r.measurements} measurements, "
                 f"best {r.gflops:.1f} GFLOP/s, {seconds:.1f}s")
        return True

    # ------------------------------------------------------------------ report
    def _best(self, fw: Framework, task: Task, top: int = 1) -> tuple[list, int]:
        """The run's `top` fastest verified records of `task` among its first k (fastest
        first), and how many it measured (k where it measured every program of the space)."""
        path = os.path.join(self.out, fw.db_name)
        if not os.path.exists(path):
            return [], 0
        with RecordDB(path) as db:
            recs = db.records(task.key, self.hw.key)[: fw.k]
        ok = sorted((r for r in recs if r.ok), key=lambda r: r.best)[:top]
        if len(recs) < fw.k and self.wall.get(fw.db_name, {}).get(task.key, {}).get(EXHAUSTED) == len(recs):
            return ok, fw.k  # every program measured
        return ok, len(recs)

    def _wall_at(self, fw: Framework, task: Task) -> float | None:
        """Seconds the run had spent on `task` when it reached k measurements (or its last
        count below k, for a space with fewer programs); else estimated from the records'
        timestamps (the time since the run's previous task finished)."""
        spent = self.wall.get(fw.db_name, {}).get(task.key, {})
        upto = [int(m) for m in spent if m != EXHAUSTED and int(m) <= fw.k]
        if upto:
            return spent[str(max(upto))]
        path = os.path.join(self.out, fw.db_name)
        if not os.path.exists(path):
            return None
        with RecordDB(path) as db:
            recs = db.records(hw_key=self.hw.key)
        mine = [i for i, r in enumerate(recs) if r.task_key == task.key][: fw.k]
        if not mine:
            return None
        first, last = recs[mine[0]].timestamp, recs[mine[-1]].timestamp
        prev = recs[mine[0] - 1].timestamp if mine[0] > 0 else first
        return last - (prev if first - prev < 600 else first)  # a longer gap is a pause between calls

    def report(self, threads: int | None = None, top: int = 3, rounds: int = 3) -> dict:
        """Re-time every framework's `top` best programs per task in `rounds` alternating
        passes (`confirmed_seconds`); Framework_k sums and speedups."""
        threads = threads or os.cpu_count() or 1
        rows = []
        for task, base in zip(self.tasks, task_baselines(self.tasks, threads)):
            row = {"task": task.name, "key": task.key, "category": category(task), "flops": task.flops,
                   "seconds": {}, "wall_seconds": {}}
            programs = {}
            for fw in self.fws:
                recs, n = self._best(fw, task, top)
                if recs and n >= fw.k:
                    programs[fw.label] = [r.trace for r in recs]
                    row["wall_seconds"][fw.label] = self._wall_at(fw, task)
            row["seconds"].update(confirmed_seconds(task, programs, threads, rounds))
            fastest = pytorch_fastest(base)
            if fastest:
                row["seconds"]["pytorch"] = fastest
            rows.append(row)
            self.log(f"[report] {task.name}: " + ", ".join(
                f"{k} {task.flops / v / 1e9:.1f}" for k, v in row["seconds"].items()) + " GFLOP/s")
        rep = self.summarize(rows, threads)
        from .runtime.files import atomic_write_text
        atomic_write_text(os.path.join(self.out, "report.json"), json.dumps(rep, indent=1) + "\n")
        atomic_write_text(os.path.join(self.out, "report.md"), markdown(rep))
        return rep

    def summarize(self, rows: list[dict], threads: int) -> dict:
        """Sums over the tasks every framework with a run has, and the speedup matrices."""
        ran = [f for f in self.fws if any(f.label in r["seconds"] for r in rows)]  # a run not made: left out
        labels = [f.label for f in ran] + ["pytorch"]
        complete = [r for r in rows if all(lab in r["seconds"] for lab in labels[:-1])]
        totals = {lab: sum(r["seconds"][lab] for r in complete) for lab in labels
                  if all(lab in r["seconds"] for r in complete)}
        walls = {f.label: sum(r["wall_seconds"][f.label] or 0.0 for r in complete) for f in ran}
        speedup, geomean, common = {}, {}, {}
        for a in labels:  # over the tasks both frameworks have (a partial run still compares)
            for b in labels:
                both = [r["seconds"] for r in rows if a in r["seconds"] and b in r["seconds"]]
                if both:
                    speedup.setdefault(a, {})[b] = sum(t[b] for t in both) / sum(t[a] for t in both)
                    geomean.setdefault(a, {})[b] = math.exp(sum(math.log(t[b] / t[a]) for t in both)
                                                            / len(both))
                    common.setdefault(a, {})[b] = len(both)
        return {"threads": threads, "hardware": self.hw.key, "tasks": rows, "complete_tasks": len(complete),
                "framework_seconds": totals, "wall_seconds": walls, "speedup": speedup,
                "geomean_speedup": geomean, "common_tasks": common}


def markdown(rep: dict) -> str:
    """The report as markdown tables: per task GFLOP/s, Framework_k, speedup matrix."""
    totals, speed = rep["framework_seconds"], rep["speedup"]
    labels = list(dict.fromkeys(lab for r in rep["tasks"] for lab in r["seconds"]))
    lines = [f"{rep['complete_tasks']} tasks with every framework, {rep['threads']} threads, "
             f"{rep['hardware']}", "", "| task | " + " | ".join(labels) + " |",
             "|---|" + "---:|" * len(labels)]
    for r in rep["tasks"]:
        cells = [f"{r['flops'] / r['seconds'][lab] / 1e9:.1f}" if lab in r["seconds"] else "-"
                 for lab in labels]
        lines.append(f"| {r['task']} | " + " | ".join(cells) + " |")
    lines += ["", "GFLOP/s of the re-timed best program.", "",
              "| framework | Σ latency (ms) | tuning wall clock (s) |", "|---|---:|---:|"]
    for lab in totals:
        wall = rep["wall_seconds"].get(lab)
        lines.append(f"| {lab} | {totals[lab] * 1e3:.3f} | {wall:.0f} |" if wall is not None
                     else f"| {lab} | {totals[lab] * 1e3:.3f} | - |")
    labels = [lab for lab in speed if speed[lab]]
    partial = any(n < len(rep["tasks"]) for row in rep["common_tasks"].values() for n in row.values())
    lines += ["", "Speedup: Σ Framework_col / Σ Framework_row over the tasks both have (> 1: the row "
              "is faster)" + ("; the number of those tasks in parentheses." if partial else "."), "",
              "| | " + " | ".join(labels) + " |", "|---|" + "---:|" * len(labels)]
    for a in labels:
        cells = [(f"{speed[a][b]:.2f}" + (f" ({rep['common_tasks'][a][b]})" if partial else ""))
                 if b in speed[a] else "-" for b in labels]
        lines.append(f"| {a} | " + " | ".join(cells) + " |")
    geo = rep["geomean_speedup"]
    lines += ["", "Geometric mean over the same tasks of the per-task speedup (every task counts "
              "alike, where Σ is ruled by the largest).", "",
              "| | " + " | ".join(labels) + " |", "|---|" + "---:|" * len(labels)]
    for a in labels:
        lines.append(f"| {a} | " + " | ".join(f"{geo[a][b]:.2f}" if b in geo[a] else "-" for b in labels) + " |")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------- networks

def network_report(network: str, strategy: str = "tlm", trials_per_task: int = 10, db: str | None = None,
                   model: str = "default", threads: int | None = None, progress: bool = True,
                   sp: SearchParams | None = None, passes: int = 3) -> dict:
    """Tune every subgraph of `network`, then time each subgraph's best program, PyTorch
    eager (its fastest path) and the untuned default schedule (fastest of `passes` timing
    passes): per-subgraph and weighted total latency."""
    from .search.tune import tune_workload
    from .workloads import network_tasks
    tasks = network_tasks(network)
    t0 = time.perf_counter()
    res = tune_workload(tasks, trials_per_task, strategy, db, progress=progress, model=model, sp=sp)
    rep = {"network": network, "strategy": strategy, "trials_per_task": trials_per_task, "db": db,
           "measurements": res.measurements, "tuning_seconds": time.perf_counter() - t0}
    return _time_network(rep, tasks, [r.best_trace.to_json() if r.best_trace else None for r in res.results],
                         [r.measurements for r in res.results], threads, passes)


def retime_network(rep: dict, threads: int | None = None, passes: int = 3) -> dict:
    """`rep` with every subgraph timed again from its records DB (the best program the run
    recorded), PyTorch and the untuned schedule with it: numbers comparable across runs."""
    from .workloads import network_tasks
    tasks = network_tasks(rep["network"])
    hw = host_hardware()
    if not rep.get("db") or not os.path.exists(rep["db"]):
        raise TlmirError(f"network run {rep['network']} {rep['strategy']}-{rep['trials_per_task']}: "
                         f"records DB {rep.get('db')!r} is missing")
    with RecordDB(rep["db"]) as db:
        best = [db.best(t.key, hw.key) for t, _ in tasks]
        counts = [db.count(t.key, hw.key) for t, _ in tasks]
    return _time_network(dict(rep), tasks, [b[0].trace if b else None for b in best], counts, threads, passes)


def _time_network(rep: dict, tasks: list, traces: list, counts: list, threads: int | None,
                  passes: int) -> dict:
    """Time every subgraph's program beside PyTorch in `passes` alternating passes (all
    baselines, then all programs), keeping each one's fastest pass: on a shared machine a
    busy spell then slows one pass of both sides, not one side of the comparison."""
    if passes < 1:
        raise TlmirError(f"network {rep['network']}: timing passes must be >= 1, got {passes}")
    threads = threads or os.cpu_count() or 1
    timers = [program_timer(task, trace) if trace else None for (task, _), trace in zip(tasks, traces)]
    pytorch = [math.inf] * len(tasks)
    searched = [math.inf] * len(tasks)
    for _ in range(passes):
        for i, base in enumerate(task_baselines([t for t, _ in tasks], threads)):
            pytorch[i] = min(pytorch[i], pytorch_fastest(base) or math.inf)
        for i, timer in enumerate(timers):
            if timer is not None:
                searched[i] = min(searched[i], timer(threads))
    rows = []
    for (task, w), n, prog, torch_s in zip(tasks, counts, searched, pytorch):
        row = {"task": task.name, "weight": w, "measurements": n, "searched": prog,
               "default": default_seconds(task, threads),
               "pytorch": torch_s if math.isfinite(torch_s) else None}
        # the untuned default is a candidate too: a subgraph never ends slower than it
        row["tuned"] = min(row["searched"], row["default"])
        row["kept_default"] = row["default"] < row["searched"]
        rows.append(row)
    total = {k: sum(r["weight"] * r[k] for r in rows) for k in ("tuned", "searched", "default")}
    total["pytorch"] = (sum(r["weight"] * r["pytorch"] for r in rows)
                        if all(r["pytorch"] for r in rows) else None)
    rep.update({"threads": threads, "passes": passes, "subgraphs": rows, "total": total})
    return rep


NETWORKS_FILE = "networks.json"


def network_db(out: str, network: str, strategy: str, k: int) -> str:
    return os.path.join(out, f"net-{network}-{strategy}-{k}.db")


def _network_reports(out: str) -> list[dict]:
    path = os.path.join(out, NETWORKS_FILE)
    if not os.path.exists(path):
        return []
    try:
        with open(path) as fh:
            reports = json.load(fh)
    except (OSError, ValueError) as e:
        raise TlmirError(f"{path} is unreadable: {e}") from None
    for r in reports:  # files written before the report named its DB
        r.setdefault("db", network_db(out, r["network"], r["strategy"], r["trials_per_task"]))
    return reports


def _save_network_reports(out: str, reports: list[dict]) -> None:
    from .runtime.files import atomic_write_text
    atomic_write_text(os.path.join(out, NETWORKS_FILE), json.dumps(reports, indent=1) + "\n")


def search_networks(out: str, networks: list[str], runs: list[tuple[str, int]], model: str = "default",
                    progress: bool = True):
    """Tune every network with every (strategy, measurements per subgraph) run not finished
    before; yields each new report as it is saved to networks.json."""
    reports = _network_reports(out)
    for net in networks:
        for strategy, k in runs:
            if any(r["network"] == net and r["strategy"] == strategy and r["trials_per_task"] == k
                   for r in reports):
                continue  # finished in an earlier call
            rep = network_report(net, strategy, k, network_db(out, net, strategy, k), model, progress=progress)
            reports.append(rep)
            _save_network_reports(out, reports)
            yield rep


def report_networks(out: str) -> list[dict]:
    """Re-time every network run of networks.json from its records DB, one after another."""
    reports = [retime_network(r) for r in _network_reports(out)]
    _save_network_reports(out, reports)
    return reports


def format_network(rep: dict) -> str:
    lines = [f"{rep['network']}: {len(rep['subgraphs'])} subgraphs, {rep['strategy']} at "
             f"{rep['trials_per_task']} measurements each ({rep['measurements']} in all, "
             f"{rep['tuning_seconds']:.0f} s of tuning), {rep['threads']} threads, "
             f"fastest of {rep.get('passes', 1)} timing passes",
             f"{'subgraph':<52} {'x':>3} {'tuned ms':>10} {'pytorch ms':>11} {'untuned ms':>11}"]

    def ms(x):
        return f"{x * 1e3:.3f}" if x and math.isfinite(x) else "-"
    for r in rep["subgraphs"]:
        mark = " (untuned default kept: the search's best was slower)" if r.get("kept_default") else ""
        lines.append(f"{r['task'][:52]:<52} {r['weight']:>3g} {ms(r['tuned']):>10} "
                     f"{ms(r['pytorch']):>11} {ms(r['default']):>11}{mark}")
    t = rep["total"]
    lines.append(f"{'total (weighted)':<52} {'':>3} {ms(t['tuned']):>10} {ms(t['pytorch']):>11} "
                 f"{ms(t['default']):>11}")
    if t["pytorch"]:
        lines.append(f"tuned: {how_fast(t['pytorch'] / t['tuned'])} than PyTorch; "
                     f"{how_fast(t['default'] / t['tuned'])} than untuned")
    return "\n".join(lines)


def how_fast(speedup: float) -> str:
    """'1.60x faster' or '2.80x slower' for a ratio old / new."""
    return f"{speedup:.2f}x faster" if speedup >= 1 else f"{1 / speedup:.2f}x slower"
