"""What this machine gives a dense-shaped GEMM, from hand-written LLVM IR (no tlmir schedule).

    .venv/bin/python bench/gemm_ceiling.py [--rounds 7]

Prints, at one thread, in GFLOP/s (median of --rounds, the variants timed in turns):
- `fma peak`: 16 independent chains of <16 x float> FMAs, no memory (2 FMAs per cycle);
- dense 128x768x3072's GEMM done as our best programs do it (96 panels of 32 columns, 16
  blocks of 8 rows each, an 8x32 register tile, k unrolled by 4), with X read from its
  16 row blocks and each panel of W:
  `no copy`: always the same panel (in L2), so the loop's own speed;
  `copy`: first copied from a 9.4 MB source, one panel after another, as the pack does;
  `copy+prefetch`: the same, while each panel's loop prefetches the next panel's source.
docs/history.md ("where dense's time goes") has the numbers: the loop alone reaches
~85% of the FMA peak, and this sequential copy's reads from L3 cost it 15-20% (the real
kernel's transposing pack keeps more misses in flight: about 3% there).
"""
from __future__ import annotations

import argparse
import ctypes
import statistics
import time

import llvmlite.binding as llvm
import numpy as np

from tlmir.codegen_cpu.jit import _init_llvm, _new_target_machine, _optimize

M, N, K = 128, 3072, 768
ROWS, COLS, UNROLL = 8, 32, 4
BLOCKS, PANELS = M // ROWS, N // COLS
PANEL = K * COLS  # floats in one panel of W
CHAINS = 16


def peak_ir() -> str:
    phis = "\n".join(f"  %x{c} = phi <16 x float> [%a, %entry], [%y{c}, %loop]" for c in range(CHAINS))
    fmas = "\n".join(f"  %y{c} = call <16 x float> @llvm.fma.v16f32(<16 x float> %x{c}, <16 x float> %a, "
                     f"<16 x float> %b)" for c in range(CHAINS))
    sums = "\n".join(f"  %s{c} = fadd <16 x float> %s{c - 1}, %y{c}" for c in range(1, CHAINS))
    return f"""
declare <16 x float> @llvm.fma.v16f32(<16 x float>, <16 x float>, <16 x float>)
define float @run(i64 %n, float %af, float %bf) {{
entry:
  %a0 = insertelement <16 x float> undef, float %af, i32 0
  %a = shufflevector <16 x float> %a0, <16 x float> undef, <16 x i32> zeroinitializer
  %b0 = insertelement <16 x float> undef, float %bf, i32 0
  %b = shufflevector <16 x float> %b0, <16 x float> undef, <16 x i32> zeroinitializer
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%i2, %loop]
{phis}
{fmas}
  %i2 = add i64 %i, 1
  %c = icmp slt i64 %i2, %n
  br i1 %c, label %loop, label %done
done:
  %s0 = fadd <16 x float> %y0, %y0
{sums}
  %r = extractelement <16 x float> %s{CHAINS - 1}, i32 0
  ret float %r
}}"""


def _k_step(u: int) -> list[str]:
    """One k of the register tile: 2 vectors of the panel, 8 broadcasts of X, 16 FMAs."""
    out = [f"  %ku{u} = add i64 %k, {u}", f"  %wo{u} = mul i64 %ku{u}, {COLS}"]
    for c in range(2):
        out += [f"  %wi{u}_{c} = add i64 %wo{u}, {16 * c}",
                f"  %wp{u}_{c} = getelementptr float, ptr %W, i64 %wi{u}_{c}",
                f"  %w{u}_{c} = load <16 x float>, ptr %wp{u}_{c}, align 64"]
    for r in range(ROWS):
        out += [f"  %xi{u}_{r} = add i64 %ku{u}, {r * K}",
                f"  %xp{u}_{r} = getelementptr float, ptr %Xb, i64 %xi{u}_{r}",
                f"  %x{u}_{r} = load float, ptr %xp{u}_{r}, align 4",
                f"  %xv{u}_{r} = insertelement <16 x float> undef, float %x{u}_{r}, i32 0",
                f"  %xb{u}_{r} = shufflevector <16 x float> %xv{u}_{r}, <16 x float> undef, <16 x i32> zeroinitializer"]
        for c in range(2):
            prev = f"%a{r}_{c}" if u == 0 else f"%n{r}_{c}_{u - 1}"
            out.append(f"  %n{r}_{c}_{u} = call <16 x float> @llvm.fma.v16f32(<16 x float> %xb{u}_{r}, "
                       f"<16 x float> %w{u}_{c}, <16 x float> {prev})")
    return out


def gemm_ir(copy: bool, prefetch: bool) -> str:
    """run(X, Wsrc, W, O): for each panel [copy Wsrc's panel into W]; for each row block,
    the K loop of the 8x32 tile over W (prefetching a share of the next source panel), the
    tile added into O (so nothing is dead)."""
    tile = [(r, c) for r in range(ROWS) for c in range(2)]
    last = UNROLL - 1
    lines = ["declare <16 x float> @llvm.fma.v16f32(<16 x float>, <16 x float>, <16 x float>)",
             "declare void @llvm.prefetch.p0(ptr, i32, i32, i32)",
             "define void @run(ptr noalias %X, ptr noalias %Wsrc, ptr noalias %W, ptr noalias %O) {",
             "entry:\n  br label %panel",
             "panel:\n  %p = phi i64 [0, %entry], [%p2, %panel_end]",
             f"  %src_off = mul i64 %p, {PANEL}",
             "  %src = getelementptr float, ptr %Wsrc, i64 %src_off",
             f"  %next_off = add i64 %src_off, {PANEL}",
             "  %next = getelementptr float, ptr %Wsrc, i64 %next_off",
             f"  br label %{'copy' if copy else 'block'}"]
    if copy:
        lines += ["copy:\n  %c = phi i64 [0, %panel], [%c2, %copy]",
                  "  %cs = getelementptr float, ptr %src, i64 %c",
                  "  %cv = load <16 x float>, ptr %cs, align 64",
                  "  %cd = getelementptr float, ptr %W, i64 %c",
                  "  store <16 x float> %cv, ptr %cd, align 64",
                  f"  %c2 = add i64 %c, 16\n  %cc = icmp slt i64 %c2, {PANEL}",
                  "  br i1 %cc, label %copy, label %block"]
    lines += [f"block:\n  %ib = phi i64 [0, %{'copy' if copy else 'panel'}], [%ib2, %block_end]",
              f"  %xo = mul i64 %ib, {ROWS * K}", "  %Xb = getelementptr float, ptr %X, i64 %xo",
              "  br label %kloop", "kloop:\n  %k = phi i64 [0, %block], [%k2, %kloop]"]
    lines += [f"  %a{r}_{c} = phi <16 x float> [zeroinitializer, %block], [%n{r}_{c}_{last}, %kloop]"
              for r, c in tile]
    if prefetch:  # the panel's BLOCKS x K/UNROLL iterations share the next panel's lines
        lines += [f"  %pt = mul i64 %ib, {K}", "  %pt2 = add i64 %pt, %k",
                  f"  %pt3 = mul i64 %pt2, {PANEL // (BLOCKS * K)}",
                  "  %pa = getelementptr float, ptr %next, i64 %pt3",
                  "  call void @llvm.prefetch.p0(ptr %pa, i32 0, i32 2, i32 1)"]
    for u in range(UNROLL):
        lines += _k_step(u)
    lines += [f"  %k2 = add i64 %k, {UNROLL}\n  %kc = icmp slt i64 %k2, {K}",
              "  br i1 %kc, label %kloop, label %block_end", "block_end:"]
    for r, c in tile:
        lines += [f"  %op{r}_{c} = getelementptr float, ptr %O, i64 {r * COLS + 16 * c}",
                  f"  %ol{r}_{c} = load <16 x float>, ptr %op{r}_{c}, align 64",
                  f"  %os{r}_{c} = fadd <16 x float> %ol{r}_{c}, %n{r}_{c}_{last}",
                  f"  store <16 x float> %os{r}_{c}, ptr %op{r}_{c}, align 64"]
    lines += [f"  %ib2 = add i64 %ib, 1\n  %ibc = icmp slt i64 %ib2, {BLOCKS}",
              "  br i1 %ibc, label %block, label %panel_end",
              f"panel_end:\n  %p2 = add i64 %p, 1\n  %pc = icmp slt i64 %p2, {PANELS}",
              "  br i1 %pc, label %panel, label %done", "done:\n  ret void\n}"]
    return "\n".join(lines)


def compile_ir(text: str, argtypes: list, restype=None) -> tuple:
    """(engine, function `run`): the engine owns the code and must be kept alive."""
    mod = llvm.parse_assembly(text)
    mod.verify()
    _optimize(mod)  # the pipeline compile_func runs
    engine = llvm.create_mcjit_compiler(mod, _new_target_machine())  # MCJIT owns its machine
    engine.finalize_object()
    return engine, ctypes.CFUNCTYPE(restype, *argtypes)(engine.get_function_address("run"))


def aligned(n: int) -> np.ndarray:
    buf = np.zeros(n + 16, np.float32)
    start = (-buf.ctypes.data % 64) // 4
    return buf[start:start + n]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=7)
    a = p.parse_args()
    _init_llvm()
    rng = np.random.default_rng(0)
    X, W, O = aligned(M * K), aligned(PANEL), aligned(ROWS * COLS)
    Wsrc = aligned(PANEL * (PANELS + 1))  # one panel more: the last prefetch reads past the end
    X[:], W[:], Wsrc[:] = rng.random(X.size), rng.random(W.size), rng.random(Wsrc.size)
    ptrs = [arr.ctypes.data for arr in (X, Wsrc, W, O)]
    runs, keep = {}, []
    eng, peak = compile_ir(peak_ir(), [ctypes.c_int64, ctypes.c_float, ctypes.c_float], ctypes.c_float)
    keep.append(eng)
    n_peak = 10_000_000
    runs["fma peak"] = (lambda: peak(n_peak, 0.999, 0.001), n_peak * CHAINS * 32)
    for name, copy, pf in (("no copy", False, False), ("copy", True, False), ("copy+prefetch", True, True)):
        eng, fn = compile_ir(gemm_ir(copy, pf), [ctypes.c_void_p] * 4)
        keep.append(eng)
        runs[name] = (lambda fn=fn: fn(*ptrs), 2 * M * N * K)
    samples: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(a.rounds):
        for name, (call, flops) in runs.items():
            call()
            t0 = time.perf_counter()
            call()
            samples[name].append(flops / (time.perf_counter() - t0) / 1e9)
    print("  ".join(f"{k}: {statistics.median(v):.1f}" for k, v in samples.items()) + "  (GFLOP/s, 1 thread)")


if __name__ == "__main__":
    main()
