"""`make demo`: tune a held-out network (ResNet-50 by default) end to end with the shipped
tensor language model, 10 measurements per subgraph, and print every subgraph's latency
next to PyTorch eager and the untuned default schedule. The TLM writes 16 programs per
measurement and the shipped evaluator picks which to measure (`--rank-per-slot`; the
search default, 64, would spend most of the demo writing programs on 2 cores).

`python -m tlmir.demo --matmul` instead defines a matmul in te, schedules it by hand,
shows the loop nest, compiles it through LLVM, checks it against numpy and times both.
"""
from __future__ import annotations

import sys
import time

import numpy as np

import tlmir
from tlmir import te
from tlmir.argtypes import Parser, positive_int
from tlmir.errors import TlmirError


def schedule_matmul(A, B, C):
    """8x32 register tile accumulated over a packed 1024x32 panel of B; panels in parallel."""
    s = tlmir.create_schedule(C)
    CC = s.cache_write(C, "local")
    BB = s.cache_read(B, "global", [CC])
    i, j = C.op.axis
    jo, ji = s[C].split(j, factor=32)
    io, ii = s[C].split(i, factor=8)
    s[C].reorder(jo, io, ii, ji)
    s[C].parallel(jo)
    s[C].vectorize(ji)
    s[BB].compute_at(s[C], jo)
    s[BB].vectorize(BB.op.axis[1])
    s[CC].compute_at(s[C], io)
    ci, cj = CC.op.axis
    (k,) = CC.op.reduce_axis
    s[CC].reorder(k, ci, cj)
    s[CC].unroll(ci)
    s[CC].vectorize(cj)
    return s


def matmul_demo(n: int = 1024) -> None:
    A = te.placeholder((n, n), "float32", name="A")
    B = te.placeholder((n, n), "float32", name="B")
    k = te.reduce_axis(n, name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = schedule_matmul(A, B, C)
    print("# schedule\n" + "\n".join(map(str, s.history)))
    print("\n# lowered loop program\n" + str(tlmir.lower(s, [A, B, C])))
    t0 = time.perf_counter()
    f = tlmir.build(s, [A, B, C], target="cpu")
    print(f"\ncompiled in {time.perf_counter() - t0:.2f} s; FMA instructions in the kernel: "
          f"{f.assembly.count('vfmadd')}")
    rng = np.random.default_rng(0)
    a = rng.random((n, n), dtype=np.float32)
    b = rng.random((n, n), dtype=np.float32)
    c = np.empty((n, n), "float32")
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4)
    print("result matches numpy")
    gflop = 2 * n ** 3 / 1e9
    for threads in (1, 2):
        f.num_threads = threads
        t = f.benchmark(a, b, c)
        print(f"tlmir  {threads} thread(s): median {t.median * 1e3:7.2f} ms  {gflop / t.median:6.1f} GFLOP/s")
    t_np = min(_time(lambda: a @ b) for _ in range(5))
    print(f"numpy (its own threads): {t_np * 1e3:7.2f} ms  {gflop / t_np:6.1f} GFLOP/s")


def _time(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def network_demo(network: str, trials_per_task: int, model: str, strategy: str = "tlm",
                 rank_per_slot: int = 16) -> None:
    from tlmir.evaluate import format_network, network_report
    from tlmir.lm.registry import model_dir
    from tlmir.runtime.target import SearchParams
    from tlmir.workloads import network_tasks
    print(f"tuning {network} ({len(network_tasks(network))} subgraphs, held out from the model's "
          f"training) with the TLM in {model_dir(model)} ({strategy}), {trials_per_task} measurements "
          f"per subgraph", flush=True)  # before the first progress line on stderr, also in a pipe
    t0 = time.perf_counter()
    rep = network_report(network, strategy, trials_per_task, model=model,
                         sp=SearchParams(tlm_rank_per_slot=rank_per_slot, tlm_rank_min_pool=0))
    print(f"demo finished in {time.perf_counter() - t0:.0f} s")
    print(format_network(rep))  # its last line: faster or slower than PyTorch, in words


def main(argv: list[str] | None = None) -> int:
    p = Parser(prog="python -m tlmir.demo", description=__doc__.split("\n\n")[0])
    p.add_argument("--network", default="resnet-50", help="network to tune (see `tlmir workloads`)")
    p.add_argument("--trials-per-task", type=positive_int, default=10, help="measurements per subgraph")
    p.add_argument("--model", default="default", help="TLM: default (shipped, SFT'd), base, or a directory")
    p.add_argument("--strategy", default="tlm", help="tlm (ranked by the evaluator) or tlm@none (as written)")
    p.add_argument("--rank-per-slot", type=positive_int, default=16,
                   help="programs the TLM writes per measurement (the pool: this x trials, no minimum)")
    p.add_argument("--matmul", action="store_true", help="the hand-scheduled matmul demo instead")
    a = p.parse_args(argv)
    try:
        if a.matmul:
            matmul_demo()
            return 0
        from tlmir.lm.registry import passive_openmp
        passive_openmp()
        network_demo(a.network, a.trials_per_task, a.model, a.strategy, a.rank_per_slot)
    except TlmirError as e:
        print(f"tlmir: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
