"""The TLM against evolutionary search on operators that are in no workload.

    .venv/bin/python bench/unseen_ops.py --json runs/unseen/report.json     # the full run
    .venv/bin/python bench/unseen_ops.py --ops matmul_odd --tlm-trials 2 --evo-trials 8 \
        --unconstrained 4 --db-dir /tmp/unseen-test                         # a smoke test
    .venv/bin/python bench/unseen_ops.py [--ops matmul_odd,row_norm] [--tlm-trials 10]
        [--tlm-strategies tlm,tlm+evolutionary] [--evo-trials 200] [--unconstrained 64]
        [--model default] [--db-dir runs/unseen] [--seed 0] [--rounds 5] [--threads N]
        [--compare NAME=DB ...] [--no-torch] [--json out.json]
    .venv/bin/python bench/unseen_ops.py --well-formed-only [--model M] [--unconstrained 64]  # sampling only

Six operators that no network of tlmir.workloads contains (asserted: no task key of the
train or held-out split matches), each an `OpDef` with a numpy reference, so every
program measured while tuning and every program re-timed here is checked against it.
Shapes are named as the builders take them: matmul M x N x K (tlmir.ops.matmul), dense
M x N x K (tlmir.ops.dense: X is M x K, W is N x K).

Per operator: (1) how well-formed the model's unconstrained sentences are: n sentences
sampled at the default temperature (Generator.unconstrained), a sentence counting when it
parses into a trace and that trace replays in the task's space, and how many of n
programs whose answers are sampled without the mask stay in the space; (2) `tune` with the
strategies of --tlm-strategies (default "tlm") for --tlm-trials measurements each and
with "evolutionary" for --evo-trials, each into a records DB of its own under --db-dir
(<strategy>-<model directory name>.db, evolutionary.db), so a rerun resumes and an
already complete run measures nothing (a model retrained in place keeps its DB: use a
fresh --db-dir then); (3) the best program of each (as tune chose it) rebuilt, checked
and re-timed side by side in this process at --threads threads: --rounds rounds, the
programs alternating, each time the median of 15 calls; the median over rounds is
reported. evo/<strategy> > 1 means that strategy's program is faster; each geometric mean
is over the operators timed. PyTorch (a child process,
tlmir.ops.baselines) is shown where tlmir.ops.baselines knows the op: the library's
matmul and conv, not the hand-written ones.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import time

from tlmir.lm.registry import passive_openmp

passive_openmp()  # as `tlmir tune` does: torch's idle threads sleep (before torch loads)

import numpy as np  # noqa: E402

from tlmir import ops, te  # noqa: E402
from tlmir.evaluate import program_timer  # noqa: E402
from tlmir.lm.registry import model_dir  # noqa: E402
from tlmir.ops.base import OpDef, count_flops  # noqa: E402
from tlmir.ops.baselines import baseline_times_isolated  # noqa: E402
from tlmir.runtime.target import cpu_model_name, host_hardware, search_params  # noqa: E402
from tlmir.runtime.task import Task  # noqa: E402
from tlmir.schedule.space import SearchSpace  # noqa: E402
from tlmir.search.tune import tune  # noqa: E402
from tlmir.workloads import split_tasks  # noqa: E402


def elemwise_chain(M: int = 64, N: int = 3000) -> OpDef:
    """y = relu(x * a + b) * sigmoid(x), a and b broadcast per column: three stages."""
    x = te.placeholder((M, N), name="x")
    a = te.placeholder((N,), name="a")
    b = te.placeholder((N,), name="b")
    affine = te.compute((M, N), lambda i, j: x[i, j] * a[j] + b[j], name="affine")
    relu = te.compute((M, N), lambda i, j: te.max(affine[i, j], 0.0), name="relu")
    y = te.compute((M, N), lambda i, j: relu[i, j] * te.sigmoid(x[i, j]), name="y")

    def ref(x, a, b):
        x = x.astype(np.float64)
        return [np.maximum(x * a + b, 0.0) / (1.0 + np.exp(-x))]
    return OpDef("elemwise_chain", [x, a, b], [y], ref, count_flops([y]), dict(M=M, N=N))


def row_norm(M: int = 512, N: int = 1000) -> OpDef:
    """norm[i] = sqrt(sum_k x[i, k]^2): a reduction stage, then an element-wise one."""
    x = te.placeholder((M, N), name="x")
    k = te.reduce_axis(N, "k")
    ss = te.compute((M,), lambda i: te.sum(x[i, k] * x[i, k], axis=k), name="sumsq")
    norm = te.compute((M,), lambda i: te.sqrt(ss[i]), name="norm")

    def ref(x):
        return [np.sqrt((x.astype(np.float64) ** 2).sum(axis=1))]
    return OpDef("row_norm", [x], [norm], ref, count_flops([norm]), dict(M=M, N=N))


def dense_gelu_tanh(M: int = 96, N: int = 1000, K: int = 640) -> OpDef:
    """tlmir.ops.dense (no bias) followed by the tanh approximation of GELU, by hand."""
    d = ops.dense(M, N, K)
    D = d.outputs[0]

    def gelu(v, tanh):  # te expressions (tanh=te.tanh) or float64 arrays (tanh=np.tanh)
        return 0.5 * v * (1.0 + tanh(0.7978845608 * (v + 0.044715 * v * v * v)))
    y = te.compute((M, N), lambda i, j: gelu(D[i, j], te.tanh), name="gelu")

    def ref(x, w):
        return [gelu(d.reference(x, w)[0], np.tanh)]
    return OpDef("dense_gelu_tanh", d.inputs, [y], ref, count_flops([y]), dict(M=M, N=N, K=K))


OPS = {  # name -> (description, builder)
    "matmul_odd": ("matmul 384x1000x768", lambda: ops.matmul(384, 1000, 768)),
    "matmul_m1": ("matmul 1x4096x1536", lambda: ops.matmul(1, 4096, 1536)),
    "elemwise_chain": ("relu(x*a+b)*sigmoid(x) 64x3000", elemwise_chain),
    "row_norm": ("sqrt(sum x^2) rows 512x1000", row_norm),
    "conv_valid": ("conv2d 1x48x30x30 k64 5x5 p0", lambda: ops.conv2d_nchw(1, 48, 30, 30, 64, 5, 5, padding=0)),
    "dense_gelu_tanh": ("dense 96x1000x640 +tanh-gelu", dense_gelu_tanh),
}


def assert_unseen(tasks: dict[str, Task], model: str) -> None:
    """No op here is a workload's task, nor one the model learned or borrows programs of
    (its demonstrations, its transfer sources: novel tasks measured by `tlmir iterate`)."""
    seen = {t.key: t.name for split in ("train", "held-out") for t in split_tasks(split)}
    clash = {n: seen[t.key] for n, t in tasks.items() if t.key in seen}
    assert not clash, f"these ops occur in a workload: {clash}"
    from tlmir.search.transfer_sources import SourceLibrary
    directory = model_dir(model)
    learned = set()
    demos = os.path.join(directory, "demonstrations.jsonl")
    if os.path.isfile(demos):
        with open(demos) as f:
            learned |= {json.loads(line).get("key") for line in f if line.strip()}
    lib = SourceLibrary.of_model(directory)
    if lib is not None:
        learned |= {s.task_key for group in lib.by_type.values() for s in group}
    clash = [n for n, t in tasks.items() if t.key in learned]
    assert not clash, f"model {directory} has programs of these ops: {clash}"


def well_formed(task: Task, hw, model: str, n: int, seed: int) -> dict:
    """Unconstrained sentences: how many parse into a trace, how many of those replay; and
    unmasked answers (the sketch code asks, the model answers from its whole vocabulary):
    how many programs stay in the space."""
    from tlmir.lm.generate import Generator, Sampling, replay_errors
    from tlmir.lm.tlm_search import cached_model  # the one the tlm strategy loads, loaded once
    net, tok, meta = cached_model(model)
    space = SearchSpace(task.outputs, hw)
    t0 = time.perf_counter()
    gen = Generator.for_model(net, tok, meta, hw, Sampling(), seed)
    out = gen.unconstrained(task, n)
    errors = [e for e in replay_errors(out, space) if e is not None]
    parsed, valid = sum(g.trace is not None for g in out), len(out) - len(errors)
    answers = gen.generate(task, n, 64, space, masked=False)
    answers_valid = sum(g.trace is not None for g in answers)
    return {"n": len(out), "parsed": parsed, "valid": valid, "share": valid / max(len(out), 1),
            "answers_valid": answers_valid, "answers_share": answers_valid / max(len(answers), 1),
            "seconds": time.perf_counter() - t0, "errors": errors[:5],
            "answer_errors": [g.error for g in answers if g.trace is None][:5]}


def run_op(name: str, a, hw, dbs: dict[str, tuple[str, str, int]], sp) -> dict:
    desc, make = OPS[name]
    op = make()
    task = Task.from_op(op, name=name)
    row = {"op": name, "desc": desc, "key": task.key, "gflop": task.flops / 1e9, "runs": {}}
    if a.unconstrained > 0:
        row["unconstrained"] = well_formed(task, hw, a.model, a.unconstrained, a.seed)
        u = row["unconstrained"]
        print(f"[{name}] unconstrained: {u['valid']}/{u['n']} well-formed ({u['parsed']} parsed); unmasked "
              f"answers: {u['answers_valid']}/{u['n']} in the space, {u['seconds']:.1f} s", flush=True)
    for run, (strategy, db, trials) in dbs.items():
        t0 = time.perf_counter()
        r = tune(task, trials=trials, strategy=strategy, db=db, progress=False, seed=a.seed, model=a.model,
                 sp=sp if strategy != "evolutionary" else None)
        row["runs"][run] = {"trials": trials, "measurements": r.measurements, "failures": r.failures,
                                 "recorded_s": r.best_seconds if r.best_trace else None,
                                 "confirmed": r.confirmed, "tune_wall_s": time.perf_counter() - t0,
                                 "trace": r.best_trace.to_json() if r.best_trace else None}
        print(f"[{name}] {run}-{trials}: {r.measurements} measurements ({r.failures} failed), "
              f"best recorded {r.gflops:.1f} GFLOP/s, {time.perf_counter() - t0:.1f} s", flush=True)
    timers = {s: program_timer(task, run["trace"]) for s, run in row["runs"].items() if run["trace"]}
    samples: dict[str, list[float]] = {s: [] for s in timers}
    for _ in range(max(1, a.rounds)):
        for s, seconds in timers.items():
            samples[s].append(seconds(a.threads))
    for s, ts in samples.items():
        row["runs"][s].update(seconds=statistics.median(ts), samples=ts)
    if not a.no_torch and op.family in ops.OPS:  # the child process rebuilds the op by family
        row["torch_s"] = baseline_times_isolated(op, (a.threads,))[a.threads].get("torch")
    evo = row["runs"]["evolutionary"].get("seconds")
    row["evo_over"] = {s: evo / row["runs"][s]["seconds"] if evo and row["runs"][s].get("seconds") else None
                       for s in dbs if s != "evolutionary"}
    return row


def markdown(rows: list[dict], dbs: dict) -> str:
    """One row per op: each TLM strategy's and evolutionary's re-timed best, evo/strategy."""
    tlms = [s for s in dbs if s != "evolutionary"]
    names = {s: f"{s.replace('evolutionary', 'evo')}-{k}" for s, (_, _, k) in dbs.items()}
    lines = ["| op | GFLOP | " + " | ".join(f"{names[s]} ms" for s in dbs) + " | "
             + " | ".join(f"evo/{names[s]}" for s in tlms) + " | PyTorch ms | well-formed sentences / answers |",
             "|---|---:|" + "---:|" * (len(dbs) + len(tlms) + 2)]

    def ms(t):
        return f"{t * 1e3:.3f}" if t else "—"
    for r in rows:
        times = " | ".join(ms(r["runs"][s].get("seconds")) for s in dbs)
        ratios = " | ".join(f"{r['evo_over'][s]:.2f}" if r["evo_over"][s] else "—" for s in tlms)
        u = r.get("unconstrained")
        wf = (f"{u['valid']}/{u['n']} ({100 * u['share']:.0f}%) / {u.get('answers_valid', '—')}/{u['n']}"
              if u else "—")
        lines.append(f"| {r['desc']} | {r['gflop']:.3f} | {times} | {ratios} | "
                     f"{ms(r.get('torch_s'))} | {wf} |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ops", help=f"comma-separated subset of: {', '.join(OPS)}")
    p.add_argument("--tlm-trials", type=int, default=10)
    p.add_argument("--tlm-strategies", default="tlm", help="comma-separated: tlm, tlm+evolutionary")
    p.add_argument("--evo-trials", type=int, default=200)
    p.add_argument("--unconstrained", type=int, default=64, help="sentences per op (0: skip)")
    p.add_argument("--model", default="default", help="default, base, tlm or a model directory")
    p.add_argument("--db-dir", default="runs/unseen")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rounds", type=int, default=5, help="re-timing rounds (median)")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="re-timing threads")
    p.add_argument("--no-torch", action="store_true", help="skip the PyTorch baseline")
    p.add_argument("--compare", nargs="*", default=[], metavar="NAME=DB",
                   help="finished tlm runs (record DBs of --tlm-trials each, e.g. of the code or model "
                        "before a change) whose best programs are re-timed beside the others")
    p.add_argument("--well-formed-only", action="store_true",
                   help="only sample --unconstrained sentences and answers per op (no search, no timing)")
    p.add_argument("--search-param", action="append", default=[], metavar="NAME=VALUE",
                   help="a SearchParams field for the TLM runs, as tlmir tune takes it "
                        "(tlm_transfer_deviation=0: transfers by shape alone)")
    p.add_argument("--json")
    a = p.parse_args()
    sp = search_params(a.search_param)
    names = a.ops.split(",") if a.ops else list(OPS)
    unknown = [n for n in names if n not in OPS]
    if unknown:
        raise SystemExit(f"unknown ops {unknown}; known: {', '.join(OPS)}")
    assert_unseen({n: Task.from_op(OPS[n][1](), name=n) for n in OPS}, a.model)
    hw = host_hardware()
    if a.well_formed_only:
        for n in names:
            u = well_formed(Task.from_op(OPS[n][1](), name=n), hw, a.model, a.unconstrained or 64, a.seed)
            print(f"{n:16} sentences {u['valid']}/{u['n']} well-formed ({u['parsed']} parse); "
                  f"answers {u['answers_valid']}/{u['n']} in the space; first errors: {u['errors'][:2]}")
        return
    os.makedirs(a.db_dir, exist_ok=True)
    strategies = a.tlm_strategies.split(",")
    if not set(strategies) <= {"tlm", "tlm+evolutionary"}:
        raise SystemExit(f"--tlm-strategies {a.tlm_strategies!r}: each must be tlm or tlm+evolutionary")
    model = os.path.basename(os.path.abspath(model_dir(a.model)))  # default: base or tlm
    dbs = {s: (s, os.path.join(a.db_dir, f"{s}-{model}.db"), a.tlm_trials) for s in strategies}
    for spec in a.compare:
        name, _, path = spec.partition("=")
        if not name or not os.path.isfile(path) or name in dbs:
            raise SystemExit(f"--compare {spec!r}: give NAME=DB, a new name and an existing records DB")
        dbs[name] = ("tlm", path, a.tlm_trials)
        strategies.append(name)
    dbs["evolutionary"] = ("evolutionary", os.path.join(a.db_dir, "evolutionary.db"), a.evo_trials)
    rows = [run_op(n, a, hw, dbs, sp) for n in names]
    geo = {}
    for s in strategies:
        ratios = [r["evo_over"][s] for r in rows if r["evo_over"][s]]
        geo[s] = math.exp(statistics.fmean(map(math.log, ratios))) if ratios else None
    cpu, cores = cpu_model_name("unknown"), os.cpu_count()
    print(f"\nCPU: {cpu}, {cores} threads (re-timed at {a.threads}); model {a.model} "
          f"({os.path.abspath(model_dir(a.model))}); hardware key {hw.key}\n")
    print(markdown(rows, dbs))
    for s, g in geo.items():
        print(f"geometric mean of evo/{s}: " + (f"{g:.3f}" if g else "—"))
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"cpu": cpu, "threads": cores, "timing_threads": a.threads, "hardware": hw.key,
                       "model": a.model, "model_dir": os.path.abspath(model_dir(a.model)),
                       "args": vars(a), "rows": rows, "geomean_evo_over": geo}, fh, indent=1)


if __name__ == "__main__":
    main()
