"""Ansor's GPU derivation rules: sketches of a computation for a CUDA target, and a sketch
applied to a Decider's answers.

A sketch is plain data, one rule per stage, chosen output-first:
  inline         compute_inline: every injective stage that is not an output (on a GPU
                 Ansor inlines all of them, padding and exp included)
  skip           the stage is a kernel of its own: its spatial loops fused and split
                 over blocks and threads (a reduction's loops run inside each thread)
  tile_fuse      multi-level tiling SSSRRSRS (block / vthread / thread / reduce): the
                 single element-wise consumer follows the tiles, the stage is computed
                 at the consumer's thread loop (its epilogue in the same kernel)
  cache_write    the same with a register (local) copy of the stage, which the stage
                 itself follows (a stage with no fusible consumer)
  cross_thread   a reduction's reduction loops fused and split over the threads of a
                 block (one block per output), as a cross-thread reduction
Tiled stages read every input through a shared-memory copy computed at the outer reduce
tile and fetched cooperatively (fused, split over the block's threads, a vectorized run
of 1, 2 or 4 elements per thread).

Questions, in trace order: `tile S.a` (a tile of a tiled stage: 5 levels of a spatial
axis, 3 of a reduction axis; of a kernel's fused loop: blocks and threads; of a
cross-thread reduction: serial steps and threads), `vec S.shared` (a cooperative load's
width) and `unroll S` (auto_unroll_max_step). The block / vthread / thread binding
follows from the tile answers. A tile whose threads, virtual threads, register
accumulators or shared memory would go over the target's limits (HardwareParams) is
never offered.
"""
from __future__ import annotations

import math

import numpy as np

from ...ir.arith import const_bound
from ...ir.dag import ComputeDAG
from ...ir.expr import TensorRead, walk
from ...runtime.target import HardwareParams, SearchParams
from ..decider import Decider, factorizations
from ..schedule import Schedule, Stage, create_schedule
from .base import Sketch, elementwise_consumer

SPATIAL_LEVELS, REDUCE_LEVELS = 5, 3
BLOCK, VTHREAD, THREAD = 0, 1, 2


# ------------------------------------------------------------------- sketch generation

def _extents(axes) -> int:
    return math.prod(a.extent for a in axes)


def _cross_thread_worth(facts, hw: HardwareParams) -> bool:
    """Ansor's RuleCrossThreadReduction: a reduction longer than a warp, and for a stage
    worth tiling one whose spatial space is small (no more than its reduction, or than
    16 blocks per SM)."""
    if facts.kind != "reduction":
        return False
    space, red = _extents(facts.op.axis), _extents(facts.op.reduce_axis)
    if facts.needs_multi_level_tiling:
        return space <= red and space <= hw.cores * 16
    return red > hw.warp_size


def generate_sketches(outputs, hw: HardwareParams, sp: SearchParams) -> list[Sketch]:
    """All GPU sketches of a computation, in a deterministic order."""
    dag = ComputeDAG(outputs)
    partial: list[tuple] = [()]
    for facts in [s for s in reversed(dag.stages) if s.kind != "placeholder"]:
        grown = []
        for rules in partial:
            done = {s: r for s, r, _ in rules}
            inlined = {s for s, r in done.items() if r == "inline"}
            grown += [rules + ((facts.name, rule, None),) for rule in _stage_rules(dag, facts, inlined, done, hw)]
        partial = grown
    return [Sketch(r) for r in partial]


def _stage_rules(dag, facts, inlined, done, hw) -> list[str]:
    if facts.kind == "injective" and not facts.is_output:
        return ["inline"]
    cross = ["cross_thread"] if _cross_thread_worth(facts, hw) else []
    if facts.needs_multi_level_tiling:
        consumer = elementwise_consumer(dag, facts.name, inlined)
        return ["tile_fuse" if consumer is not None and done.get(consumer) == "skip" else "cache_write"] + cross
    return ["skip"] + cross


# ------------------------------------------------------------------- resource limits

def shared_bytes(op, spans: dict) -> int:
    """Bytes of the shared-memory copies of the inputs a tiled stage `op` reads, for the
    region one block and one outer reduce tile read: `spans` maps id(axis) to the
    iterations of that axis in it (an axis absent: 1)."""
    ranges = {a.var: (0, spans.get(id(a), 1) - 1) for a in list(op.axis) + list(op.reduce_axis)}
    lo: dict = {}
    hi: dict = {}
    tensors = {}
    for r in (n for n in walk(op.body) if isinstance(n, TensorRead)):
        tensors[id(r.tensor)] = r.tensor
        for d, idx in enumerate(r.indices):
            a, b = const_bound(idx, ranges)
            key = (id(r.tensor), d)
            lo[key], hi[key] = min(lo.get(key, a), a), max(hi.get(key, b), b)
    total = 0
    for k, t in tensors.items():
        size = 1
        for d, n in enumerate(t.shape):
            ext = hi[(k, d)] - lo[(k, d)] + 1
            size *= n if not math.isfinite(ext) else min(n, int(ext))
        total += size * np.dtype(t.dtype).itemsize
    return total


class _Limits:
    """What the tile answers so far use of a block; `fits` tests one more answer."""

    def __init__(self, op, hw: HardwareParams):
        self.op, self.hw = op, hw
        self.vthreads = self.threads = self.acc = 1
        self.spans: dict = {}
        # an axis's tile options share few spans (the divisors of its extent), and bounding
        # the shared copies symbolically is the slow part of building a GPU schedule
        self._fits_memo: dict = {}

    def fits_spatial(self, axis, f: tuple) -> bool:
        hw = self.hw
        vt, th, acc = self.vthreads * f[VTHREAD], self.threads * f[THREAD], self.acc * f[1] * f[3] * f[4]
        return (vt <= hw.max_vthread and th <= hw.max_threads and acc <= hw.max_thread_regs
                and acc * th <= hw.max_regs and self._shared_fits(axis, math.prod(f[1:])))

    def fits_reduce(self, axis, f: tuple) -> bool:
        return self._shared_fits(axis, f[1] * f[2])

    def _shared_fits(self, axis, span: int) -> bool:
        if not self.op.reduce_axis:
            return True
        key = (id(axis), span, tuple(self.spans.items()))
        if key not in self._fits_memo:
            used = shared_bytes(self.op, {**self.spans, id(axis): span})
            self._fits_memo[key] = used <= self.hw.max_shared_kb * 1024
        return self._fits_memo[key]

    def take_spatial(self, axis, f: tuple) -> None:
        self.vthreads *= f[VTHREAD]
        self.threads *= f[THREAD]
        self.acc *= f[1] * f[3] * f[4]
        self.spans[id(axis)] = math.prod(f[1:])

    def take_reduce(self, axis, f: tuple) -> None:
        self.spans[id(axis)] = f[1] * f[2]


# ------------------------------------------------------------------- sketch application

class _Builder:
    def __init__(self, outputs, sketch: Sketch, ask: Decider, hw: HardwareParams, sp: SearchParams):
        self.s: Schedule = create_schedule(outputs)
        self.dag = ComputeDAG(outputs)
        self.sketch, self.ask, self.hw, self.sp = sketch, ask, hw, sp
        self.inlined = {s for s, r, _ in sketch.rules if r == "inline"}

    def run(self) -> Schedule:
        followers = {elementwise_consumer(self.dag, s, self.inlined) for s, r, _ in self.sketch.rules
                     if r == "tile_fuse"}
        for name, rule, _ in self.sketch.rules:
            st = self.s.stage(name)
            if rule == "inline":
                st.compute_inline()
            elif rule == "skip" and name not in followers:
                self._bind_threads(st)
            elif rule == "tile_fuse":
                self._tile(st, self.s.stage(elementwise_consumer(self.dag, name, self.inlined)))
            elif rule == "cache_write":
                self._tile(self.s[self.s.cache_write(st.op.output(), "local")], st)
            elif rule == "cross_thread":
                self._cross_thread(st)
        return self.s

    def _split(self, st: Stage, iv, factors) -> list:
        """`iv` split into len(factors) loops with these extents, outermost first."""
        ivs, cur = [], iv
        for f in reversed(factors[1:]):
            cur, inner = st.split(cur, factor=f)
            ivs.insert(0, inner)
        return [cur] + ivs

    def _fuse(self, st: Stage, ivs: list):
        return st.fuse(*ivs) if len(ivs) > 1 else ivs[0]

    def _unroll(self, st: Stage) -> None:
        st.pragma(st.leaf_iter_vars[0], "auto_unroll_max_step",
                  self.ask.choice(f"unroll {st.name}", list(self.sp.gpu_unroll_steps)))

    def _bind_threads(self, st: Stage) -> None:
        """A kernel of its own: the spatial loops fused, split into blocks of threads."""
        fused = self._fuse(st, list(st.op.axis))
        f = self.ask.choice(f"tile {st.name}.{fused.name}", factorizations(fused.extent, 2, self.hw.max_threads))
        bo, bi = self._split(st, fused, f)
        st.bind(bo, "blockIdx.x")
        st.bind(bi, "threadIdx.x")
        if st.op.reduce_axis:
            self._unroll(st)

    def _cross_thread(self, st: Stage) -> None:
        """One block per output element: the reduction loops fused and split over its threads."""
        r = self._fuse(st, list(st.op.reduce_axis))
        f = self.ask.choice(f"tile {st.name}.{r.name}", factorizations(r.extent, 2, self.hw.max_threads))
        _, ri = self._split(st, r, f)
        st.bind(self._fuse(st, list(st.op.axis)), "blockIdx.x")
        st.bind(ri, "threadIdx.x")
        self._unroll(st)

    def _tile(self, st: Stage, follower: Stage) -> None:
        """SSSRRSRS tiling of `st`, computed at the thread loop of `follower`, which
        follows its block / vthread / thread tiles; shared copies of its inputs."""
        limits = _Limits(st.op, self.hw)
        levels = [[] for _ in range(SPATIAL_LEVELS)]
        rlevels = [[] for _ in range(REDUCE_LEVELS)]
        factors = []
        for a in st.op.axis:
            options = [f for f in factorizations(a.extent, SPATIAL_LEVELS, self.sp.max_innermost_factor)
                       if limits.fits_spatial(a, f)]
            f = self.ask.choice(f"tile {st.name}.{a.name}", options)
            limits.take_spatial(a, f)
            factors.append(f)
            for lvl, iv in zip(levels, self._split(st, a, f)):
                lvl.append(iv)
        for a in st.op.reduce_axis:
            options = [f for f in factorizations(a.extent, REDUCE_LEVELS, self.sp.max_innermost_factor)
                       if limits.fits_reduce(a, f)]
            f = self.ask.choice(f"tile {st.name}.{a.name}", options)
            limits.take_reduce(a, f)
            for lvl, iv in zip(rlevels, self._split(st, a, f)):
                lvl.append(iv)
        l0, l1, l2, l3, l4 = levels
        st.reorder(*(l0 + l1 + l2 + rlevels[0] + rlevels[1] + l3 + rlevels[2] + l4))
        parts = [self._split(follower, a, (f[0], f[1], f[2], f[3] * f[4])) for a, f in zip(follower.op.axis, factors)]
        follower.reorder(*[p[k] for k in range(4) for p in parts])
        follower.bind(self._fuse(follower, [p[BLOCK] for p in parts]), "blockIdx.x")
        follower.bind(self._fuse(follower, [p[VTHREAD] for p in parts]), "vthread")
        thread = self._fuse(follower, [p[THREAD] for p in parts])
        follower.bind(thread, "threadIdx.x")
        st.compute_at(follower, thread)
        if rlevels[0]:
            self._shared_copies(st, rlevels[0][-1], limits.threads)
        self._unroll(st)

    def _shared_copies(self, st: Stage, at, threads: int) -> None:
        """Each input of `st` through a shared copy computed at `st`'s loop `at`, fetched by
        the block's `threads` threads together."""
        seen: list = []
        for r in (n for n in walk(st.op.body) if isinstance(n, TensorRead)):
            if all(t is not r.tensor for t in seen):
                seen.append(r.tensor)
        for t in seen:
            copy = self.s[self.s.cache_read(t, "shared", [st.op.output()])]
            width = self.ask.choice(f"vec {copy.name}", [w for w in self.sp.gpu_vector_widths
                                                         if w <= self.hw.vector_lanes])
            copy.compute_at(st, at)
            fused = self._fuse(copy, list(copy.op.axis))
            outer, lanes = copy.split(fused, factor=width)
            _, tx = copy.split(outer, factor=threads)
            copy.bind(tx, "threadIdx.x")
            if width > 1:
                copy.vectorize(lanes)


def build_schedule(outputs, sketch: Sketch, ask: Decider, hw: HardwareParams, sp: SearchParams) -> Schedule:
    """Apply a GPU `sketch`, asking `ask` every question."""
    return _Builder(outputs, sketch, ask, hw, sp).run()


class GPURules:
    """The GPU rule set (schedule.rules.RuleSet) of CUDA targets."""
    kind = "cuda"
    questions = ("tile", "vec", "unroll")

    def sketches(self, outputs, hw: HardwareParams, sp: SearchParams) -> list[Sketch]:
        return generate_sketches(outputs, hw, sp)

    def build(self, outputs, sketch: Sketch, ask: Decider, hw: HardwareParams, sp: SearchParams) -> Schedule:
        return build_schedule(outputs, sketch, ask, hw, sp)
