"""The `tlmir` command line: show, tune, workloads, and the language-model workflow."""
from __future__ import annotations

import os
import sys
from argparse import ArgumentTypeError

from .argtypes import Parser, int_list, nonneg_float, nonneg_int, op_args, op_from_args, positive_int
from .errors import ArgumentError, TlmirError


def cmd_show(args) -> None:
    if args.db:
        return cmd_show_db(args)
    if not args.op:
        raise TlmirError("show needs --op or --db")
    from .ir.printer import te_str
    from .runtime.target import parse_target
    from .schedule import create_schedule, lower, replay, steps_from_json
    op = op_from_args(args)
    hw = parse_target(args.target)
    if args.sample is not None and args.steps:
        raise ArgumentError("show: give --steps (a schedule) or --sample N (programs of the space), not both")
    if args.sample is None and not args.steps and hw.kind == "cuda":
        args.sample = 1  # an unscheduled program runs on no GPU thread
    print(f"# {op!r}\n# te\n{te_str(op.outputs)}\n")
    if args.sample is not None:
        return _show_samples(op, hw, args)
    s = create_schedule(op.outputs)
    if args.steps:
        try:
            text = open(args.steps).read()
        except OSError as e:
            raise TlmirError(f"cannot read schedule steps file {args.steps!r}: {e}") from None
        replay(s, steps_from_json(text))
    if s.history:
        print("# schedule\n" + "\n".join(str(st) for st in s.history) + "\n")
    func = lower(s, op.args, op.family)
    if hw.kind == "cuda":
        return _print_cuda(func, hw)
    _print_lowered(func)
    if args.llvm or args.asm:
        from .runtime.backend import compile_func
        k = compile_func(func)
        if args.llvm:
            print(f"# LLVM IR (optimised)\n{k.llvm_ir}")
        if args.asm:
            print(f"# assembly\n{k.assembly}")


def _show_samples(op, hw, args) -> None:
    """`--sample N`: N programs of the op's space for the target, drawn at random."""
    import random

    from .schedule import lower
    from .schedule.space import SearchSpace
    space = SearchSpace(op.outputs, hw)
    print(f"# {len(space.sketches)} sketch{'es' if len(space.sketches) != 1 else ''} for {hw.key}")
    for k, sk in enumerate(space.sketches):
        print(f"#   {k}: {sk}")
    rng = random.Random(args.seed)
    for n in range(args.sample):
        sch, trace = space.sample(rng)
        print(f"\n# sample {n + 1}: {trace}")
        func = lower(sch, op.args, op.family)
        if hw.kind == "cuda":
            _print_cuda(func, hw)
        else:
            _print_lowered(func)


def _print_cuda(func, hw) -> None:
    """The CUDA C NVRTC compiles for `hw`, and what each kernel uses."""
    from .runtime.backend import compile_func
    k = compile_func(func, hw)
    print(f"# CUDA C for {hw.isa} (NVRTC: " + "; ".join(k.describe().splitlines()) + ")")
    print(k.source)


SUMMARY_HEADER = (f"{'task':<48} {'tlmir ms':>10} {'GFLOP/s':>9} {'trials':>6} {'numpy ms (med, max)':>25} "
                  f"{'torch ms (med, max)':>25} {'onednn ms (med, max)':>25}  vs PyTorch (its fastest path)")
# a baseline column: the fastest of its 6 timings (3 in each of 2 processes), then their median and
# slowest (the spread on a busy machine)


def _summary_row(res, baselines: dict) -> str:
    from .evaluate import how_fast
    best = f"{res.best_seconds * 1e3:10.4f}" if res.best_trace else "    failed"
    row = f"{res.task.name[:48]:<48} {best} {res.gflops:9.2f} {res.measurements:6d}"
    for fw in ("numpy", "torch", "onednn"):  # onednn: PyTorch's oneDNN linear (dense, matmul)
        t = baselines.get(fw)
        row += " " + (f"{t[0] * 1e3:.4f} ({t[1] * 1e3:.4f}, {t[2] * 1e3:.4f})" if t else "-").rjust(25)
    fastest = min((baselines[fw][0] for fw in ("torch", "onednn") if baselines.get(fw)), default=None)
    if fastest and res.best_trace:
        row += f"  {how_fast(fastest / res.best_seconds)}"
    return row


def cmd_tune(args) -> None:
    import json
    import os

    from .runtime.task import Task
    from .search.tune import tune, tune_workload
    from .lm.registry import passive_openmp
    passive_openmp()  # every strategy measures under the same OpenMP wait policy (workers inherit it)
    threads = int(os.environ.get("TLMIR_NUM_THREADS") or os.cpu_count() or 1)
    if args.model_from and args.workload:
        raise ArgumentError("tune: give --workload or --model-from, not both")
    if bool(args.model_from) != bool(args.input):
        raise ArgumentError("tune: --model-from and --input go together")
    imported = None
    if args.model_from:
        from .frontend import import_model
        from .frontend.models import load
        module, inputs, name = load(args.model_from, args.input)
        imported = import_model(module, inputs, name)
        args.workload = name
    if args.workload and (args.op or args.shape or args.param):
        raise ArgumentError("tune: --workload tunes a network's subgraphs; --op/--shape/--param "
                            "name one op: give one or the other")
    if args.workload and args.trials is not None:
        raise ArgumentError("tune: --trials is for --op; with --workload give --trials-per-task")
    if not args.workload and args.trials_per_task is not None:
        raise ArgumentError("tune: --trials-per-task is for --workload; with --op give --trials")
    if args.workload and args.max_seconds is not None:
        raise ArgumentError("tune: --max-seconds is for --op (a workload's tasks share --trials-per-task)")
    if args.cost_model:
        args.strategy = f"{args.strategy.partition('@')[0]}@{args.cost_model}"
    from .runtime.target import parse_target, search_params
    from .search.strategy import parse_strategy
    parse_strategy(args.strategy)  # a bad name or target fails before any task is built
    hw = parse_target(args.target)
    sp = search_params(args.search_param)
    if args.dry_run:
        return _dry_run(args, hw, imported)
    if args.workload:
        from .workloads import network_tasks
        tasks = imported.tasks() if imported else network_tasks(args.workload)
        res = tune_workload(tasks, args.trials_per_task or 64, args.strategy, args.db,
                            args.seed, progress=not args.json, model=args.model, hw=hw, sp=sp)
        results = res.results
    else:
        if not args.op:
            raise TlmirError("tune needs --op (with --shape/--param) or --workload")
        results = [tune(Task.from_op(op_from_args(args)), trials=args.trials or 64, strategy=args.strategy,
                        db=args.db, seed=args.seed, progress=not args.json, hw=hw, model=args.model,
                        sp=sp, max_seconds=args.max_seconds)]
    rows = []
    from .evaluate import default_seconds, task_baselines
    gpu = hw.kind == "cuda"  # the CPU baselines and the untuned (unbound) schedule say nothing of a GPU's
    bases = (task_baselines([r.task for r in results], threads, spread=True) if not (args.no_baselines or gpu)
             else [{}] * len(results))
    if not args.json:
        print(SUMMARY_HEADER)
    for r, base in zip(results, bases):
        d = r.to_dict()
        d.update({f"{k}_seconds": v[0] for k, v in base.items()})
        d.update({f"{k}_median_seconds": v[1] for k, v in base.items()})
        d.update({f"{k}_slowest_seconds": v[2] for k, v in base.items()})
        d["default_seconds"] = None if gpu else default_seconds(r.task, threads)  # a candidate too
        rows.append(d)
        if not args.json:
            print(_summary_row(r, base))
            if not gpu and (not r.best_trace or d["default_seconds"] < r.best_seconds):
                print(f"  {r.task.name}: the untuned default schedule runs in {d['default_seconds'] * 1e3:.4f} ms, "
                      f"faster than the search's best: keep it (`tlmir.create_schedule`, no steps)")
    if args.workload and not args.json:
        print(f"weighted latency of {args.workload}: {res.weighted_seconds * 1e3:.3f} ms "
              f"after {res.measurements} measurements")
    if imported is not None and not args.json:
        from .frontend import CompiledModel, build_kernels
        built = build_kernels(tasks, results, args.strategy, args.target)   # the programs just found
        cm = CompiledModel(imported.graph, imported.part, built, imported.name)
        print(cm.report(args=list(inputs), eager=module))
    if args.json:
        print(json.dumps({"tasks": rows} if args.workload else rows[0]))


def _dry_run(args, hw, imported) -> None:
    """`tune --dry-run`: the space of each task sampled, compiled and resource-checked,
    nothing measured (no GPU needed for a GPU target)."""
    import json

    from .runtime.task import Task
    from .search.dry_run import dry_run
    if args.workload:
        from .workloads import network_tasks
        tasks = [t for t, _ in (imported.tasks() if imported else network_tasks(args.workload))]
    elif args.op:
        tasks = [Task.from_op(op_from_args(args))]
    else:
        raise TlmirError("tune needs --op (with --shape/--param) or --workload")
    rows = []
    for task in tasks:
        rep = dry_run(task, hw, args.trials or args.trials_per_task or 64, args.seed)
        rows.append({"name": task.name, "key": task.key, "hardware": hw.key, "sketches": rep.sketches,
                     "candidates": rep.candidates, "compiled": rep.compiled, "kernels": rep.kernels,
                     "rejected": dict(rep.rejected), "failed": [m for _, m in rep.failed],
                     "spilled": rep.spilled, "compile_seconds": rep.seconds})
        if not args.json:
            print(rep.summary())
            if rep.example is not None and hasattr(rep.example[1], "describe"):
                print(f"example: {rep.example[0]}\n  " + "\n  ".join(rep.example[1].describe().splitlines()))
    if args.json:
        print(json.dumps(rows if args.workload else rows[0]))


def cmd_eval(args) -> None:
    import json

    from .evaluate import Evaluation, format_network, frameworks, representative_tasks, search_networks
    from .lm.registry import passive_openmp
    passive_openmp()
    tasks = representative_tasks(args.split)[: args.tasks]
    from .runtime.target import search_params
    ev = Evaluation(args.out, tasks, frameworks(args.budgets, args.baseline, args.tlm),
                    args.model, sp=search_params(args.search_param), log=None if args.json else print,
                    archive=args.archive, seed=args.seed)
    if args.phase in ("all", "search"):
        ev.search(args.which)
    if args.networks and args.phase in ("all", "search"):
        runs = [("tlm", k) for k in args.network_budgets]
        if args.network_baseline:
            strategy, _, ks = args.network_baseline.partition(":")
            try:
                runs += [(strategy, k) for k in int_list(ks)]
            except ArgumentTypeError:
                raise ArgumentError(f"--network-baseline {args.network_baseline!r}: give STRATEGY:K,... "
                                    "with integers K >= 1") from None
        for rep in search_networks(args.out, args.networks.split(","), runs, args.model, progress=not args.json):
            if not args.json:
                print(format_network(rep))
    if args.phase in ("all", "report"):
        _report_networks(args)
        rep = ev.report()
        if args.json:
            print(json.dumps(rep))
        else:
            from .evaluate import markdown
            print(markdown(rep))


def _report_networks(args) -> None:
    from .evaluate import format_network, report_networks
    for rep in report_networks(args.out):
        if not args.json:
            print(format_network(rep))


def cmd_workloads(args) -> None:
    from .workloads import describe, network_tasks
    if args.network:
        for task, w in network_tasks(args.network):
            print(f"{w:6g} x {task.name:<60} {task.flops / 1e9:9.4f} GFLOP  key {task.key}")
    else:
        print(describe())


def existing_file(path: str, option: str) -> str:
    """A read-only command's input: a missing file is an error, never a new empty one."""
    if not os.path.isfile(path):
        raise ArgumentError(f"{option} {path!r}: no such file")
    return path


def cmd_show_db(args) -> None:
    from .runtime.records import RecordDB, confirmed_best, fastest_record
    from .schedule.decider import Trace
    existing_file(args.db, "--db")
    with RecordDB(args.db) as db:
        tasks = db.tasks()
        if not tasks:
            print(f"{args.db}: no records yet")
        for task_key, name, hw_key, n, best in tasks:
            if best is None:
                print(f"{name}: {n} records, none succeeded")
                continue
            records = db.records(task_key, hw_key)
            confirmed = confirmed_best(records)
            trace, seconds = confirmed or fastest_record(records)
            how = "median of its re-measurements" if confirmed else "fastest record"
            print(f"# {name} (key {task_key}, {hw_key}): best {seconds * 1e3:.4f} ms ({how}) of {n} records")
            print(f"trace: {Trace.from_json(trace)}")
            if args.best:
                _show_best_program(task_key, trace, op_from_args(args) if args.op else None)


def cmd_rank(args) -> None:
    """Predicted vs measured: every task of a records DB ranked by the evaluator."""
    import numpy as np
    from .runtime.task import Task
    from .runtime.records import read_records
    from .search.rankers import cached_evaluator
    from .search.world_train import normalized_throughput, programs_from_records, ranking_metrics
    from .workloads import split_tasks
    existing_file(args.db, "--db")
    ev = cached_evaluator(args.evaluator)
    tasks = {t.key: t for split in ("train", "held-out") for t in split_tasks(split)}
    if args.op:
        task = Task.from_op(op_from_args(args))
        tasks[task.key] = task
    recs = read_records([args.db])
    by_task: dict = {}
    for p in programs_from_records(recs, tasks, with_features=ev.reads_features):
        by_task.setdefault(p.group, []).append(p)
    unknown = {r.task_key for r in recs} - set(tasks)
    if unknown:
        print(f"({len(unknown)} task(s) of the DB are not among the workloads: pass --op/--shape to rank one)")
    for progs in by_task.values():
        scores = ev.score_programs(progs)
        m = ranking_metrics(progs, scores, k=args.top)
        print(f"# {tasks[progs[0].task_key].name}: {len(progs)} programs | pairwise accuracy {m['pairwise_accuracy']:.3f} | "
              f"top-1 recall {m['top1_recall']:.0f} | top-{args.top} recall {m[f'top{args.top}_recall']:.0f} | "
              f"Kendall tau {m['kendall_tau']:.3f}")
        y = normalized_throughput(progs)
        measured_rank = {int(i): r + 1 for r, i in enumerate(np.argsort(-y, kind="stable"))}
        print(f"{'predicted':>9} {'measured':>8} {'ms':>10} {'score':>8}")
        for r, i in enumerate(np.argsort(-scores, kind="stable")[: args.top]):
            ms = f"{progs[i].seconds * 1e3:10.4f}" if progs[i].seconds else "    failed"
            print(f"{r + 1:>9} {measured_rank[int(i)]:>8} {ms} {scores[i]:8.3f}")


def _print_lowered(func) -> None:
    """The lowered loop IR and, where the CPU backend's prefetch pass adds to it, the program
    it compiles."""
    from .codegen_cpu.prefetch import add_prefetches
    print(f"# lowered\n{func}\n")
    compiled = add_prefetches(func)
    if compiled is not func:
        print(f"# compiled by the CPU backend (with codegen_cpu.prefetch's prefetches)\n{compiled}\n")


def _show_best_program(task_key: str, trace: str, op=None) -> None:
    """The best schedule as Python and as loop IR; the task is found by key among the
    workloads or given with --op."""
    from .runtime.task import Task
    from .schedule.decider import Trace
    from .schedule.lower import lower
    from .schedule.space import SearchSpace
    from .workloads import NETWORKS, network_tasks
    candidates = [Task.from_op(op)] if op is not None else []
    candidates += (t for net in NETWORKS for t, _ in network_tasks(net))
    for task in candidates:
        if task.key == task_key:
            s = SearchSpace(task.outputs).replay(Trace.from_json(trace))
            print("# schedule\n" + "\n".join(map(str, s.history)))
            _print_lowered(lower(s, task.args, "best"))
            return
    print("(the task is not among the workloads: pass --op/--shape to show its program)")


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version
    try:
        return dist_version("tlmir")
    except PackageNotFoundError:
        return "(source tree)"


def main(argv: list[str] | None = None) -> int:
    p = Parser(prog="tlmir", description=__doc__)
    p.add_argument("--version", action="version", version=f"tlmir {version()}")
    sub = p.add_subparsers(dest="cmd", required=True)
    sh = sub.add_parser("show", help="print an op's te definition, lowered loop IR, LLVM IR / assembly")
    op_args(sh)
    sh.add_argument("--steps", help="JSON file of recorded schedule steps to replay")
    sh.add_argument("--llvm", action="store_true", help="also print the optimised LLVM IR")
    sh.add_argument("--asm", action="store_true", help="also print the assembly")
    sh.add_argument("--target", default="cpu",
                    help="cpu (this host), cpu:avx2, ..., or a GPU: cuda:sm_70|80|86|90 (CUDA C, no GPU needed)")
    sh.add_argument("--sample", type=positive_int, metavar="N",
                    help="print N programs of the op's schedule space for the target, drawn at random")
    sh.add_argument("--seed", type=nonneg_int, default=0, help="random seed of --sample")
    sh.add_argument("--db", help="instead of an op: print the best record of each task in a records DB")
    sh.add_argument("--best", action="store_true", help="with --db: also the schedule and loop IR")
    sh.set_defaults(fn=cmd_show)
    rk = sub.add_parser("rank", help="the world-model evaluator's ranking of a records DB vs the measurements")
    op_args(rk)
    rk.add_argument("--db", required=True, help="records: .db, .jsonl or .jsonl.xz")
    rk.add_argument("--evaluator", default="default", help="evaluator directory (default: the shipped one)")
    rk.add_argument("--top", type=positive_int, default=10, help="programs listed per task (and the top-k recall's k)")
    rk.set_defaults(fn=cmd_rank)
    tu = sub.add_parser("tune", help="search the schedule space of an op or of a network's subgraphs")
    op_args(tu)
    tu.add_argument("--workload", help="network name (see `tlmir workloads`)")
    tu.add_argument("--model-from", metavar="SPEC",
                    help="a PyTorch model to import and tune: zoo:NAME or transformers:NAME "
                         "(see `tlmir import --help`); then runs it end to end against PyTorch")
    tu.add_argument("--input", metavar="SHAPE", help="with --model-from: the input shape, e.g. 1,3,224,224")
    tu.add_argument("--target", default="cpu",
                    help="what the programs are compiled for: cpu (this host), cpu:avx2, cpu:avx512, "
                         "options -cores=N -l1=32K -l2=1M; cuda (this host's GPU), cuda:sm_70|80|86|90")
    tu.add_argument("--trials", type=positive_int, help="measurements for --op (default 64)")
    tu.add_argument("--trials-per-task", type=positive_int,
                    help="measurements per task for --workload (default 64)")
    tu.add_argument("--max-seconds", type=nonneg_float,
                    help="with --op: start no search round after this many seconds (the first always runs)")
    tu.add_argument("--strategy", default="evolutionary",
                    help="random | evolutionary | tlm | tlm+evolutionary (NAME@COST_MODEL also works)")
    tu.add_argument("--cost-model", choices=("mlp", "world", "none"),
                    help="what ranks candidates before they are measured: mlp (evolutionary's default), "
                         "world (the world-model evaluator; tlm's default), none (tlm: as written)")
    tu.add_argument("--model", default="default",
                    help="TLM for the tlm strategies: default (shipped, SFT'd), base, or a directory")
    tu.add_argument("--db", help="records database (SQLite); reruns resume from it")
    tu.add_argument("--seed", type=nonneg_int, default=0, help="random seed of the search")
    tu.add_argument("--search-param", action="append", default=[], metavar="NAME=VALUE",
                    help="override a SearchParams field (repeatable), e.g. population=256")
    tu.add_argument("--json", action="store_true", help="print one JSON object")
    tu.add_argument("--no-baselines", action="store_true", help="skip timing numpy / PyTorch")
    tu.add_argument("--dry-run", action="store_true",
                    help="measure nothing: sample --trials programs, compile each and count what the resource "
                         "checks refuse (a GPU target needs no GPU)")
    tu.set_defaults(fn=cmd_tune)
    from .lm.commands import add_parsers
    add_parsers(sub)
    ev = sub.add_parser("eval", help="TLM at k measurements vs search baselines on held-out tasks")
    ev.add_argument("--split", default="held-out", choices=("held-out", "train"),
                    help="whose representative tasks")
    ev.add_argument("--budgets", type=int_list, default="1,10,32,64", help="TLM measurement budgets")
    ev.add_argument("--seed", type=int, default=0, help="random seed of every search (another seed: "
                    "another sample of a strategy's runs; use a fresh --out)")
    ev.add_argument("--search-param", action="append", default=[], metavar="NAME=VALUE",
                    help="override a SearchParams field for every run (repeatable)")
    ev.add_argument("--baseline", nargs="+", default=["evolutionary:64,1000"],
                    help="STRATEGY:K1,K2 ... (each the prefixes of one run; STRATEGY may name a cost "
                         "model: evolutionary@world)")
    ev.add_argument("--tlm", nargs="+", default=["tlm"],
                    help="TLM strategies run at each budget: tlm (ranked by the world model), tlm@none "
                         "(measured as written)")
    ev.add_argument("--out", default="runs/eval", help="records DBs, wall.json, report.json/.md")
    ev.add_argument("--model", default="default", help="TLM: default (shipped, SFT'd), base, or a directory")
    ev.add_argument("--archive", metavar="DIR", help="copy every run's records here after each task (kept in "
                    "the repository); an --out without a run's DB starts from them")
    ev.add_argument("--phase", default="all", choices=("all", "search", "report"),
                    help="search (measure what is missing), report (re-time the best programs), or both")
    ev.add_argument("--which", default="all", choices=("all", "tlm", "baseline"), help="runs to search")
    ev.add_argument("--tasks", type=positive_int, help="only the first N representative tasks")
    ev.add_argument("--networks", help="also tune these networks end to end with TLM (comma-separated)")
    ev.add_argument("--network-budgets", type=int_list, default="1,10,32", help="TLM measurements per subgraph")
    ev.add_argument("--network-baseline", help="STRATEGY:K,... also tune the networks with this")
    ev.add_argument("--json", action="store_true", help="print the report as one JSON object")
    ev.set_defaults(fn=cmd_eval)
    from .frontend.commands import add_parsers as add_frontend_parsers
    add_frontend_parsers(sub)
    wl = sub.add_parser("workloads", help="list networks and their subgraphs (tasks)")
    wl.add_argument("network", nargs="?", help="list this network's tasks")
    wl.set_defaults(fn=cmd_workloads)
    args = p.parse_args(argv)
    try:
        args.fn(args)
    except TlmirError as e:
        print(f"tlmir: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\ntlmir: interrupted; every finished measurement is in the records database",
              file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
