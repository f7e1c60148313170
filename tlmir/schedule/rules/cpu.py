"""Ansor's CPU derivation rules: sketches of a computation, and a sketch applied to a Decider's answers.

A sketch is plain data — one rule per stage, chosen output-first:
  inline          compute_inline (strictly inlinable stages)
  skip            keep the stage; its innermost spatial loop is split for vectorization
  tile            multi-level tiling SSRSRS
  tile_fuse L     tiling, with the single element-wise consumer following the tiles and
                  the stage computed at the consumer's level-L loop (L = 1, 2)
  cache_write L   cache_write(local); the local stage is tiled and fused at level L into
                  the copy-out stage
  rfactor V       reduction loops fused, split in two, rfactor on the outer (V=0) or
                  inner (V=1) part
  cache_write_transposed L
                  cache_write(local) in a layout with another spatial axis last
                  (packing.transposed_vector_axis: an NCHW conv's output channels), its
                  inputs packed for it; tiled and fused at level L into the copy-out, or
                  into the element-wise consumer with the copy-out inlined
Rule `pack` (an input read through a transposed copy or a panel, schedule.packing) is
appended to the sketches it applies to, after every plain sketch; the transposed
sketches come last. `build_schedule`
applies a sketch and asks the Decider every question (tile sizes, then compute
locations, parallel, vectorize and unroll per stage, consumers first).
"""
from __future__ import annotations

from ...ir.dag import ComputeDAG
from ...runtime.target import HardwareParams, SearchParams
from ..decider import Decider
from ..packing import axis_last, pack_layouts, pack_repeats, transposed_vector_axis
from ..schedule import Schedule, Stage, create_schedule
from .base import Sketch, elementwise_consumer


# ------------------------------------------------------------------- sketch generation

def _needs_rfactor(facts, hw: HardwareParams, sp: SearchParams) -> bool:
    if facts.kind != "reduction":
        return False
    space = 1
    for a in facts.op.axis:
        space *= a.extent
    red = 1
    for a in facts.op.reduce_axis:
        red *= a.extent
    if facts.needs_multi_level_tiling:
        return space <= red and space <= sp.parallel_factor * hw.cores
    return red > hw.cores


def generate_sketches(outputs, hw: HardwareParams, sp: SearchParams) -> list[Sketch]:
    """All sketches of a computation, in a deterministic order."""
    dag = ComputeDAG(outputs)
    stages = [s for s in reversed(dag.stages) if s.kind != "placeholder"]
    partial: list[tuple] = [()]
    for facts in stages:
        grown = []
        for rules in partial:
            done = {s: r for s, r, _ in rules}
            inlined = {s for s, r in done.items() if r == "inline"}
            for rule, arg in _stage_rules(dag, facts, inlined, done, hw, sp):
                grown.append(rules + ((facts.name, rule, arg),))
        partial = grown
    return ([Sketch(r) for r in partial] + [Sketch(r) for r in _pack_variants(dag, partial)]
            + [Sketch(r) for r in _transposed_variants(dag, partial, hw)])


_TILED = ("tile", "tile_fuse", "cache_write")


def _pack_variants(dag: ComputeDAG, sketches: list[tuple]) -> list[tuple]:
    """Each sketch with a multi-level-tiled stage that reads an input worth packing
    (indexed by its vectorized axis and a reduction: packing.pack_layouts), again with that
    input packed: rule entries (input, "pack", stage) at the end. Appended after every
    plain sketch, so the plain sketches keep their ids (and their traces and records)."""
    out = []
    for rules in sketches:
        packs = tuple((name, "pack", s) for s, r, _ in rules if r in _TILED
                      for name, _ in pack_layouts(dag[s].op))
        if packs:
            out.append(rules + packs)
    return out


def _transposed_variants(dag: ComputeDAG, sketches: list[tuple], hw: HardwareParams) -> list[tuple]:
    """Each sketch that tiles a stage with a transposed vector axis, again with that stage
    accumulated transposed at level 1 and 2 (rule cache_write_transposed) and the inputs
    feeding its vectors packed. Appended after the pack variants, so that every earlier
    sketch keeps its id."""
    out = []
    for rules in sketches:
        for k, (s, r, _) in enumerate(rules):
            d = transposed_vector_axis(dag[s].op, hw.vector_lanes) if r == "tile" else None
            if d is None:
                continue
            packs = tuple((name, "pack", s) for name, _ in pack_layouts(dag[s].op, d))
            out += [rules[:k] + ((s, "cache_write_transposed", level),) + rules[k + 1:] + packs
                    for level in (1, 2)]
    return out


def _stage_rules(dag, facts, inlined, done, hw, sp) -> list[tuple]:
    if facts.strictly_inlinable and not facts.is_output:
        return [("inline", None)]
    out = []
    if _needs_rfactor(facts, hw, sp):
        out += [("rfactor", 0), ("rfactor", 1)]
    if facts.needs_multi_level_tiling:
        consumer = elementwise_consumer(dag, facts.name, inlined)
        fusable = consumer is not None and done.get(consumer) == "skip"
        if not fusable:
            out += [("cache_write", 1), ("cache_write", 2)]
            return out + [("tile", None)]
        return out + [("tile_fuse", 1), ("tile_fuse", 2), ("tile", None)]
    return out + [("skip", None)]


# ------------------------------------------------------------------- sketch application

class _Builder:
    def __init__(self, outputs, sketch: Sketch, ask: Decider, hw: HardwareParams, sp: SearchParams):
        self.s: Schedule = create_schedule(outputs)
        self.dag = ComputeDAG(outputs)
        self.inlined = {s for s, r, _ in sketch.rules if r == "inline"}
        self.sketch, self.ask, self.hw, self.sp = sketch, ask, hw, sp
        self.tiled: set[str] = set()      # stages with multi-level tiling (no more annotation)
        self.followers: set[str] = set()  # consumers that follow a producer's tiles
        self.packs: set[str] = set()      # packed copies of inputs (rule `pack`)

    def run(self) -> Schedule:
        fused_into = {self._consumer_of(s): s for s, r, _ in self.sketch.rules if r == "tile_fuse"}
        fused_into.update({c: s for s, r, _ in self.sketch.rules if r == "cache_write_transposed"
                           and (c := self._fusable_consumer(s)) is not None})
        for name, rule, arg in self.sketch.rules:
            st = self.s.stage(name)
            if rule == "inline":
                st.compute_inline()
            elif rule == "skip" and name not in fused_into:
                self._split_for_vector(st)
            elif rule == "tile":
                self._tile(st)
            elif rule == "tile_fuse":
                self._tile_fuse(st, self.s.stage(self._consumer_of(name)), arg)
            elif rule == "cache_write":
                local = self.s[self.s.cache_write(st.op.output(), "local")]
                self._tile_fuse(local, st, arg)
            elif rule == "cache_write_transposed":
                self._cache_write_transposed(st, arg)
            elif rule == "rfactor":
                self._rfactor(st, arg)
            elif rule == "pack":
                self._pack(st, arg)
        for st in reversed(self.s.stages):
            if not st.is_placeholder and st.attach[0] != "inline":
                self._annotate(st)
        return self.s

    def _consumer_of(self, name: str) -> str:
        return elementwise_consumer(self.dag, name, self.inlined)

    def _fusable_consumer(self, name: str) -> str | None:
        """The element-wise consumer a tiled stage can be fused into (its rule is skip)."""
        c = self._consumer_of(name)
        return c if c is not None and self.sketch.rule_of(c)[0] == "skip" else None

    # --- structure
    def _split(self, st: Stage, iv, factors) -> list:
        """Split `iv` into len(factors) loops with these extents, outermost first."""
        ivs, cur = [], iv
        for f in reversed(factors[1:]):
            cur, inner = st.split(cur, factor=f)
            ivs.insert(0, inner)
        return [cur] + ivs

    def _split_for_vector(self, st: Stage) -> None:
        sp = st.op.axis
        if sp[-1].extent > 1:
            outer, inner = self._split(st, sp[-1], self.ask.tile(
                f"tile {st.name}.{sp[-1].name}", sp[-1].extent, 2, self.sp.max_vector_len))
            if st.op.reduce_axis:
                st.reorder(*(list(sp[:-1]) + [outer] + list(st.op.reduce_axis) + [inner]))

    def _tile(self, st: Stage) -> list[tuple]:
        """SSRSRS multi-level tiling; returns each spatial axis's factors."""
        levels = [[] for _ in range(4)]
        rlevels = [[], []]
        factors = []
        for a in st.op.axis:
            f = self.ask.tile(f"tile {st.name}.{a.name}", a.extent, 4, self.sp.max_innermost_factor)
            for lvl, iv in zip(levels, self._split(st, a, f)):
                lvl.append(iv)
            factors.append(f)
        for a in st.op.reduce_axis:
            f = self.ask.tile(f"tile {st.name}.{a.name}", a.extent, 2, self.sp.max_innermost_factor)
            for lvl, iv in zip(rlevels, self._split(st, a, f)):
                lvl.append(iv)
        st.reorder(*(levels[0] + levels[1] + rlevels[0] + levels[2] + rlevels[1] + levels[3]))
        self.tiled.add(st.name)
        return factors

    def _tile_fuse(self, st: Stage, consumer: Stage, level: int, layout: tuple | None = None) -> None:
        """`layout`: st's axes are the consumer's in this order (a transposed cache)."""
        factors = self._tile(st)
        if layout is not None:
            factors = [factors[layout.index(p)] for p in range(len(layout))]
        parts = []
        for a, f in zip(consumer.op.axis, factors):
            follow = (f[0], f[1] * f[2] * f[3]) if level == 1 else (f[0], f[1], f[2] * f[3])
            parts.append(self._split(consumer, a, follow))
        order = [p[k] for k in range(level + 1) for p in parts]
        consumer.reorder(*order)
        st.compute_at(consumer, parts[-1][level - 1])
        self.followers.add(consumer.name)

    def _cache_write_transposed(self, st: Stage, level: int) -> None:
        d = transposed_vector_axis(self.dag[st.name].op, self.hw.vector_lanes)
        layout = axis_last(len(st.op.axis), d)
        local = self.s[self.s.cache_write(st.op.output(), "local", layout=layout)]
        consumer = self._fusable_consumer(st.name)
        if consumer is not None:
            st.compute_inline()
        self._tile_fuse(local, self.s.stage(consumer) if consumer else st, level, layout)

    def _rfactor(self, st: Stage, variant: int) -> None:
        red = list(st.op.reduce_axis)
        r = st.fuse(*red) if len(red) > 1 else red[0]
        f = self.ask.tile(f"tile {st.name}.{r.name}", r.extent, 2, self.sp.max_innermost_factor)
        ro, ri = self._split(st, r, f)
        rf = self.s[self.s.rfactor(st.op.output(), ri if variant else ro)]
        fa, *spatial = rf.op.axis
        rf.reorder(*(spatial + list(rf.op.reduce_axis) + [fa]))

    def _pack(self, src: Stage, reader: str) -> None:
        """cache_read `src` into `src.pack` with the tiled stage's vectorized dimension last
        (a transposed copy, or a panel in `src`'s own layout);
        the stage that computes the tiles (`reader`, or its `.local` copy) reads it. Where it
        is computed (`at src.pack`) sets the panel: once per outer tile of that dimension
        up to once per inner tile. The layout is read off the stage that computes the tiles,
        whose innermost axis is the vectorized one (a transposed cache's included)."""
        if self.sketch.rule_of(reader)[0] in ("cache_write", "cache_write_transposed"):
            reader = f"{reader}.local"
        tiles = self.s.stage(reader).op
        layout = dict(pack_layouts(tiles))[src.name]
        cache = self.s.cache_read(src.op.output(), "global", [tiles.output()], layout=layout)
        pack = self.s[cache]
        self.packs.add(pack.name)
        if list(layout) == sorted(layout):  # a panel: its rows are vectors
            self._split_for_vector(pack)

    # --- annotations (consumers first)
    def _annotate(self, st: Stage) -> None:
        if st.attach[0] == "root" and st.name not in self.tiled and st.name not in self.followers:
            self._location(st)
        if st.attach[0] == "inline":
            return
        if st.attach[0] == "root":
            self._parallel(st)
        self._vectorize(st)
        st.pragma(st.leaf_iter_vars[0], "auto_unroll_max_step",
                  self.ask.choice(f"unroll {st.name}", self.sp.unroll_steps))

    def _location(self, st: Stage) -> None:
        if st.origin_op in self.s.outputs:
            return
        readers = self.s.readers_of(st)
        options = ["root"]
        if not st.op.reduce_axis and st.name not in self.packs:  # an inlined pack = no pack
            options.append("inline")
        loops: dict[str, tuple] = {}
        too_often: list[str] = []  # pack locations over the limit: replayed, never offered
        if st.name in self.packs:
            loops = _enclosing_loops(readers[0])
            repeats = pack_repeats(st.op.output(), _attach_chain(readers[0]))
            too_often = [k for k, v in loops.items() if repeats[id(v[1])] > self.sp.pack_max_repeat]
        elif len(readers) == 1 and readers[0].attach[0] != "inline":
            loops = _loops_of(readers[0])
        elif len(readers) > 1:
            loops = _common_parent_loops(readers)
        where = self.ask.choice(f"at {st.name}", options + [k for k in loops if k not in too_often], too_often)
        if where == "inline":
            st.compute_inline()
        elif where != "root":
            st.compute_at(*loops[where])

    def _parallel(self, st: Stage) -> None:
        """Fuse the outer spatial loops, up to the first reduction or attach point, into one
        parallel loop; how many is the question. The options depend on the sketch and the
        compute locations only, never on tile sizes or the core count, so a model writing a
        sentence knows them without dividing extents. The innermost loop stays out of the
        fuse (it is the one to vectorize); traces recorded when fusing it was offered (a
        stage of fewer than parallel_factor x cores points) still replay."""
        loops = st.leaf_iter_vars
        extents: list[int] = []  # the fused loop's extent when 1, 2, ... loops are fused
        prod = 1
        for iv in loops:
            if iv.kind != "spatial":
                break
            prod *= iv.extent
            extents.append(prod)
            if self._attached_at(st, iv):  # may end a fuse, never sit inside one
                break
        if not extents:
            return
        offered = len(extents) - 1 if len(extents) == len(loops) > 1 else len(extents)
        n = self.ask.parallel(f"parallel {st.name}", extents, offered)
        st.parallel(st.fuse(*loops[:n]) if n > 1 else loops[0])

    def _vectorize(self, st: Stage) -> None:
        last = st.leaf_iter_vars[-1]
        if (last.kind == "spatial" and 1 < last.extent <= self.sp.max_vector_len
                and st.iter_kind.get(last) is None and not self._attached_at(st, last)):
            if self.ask.choice(f"vec {st.name}", [0, 1]):
                st.vectorize(last)

    def _attached_at(self, st: Stage, iv) -> bool:
        return any(x.attach[0] == "at" and x.attach[1] is st and x.attach[2] is iv for x in self.s.stages)


def _common_parent_loops(readers: list[Stage]) -> dict[str, tuple]:
    """Where a stage with several readers can be computed (Ansor's GetSingleConsumerId,
    through chains of attach points): at the loops of the nearest stage P that every
    reader is, or is attached inside, that lie outside (or at) the loop through which each
    reader enters P. Softmax computes `exp` (read by `sum` and `out`) and layernorm `mean`
    (read by `var` or `var.rf`, and `out`) once per row this way; without it their only
    choices are a whole extra pass through memory or recomputation (inline)."""
    chains = [dict(_attach_chain(r)) for r in readers]  # stage -> loop the reader enters it by
    if any(list(c)[-1].attach[0] == "inline" for c in chains):
        return {}
    parent = next((p for p in chains[0] if all(p in c for c in chains[1:])), None)
    if parent is None:
        return {}
    leaves = parent.leaf_iter_vars
    entry = min((c[parent] for c in chains if c[parent] is not None), key=leaves.index, default=None)
    return _loops_of(parent, entry)


def _enclosing_loops(reader: Stage) -> dict[str, tuple]:
    """The loops a pack can be computed at: those of each stage its reader is attached
    inside (outermost stage first, up to the loop the chain enters it through), then the
    reader's own; vectorized loops excluded. A pack must be able to sit outside the tile
    stage's attach point, or it is redone for every tile along the other axis."""
    loops: dict[str, tuple] = {}
    for parent, entry in reversed(_attach_chain(reader)):
        loops.update(_loops_of(parent, entry))
    return loops


def _attach_chain(st: Stage) -> list[tuple]:
    """[(st, None), (P1, loop), (P2, loop), ...]: `st`, then each stage it is attached
    inside, innermost first, with the loop through which the chain enters it."""
    chain = [(st, None)]
    while st.attach[0] == "at":
        chain.append((st.attach[1], st.attach[2]))
        st = st.attach[1]
    return chain


def _loops_of(parent: Stage, entry=None) -> dict[str, tuple]:
    """`at` options at the loops of `parent`, outermost first, up to and including `entry`
    (all of them if None), vectorized loops excluded: name -> (stage, loop)."""
    leaves = parent.leaf_iter_vars
    last = leaves.index(entry) if entry is not None else len(leaves) - 1
    return {f"{parent.name}.{iv.name}": (parent, iv) for iv in leaves[:last + 1]
            if parent.iter_kind.get(iv) != "vectorized"}


def build_schedule(outputs, sketch: Sketch, ask: Decider, hw: HardwareParams,
                   sp: SearchParams) -> Schedule:
    """Apply `sketch`, asking `ask` every question."""
    return _Builder(outputs, sketch, ask, hw, sp).run()


class CPURules:
    """The CPU rule set (schedule.rules.RuleSet)."""
    kind = "cpu"
    questions = ("tile", "at", "parallel", "vec", "unroll")

    def sketches(self, outputs, hw: HardwareParams, sp: SearchParams) -> list[Sketch]:
        return generate_sketches(outputs, hw, sp)

    def build(self, outputs, sketch: Sketch, ask: Decider, hw: HardwareParams,
              sp: SearchParams) -> Schedule:
        return build_schedule(outputs, sketch, ask, hw, sp)
