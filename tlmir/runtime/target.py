"""What the machine is (`HardwareParams`) and how hard to look (`SearchParams`).

Every magic number of the schedule space and the search lives here, not in the rules.
"""
from __future__ import annotations

import functools
import os
import dataclasses
from dataclasses import asdict, dataclass

from ..errors import BuildError, ScheduleError


ISA_LANES = {"avx512": 16, "avx2": 8, "sse": 4}  # float32 lanes of each ISA's widest register


@dataclass(frozen=True)
class HardwareParams:
    kind: str = "cpu"
    isa: str = "avx512"          # avx512 | avx2 | sse
    cores: int = 2
    vector_lanes: int = 16       # float32 lanes of the widest vector register
    l1_kb: int = 48
    l2_kb: int = 2048

    @property
    def key(self) -> str:
        """Identifies the hardware in records: results never cross machines of another kind."""
        return f"{self.kind}-{self.isa}-c{self.cores}-l1_{self.l1_kb}K-l2_{self.l2_kb}K"

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_key(cls, key: str) -> "HardwareParams":
        """The hardware a records key names (`cpu-avx512-c2-l1_32K-l2_1024K`)."""
        bad = ScheduleError(f"hardware key {key!r} is not of the form KIND-ISA-cCORES-l1_<n>K-l2_<n>K")
        try:
            kind, isa, cores, l1, l2 = key.split("-")
            hw = cls(kind, isa, int(cores.removeprefix("c")), ISA_LANES[isa],
                     int(l1.removeprefix("l1_").removesuffix("K")), int(l2.removeprefix("l2_").removesuffix("K")))
        except (ValueError, KeyError):
            raise bad from None
        if hw.key != key:
            raise bad
        return hw


# CPU classes the tensor language is trained to speak of (sampling varies the core count
# over CORE_COUNTS as well). L1d / L2 are per core, as `host_hardware` reads them.
CPU_CLASSES: dict[str, HardwareParams] = {
    "haswell": HardwareParams("cpu", "avx2", 4, 8, 32, 256),
    "skylake-client": HardwareParams("cpu", "avx2", 4, 8, 32, 256),
    "alder-lake": HardwareParams("cpu", "avx2", 8, 8, 48, 1280),
    "zen2": HardwareParams("cpu", "avx2", 8, 8, 32, 512),
    "zen3": HardwareParams("cpu", "avx2", 8, 8, 32, 512),
    "skylake-sp": HardwareParams("cpu", "avx512", 16, 16, 32, 1024),
    "ice-lake-sp": HardwareParams("cpu", "avx512", 16, 16, 48, 1280),
    "sapphire-rapids": HardwareParams("cpu", "avx512", 16, 16, 48, 2048),
    "zen4": HardwareParams("cpu", "avx512", 16, 16, 32, 1024),
    "zen5": HardwareParams("cpu", "avx512", 16, 16, 48, 1024),
}
CORE_COUNTS = tuple(range(1, 65))   # the core counts a hardware prompt may say


def hardware_variants() -> list[HardwareParams]:
    """Every CPU class at every core count of CORE_COUNTS: the hardware the language covers."""
    return [dataclasses.replace(hw, cores=c) for hw in CPU_CLASSES.values() for c in CORE_COUNTS]


@dataclass(frozen=True)
class SearchParams:
    max_innermost_factor: int = 64
    max_vector_len: int = 64           # longest vectorized loop the space offers
    parallel_factor: int = 16          # parallel loops cover up to parallel_factor x cores iterations
    unroll_steps: tuple = (0, 16, 64, 512)
    max_unroll: int = 4096             # most iterations an unrolled loop (or auto-unrolled nest) may
                                       # have: a 1 M-iteration unroll would build for minutes
    population: int = 512              # evolutionary search: candidates the cost model scores per
                                       # round (128 rarely held a per-row fused layernorm: docs/history.md)
    measures_per_round: int = 64
    warmup_rounds: int = 4             # evolutionary search measures its first round's worth in this
                                       # many smaller rounds, so its cost model ranks from round two
    eps_greedy: float = 0.05
    local_share: float = 0.25          # evolutionary search: share of a round measured as random,
                                       # unranked mutants of the best measured programs
    local_parents: int = 4             # ... of the best programs of this many best sketches (8: no
                                       # better on dense over 10 seeds: docs/history.md,
                                       # "local mutants for every sketch")
    sketch_share: float = 0.25         # ... share of the population and of a round's model picks
                                       # dealt round-robin over the sketches (each its own top-scored)
    sketch_drop_factor: float = 10.0   # ... a sketch whose best is this much slower than the best
    sketch_drop_after: int = 16        # after this many of its programs were measured loses that share
    pack_max_repeat: int = 1           # a pack may sit at a loop where it copies each element at most
                                       # this often (inside the loop over dense's i tiles: once per tile;
                                       # a second copy of dense's W cost 6-11%: docs/history.md)
    mutation_prob: float = 0.85
    mutation_weights: tuple = (("tile", 0.90), ("at", 0.05), ("unroll", 0.04), ("vec", 0.04), ("parallel", 0.01))
                                       # which kind of question a mutation redraws (Ansor's CPU rule
                                       # weights; `vec` is ours); () = every question alike
    tile_mutation: str = "move"        # "move": one factor between two levels (Ansor); "redraw": any tile
    evolution_iters: int = 4
    cutoff_factor: float = 5.0         # candidates this much slower than the best are timed once
    confirm_top: int = 8               # tune: the best this many programs are measured again at the
    confirm_rounds: int = 3            # end, this many times each, in turns, and the best is chosen by
    confirm_min_trials: int = 256      # the median (from this many trials; the re-measurements count)
    scheduler_optimism: float = 0.2    # task scheduler: weight of the untried-potential term
    tlm_temperature: float = 1.0       # sampling temperature of the tlm strategies (first program: greedy)
    tlm_rank_per_slot: int = 64        # tlm ranked by the world model: samples written per program measured
    tlm_rank_max: int = 1024           # ... and at most this many per round
    world_finetune_steps: int = 20     # world cost model: fine-tuning steps per round of measurements

    def __post_init__(self):
        if self.tile_mutation not in ("move", "redraw"):
            raise ScheduleError(f"SearchParams.tile_mutation must be 'move' or 'redraw', "
                                f"got {self.tile_mutation!r}")
        if not 0.0 <= self.local_share <= 1.0 or self.local_parents < 1:
            raise ScheduleError(f"SearchParams: local_share must be in [0, 1] and local_parents >= 1, "
                                f"got {self.local_share!r} and {self.local_parents!r}")
        if any(not isinstance(w, (int, float)) or w < 0 for _, w in self.mutation_weights):
            raise ScheduleError(f"SearchParams.mutation_weights must be (kind, weight >= 0) pairs, "
                                f"got {self.mutation_weights!r}")
        if self.pack_max_repeat < 1:
            raise ScheduleError(f"SearchParams.pack_max_repeat must be >= 1, got {self.pack_max_repeat!r}")
        if not 0.0 <= self.sketch_share <= 1.0 or self.sketch_drop_factor < 1.0 or self.sketch_drop_after < 0:
            raise ScheduleError(f"SearchParams: sketch_share must be in [0, 1], sketch_drop_factor >= 1 and "
                                f"sketch_drop_after >= 0, got {self.sketch_share!r}, "
                                f"{self.sketch_drop_factor!r} and {self.sketch_drop_after!r}")


def _cache_kb(level: int, default: int) -> int:
    path = f"/sys/devices/system/cpu/cpu0/cache/index{level}/size"
    try:
        text = open(path).read().strip()
    except OSError:
        return default
    mult = 1024 if text.endswith("M") else 1
    return int(text.rstrip("KM")) * mult


@functools.cache
def host_hardware() -> HardwareParams:
    """This machine, as LLVM sees it."""
    import llvmlite.binding as llvm
    llvm.initialize_native_target()
    try:
        feats = llvm.get_host_cpu_features()
        has = {k for k, v in feats.items() if v}
    except RuntimeError:
        has = set()
    isa = "avx512" if "avx512f" in has else ("avx2" if "avx2" in has else "sse")
    return HardwareParams("cpu", isa, os.cpu_count() or 1, ISA_LANES[isa], _cache_kb(0, 48), _cache_kb(2, 2048))


ISA_ORDER = ("sse", "avx2", "avx512")


def parse_target(spec: str = "cpu") -> HardwareParams:
    """A target string as TVM spells one, to the hardware it names: `cpu` (this host),
    `cpu:avx2` / `cpu:avx512` / `cpu:sse` (this host held to that instruction set: code
    for an AVX2 machine compiled and run here), each optionally followed by options
    `-cores=N`, `-l1=32K`, `-l2=1M` that override what the host reports."""
    if not isinstance(spec, str) or not spec.strip():
        raise BuildError(f"target must be a string such as 'cpu' or 'cpu:avx2', got {spec!r}")
    head, *opts = spec.split()
    kind, _, isa = head.partition(":")
    if kind == "cuda":
        raise BuildError(f"target {spec!r}: there is no CUDA backend yet; available: cpu, cpu:avx2, cpu:avx512")
    if kind != "cpu":
        raise BuildError(f"unknown target {spec!r}; available: cpu, cpu:avx2, cpu:avx512, cpu:sse")
    host = host_hardware()
    hw = host
    if isa:
        if isa not in ISA_LANES:
            raise BuildError(f"target {spec!r}: unknown instruction set {isa!r}; available: {', '.join(ISA_ORDER)}")
        if ISA_ORDER.index(isa) > ISA_ORDER.index(host.isa):
            raise BuildError(f"target {spec!r}: this host has {host.isa}, not {isa}; its code could not run here")
        hw = dataclasses.replace(hw, isa=isa, vector_lanes=ISA_LANES[isa])
    fields = {"-cores": "cores", "-l1": "l1_kb", "-l2": "l2_kb"}
    for opt in opts:
        name, eq, value = opt.partition("=")
        if name not in fields or not eq:
            raise BuildError(f"target {spec!r}: unknown option {opt!r}; options: -cores=N, -l1=32K, -l2=1M")
        try:
            n = int(value[:-1]) * (1024 if value[-1] in "Mm" else 1) if value[-1:] in ("K", "k", "M", "m") \
                else int(value)
        except ValueError:
            raise BuildError(f"target {spec!r}: {opt!r} needs an integer (sizes in K or M)") from None
        if n < 1:
            raise BuildError(f"target {spec!r}: {opt!r} must be positive")
        hw = dataclasses.replace(hw, **{fields[name]: n})
    return hw
