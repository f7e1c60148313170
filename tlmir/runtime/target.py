"""What the machine is (`HardwareParams`) and how hard to look (`SearchParams`).

Every magic number of the schedule space and the search lives here, not in the rules.
A GPU is a `HardwareParams` of kind "cuda" (presets in GPU_CLASSES, one per architecture
tlmir compiles for); its launch limits are fields of it, so the GPU rules never offer a
configuration over them.
"""
from __future__ import annotations

import functools
import os
import re
import dataclasses
from dataclasses import asdict, dataclass

from ..errors import BuildError, NoDeviceError, ScheduleError


ISA_LANES = {"avx512": 16, "avx2": 8, "sse": 4}  # float32 lanes of each ISA's widest register


@dataclass(frozen=True)
class HardwareParams:
    kind: str = "cpu"            # cpu | cuda
    isa: str = "avx512"          # avx512 | avx2 | sse; a GPU's architecture (sm_90)
    cores: int = 2               # a GPU's streaming multiprocessors
    vector_lanes: int = 16       # float32 lanes of the widest vector register (a GPU: of float4)
    l1_kb: int = 48              # per core (a GPU: L1 + shared memory per SM)
    l2_kb: int = 2048
    # a GPU's launch limits (0 on a CPU): what one block of one kernel may use
    max_threads: int = 0         # threads per block
    max_shared_kb: int = 0       # static shared memory per block
    max_regs: int = 0            # 32-bit registers per block
    max_thread_regs: int = 0     # ... per thread
    warp_size: int = 0
    max_vthread: int = 0         # virtual threads one thread may run (Ansor's max_vthread_extent)

    @property
    def key(self) -> str:
        """Identifies the hardware in records: results never cross machines of another kind."""
        base = f"{self.kind}-{self.isa}-c{self.cores}-l1_{self.l1_kb}K-l2_{self.l2_kb}K"
        if self.kind != "cuda":
            return base
        return (f"{base}-t{self.max_threads}-s{self.max_shared_kb}K-r{self.max_regs}_{self.max_thread_regs}"
                f"-w{self.warp_size}-v{self.max_vthread}")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_key(cls, key: str) -> "HardwareParams":
        """The hardware a records key names (`cpu-avx512-c2-l1_32K-l2_1024K`, or a GPU's
        `cuda-sm_90-c132-l1_256K-l2_51200K-t1024-s48K-r65536_255-w32-v8`)."""
        bad = ScheduleError(f"hardware key {key!r} is not of the form KIND-ISA-cCORES-l1_<n>K-l2_<n>K "
                            f"(a GPU's followed by -tTHREADS-sSHARED_K-rREGS_THREADREGS-wWARP-vVTHREAD)")
        parts = key.split("-")
        try:
            kind, isa, cores, l1, l2 = parts[:5]
            base = (kind, isa, int(cores.removeprefix("c")), 4 if kind == "cuda" else ISA_LANES[isa],
                    int(l1.removeprefix("l1_").removesuffix("K")), int(l2.removeprefix("l2_").removesuffix("K")))
            if kind == "cuda":
                t, sh, r, w, v = parts[5:]
                regs, thread_regs = r.removeprefix("r").split("_")
                hw = cls(*base, int(t.removeprefix("t")), int(sh.removeprefix("s").removesuffix("K")),
                         int(regs), int(thread_regs), int(w.removeprefix("w")), int(v.removeprefix("v")))
            else:
                hw = cls(*base)
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


def _gpu(arch: str, sms: int, l1_kb: int, l2_kb: int) -> HardwareParams:
    """A GPU of the architectures tlmir compiles for: 1024 threads, 48 KiB of static shared
    memory and 64 Ki registers (255 per thread) per block, warps of 32 (the same on sm_70 to
    sm_90); up to 8 virtual threads per thread."""
    return HardwareParams("cuda", arch, sms, 4, l1_kb, l2_kb, 1024, 48, 65536, 255, 32, 8)


# The GPUs the tensor language speaks of and `cuda:sm_XX` names: the data-centre part of
# each architecture (sm_86: the RTX 3090). SMs, L1 + shared memory per SM, L2.
GPU_CLASSES: dict[str, HardwareParams] = {
    "sm_70": _gpu("sm_70", 80, 128, 6144),      # V100
    "sm_80": _gpu("sm_80", 108, 192, 40960),    # A100
    "sm_86": _gpu("sm_86", 82, 128, 6144),      # RTX 3090
    "sm_90": _gpu("sm_90", 132, 256, 51200),    # H100 SXM
}


def gpu_variants() -> list[HardwareParams]:
    """Every GPU class: the GPU hardware the language covers."""
    return list(GPU_CLASSES.values())


@dataclass(frozen=True)
class SearchParams:
    max_innermost_factor: int = 64
    max_vector_len: int = 64           # longest vectorized loop the space offers
    parallel_factor: int = 16          # rfactor a reduction whose output has at most
                                       # parallel_factor x cores points
    unroll_steps: tuple = (0, 16, 64, 512)
    gpu_unroll_steps: tuple = (0, 16, 64, 512, 1024)   # Ansor's GPU auto_unroll_max_step options
    gpu_vector_widths: tuple = (1, 2, 4)               # elements per thread of a cooperative load
    max_unroll: int = 4096             # most iterations an unrolled loop (or auto-unrolled nest) may
                                       # have: a 1 M-iteration unroll would build for minutes
    population: int = 512              # evolutionary search: candidates the cost model scores per
                                       # round (128 rarely held a per-row fused layernorm: docs/history.md)
    measures_per_round: int = 64
    warmup_rounds: int = 4             # evolutionary search measures its first round's worth in this
                                       # many smaller rounds, so its cost model ranks from round two
    cost_model_steps: int = 600        # evolutionary search: training steps of the MLP cost model per round
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
    sketch_filter: str = ""            # random draws (a population's samples) only from the sketches
                                       # whose description matches this regex ("packconv": the packed-
                                       # weights convolutions; "": every sketch). Mutation keeps a sketch
    pack_max_repeat: int = 1           # a pack may sit at a loop where it copies each element at most
                                       # this often (inside the loop over dense's i tiles: once per tile;
                                       # a second copy of dense's W cost 6-11%: docs/history.md)
    mutation_prob: float = 0.85
    mutation_weights: tuple = (("tile", 0.90), ("at", 0.05), ("unroll", 0.04), ("vec", 0.04), ("parallel", 0.01))
                                       # which kind of question a mutation redraws (Ansor's CPU rule
                                       # weights; `vec` is ours); () = every question alike
    tile_mutation: str = "move"        # "move": one factor between two levels (Ansor); "redraw": any tile
    evolution_iters: int = 4
    lowering_workers: int = 0          # processes that lower a batch of candidates (0: one per core,
                                       # at most 8; 1: in the searching process)
    cutoff_factor: float = 5.0         # candidates this much slower than the best are timed once
    confirm_top: int = 8               # tune: the best this many programs are measured again at the
    confirm_rounds: int = 3            # end, this many times each, in turns, and the best is chosen by
    confirm_min_trials: int = 256      # the median (from this many trials; the re-measurements count)
    scheduler_optimism: float = 0.2    # task scheduler: weight of the untried-potential term
    tlm_temperature: float = 1.0       # sampling temperature of the tlm strategies (first program: greedy)
    tlm_rank_per_slot: int = 64        # tlm ranked by the world model: samples written per program measured
    tlm_rank_max: int = 1024           # ... and at most this many per round
    tlm_rank_min_pool: int = 640       # ... and at least this many (TLM-1 picks from as many as TLM-10:
                                       # its pick of 640 ran 1.07-1.11x its pick of 64, docs/model.md)
    tlm_rank_likelihood: float = 0.0   # > 0: picked by the evaluator's rank + this x the rank by the
                                       # model's likelihood of the program (1: no better, docs/model.md)
    tlm_hybrid_pool: int = 640         # tlm+evolutionary: programs the TLM writes in round one, the
                                       # evaluator's picks measured and the rest the next populations
    tlm_first_round: int = 4           # ... measured in round one; each later round measures as many as
                                       # all before it, up to measures_per_round (0: measures_per_round)
    tlm_refine_after: int = 0          # ranked tlm: > 0: after this many measured (one pool), rounds of
    tlm_refine_round: int = 11         # this many, half of whose pool is the model's variants of the best
    tlm_transfers: int = 16            # tlm: the model's transfer sources rewritten for the task
                                       # (search/transfer_sources.py; 0, or a model without sources: none)
    tlm_transfer_share: float = 0.6    # ... the share of each round's measurements taken from them
                                       # (rounded: TLM-1 one, TLM-10 six), the evaluator's top picks
    tlm_transfer_deviation: float = 3.0  # ... picked among twice as many sources, each counting this
                                       # many shape steps farther per unit of the source's inner tiles
                                       # its rewrite could not keep (SourceLibrary.transfers; 0: the
                                       # nearest as they come)
    tlm_transfer_repairs: int = 0      # ... and per rewrite whose inner tiles moved, this many programs
                                       # with those tiles written anew by the model (0: none; 4 measured
                                       # worse, the evaluator picking them: docs/model.md)
    tlm_borrow_own: bool = False       # ... and a training task may borrow its own programs measured
                                       # on other hosts (a library refreshed on a new host keeps the
                                       # better of them and the search); off, a task borrows only others'
    tlm_prompt: str = "host"           # the hardware a TLM's prompt names: "host", or "nearest": the
                                       # nearest class it was fine-tuned on if it was not on the host's
                                       # (tlmir.lm.prompt_hardware; not better so far, docs/model.md)
    world_finetune_steps: int = 20     # world cost model: fine-tuning steps per round of measurements
    world_evaluator: str = "default"   # ... and the trained evaluator it starts from (the TLM's ranker
                                       # too): a shipped name or a directory `tlmir train evaluator` wrote

    def __post_init__(self):
        if self.tlm_prompt not in ("host", "nearest"):
            raise ScheduleError(f"SearchParams.tlm_prompt must be 'host' or 'nearest', got {self.tlm_prompt!r}")
        if self.tile_mutation not in ("move", "redraw"):
            raise ScheduleError(f"SearchParams.tile_mutation must be 'move' or 'redraw', "
                                f"got {self.tile_mutation!r}")
        if not 0.0 <= self.local_share <= 1.0 or self.local_parents < 1:
            raise ScheduleError(f"SearchParams: local_share must be in [0, 1] and local_parents >= 1, "
                                f"got {self.local_share!r} and {self.local_parents!r}")
        if any(not isinstance(w, (int, float)) or w < 0 for _, w in self.mutation_weights):
            raise ScheduleError(f"SearchParams.mutation_weights must be (kind, weight >= 0) pairs, "
                                f"got {self.mutation_weights!r}")
        if self.cost_model_steps < 1:
            raise ScheduleError(f"SearchParams.cost_model_steps must be >= 1, got {self.cost_model_steps!r}")
        if self.tlm_rank_per_slot < 1 or self.tlm_rank_min_pool < 0 or self.tlm_rank_max < 1:
            raise ScheduleError(f"SearchParams: tlm_rank_per_slot and tlm_rank_max must be >= 1 and "
                                f"tlm_rank_min_pool >= 0, got {self.tlm_rank_per_slot!r}, "
                                f"{self.tlm_rank_max!r} and {self.tlm_rank_min_pool!r}")
        if self.tlm_transfers < 0 or not 0.0 <= self.tlm_transfer_share <= 1.0:
            raise ScheduleError(f"SearchParams: tlm_transfers must be >= 0 and tlm_transfer_share in [0, 1], "
                                f"got {self.tlm_transfers!r} and {self.tlm_transfer_share!r}")
        if self.tlm_transfer_repairs < 0:
            raise ScheduleError(f"SearchParams.tlm_transfer_repairs must be >= 0, got {self.tlm_transfer_repairs!r}")
        if not self.tlm_transfer_deviation >= 0.0:
            raise ScheduleError(f"SearchParams.tlm_transfer_deviation must be >= 0, "
                                f"got {self.tlm_transfer_deviation!r}")
        if self.lowering_workers < 0:
            raise ScheduleError(f"SearchParams.lowering_workers must be >= 0, got {self.lowering_workers!r}")
        try:
            re.compile(self.sketch_filter)
        except re.error as e:
            raise ScheduleError(f"SearchParams.sketch_filter {self.sketch_filter!r} is not a regular "
                                f"expression: {e}") from None
        if self.pack_max_repeat < 1:
            raise ScheduleError(f"SearchParams.pack_max_repeat must be >= 1, got {self.pack_max_repeat!r}")
        if not 0.0 <= self.sketch_share <= 1.0 or self.sketch_drop_factor < 1.0 or self.sketch_drop_after < 0:
            raise ScheduleError(f"SearchParams: sketch_share must be in [0, 1], sketch_drop_factor >= 1 and "
                                f"sketch_drop_after >= 0, got {self.sketch_share!r}, "
                                f"{self.sketch_drop_factor!r} and {self.sketch_drop_after!r}")


def search_params(overrides: list[str]) -> SearchParams:
    """The defaults with `NAME=VALUE` overrides, as `--search-param` gives them: VALUE is
    read as the field's type (`population=256`, `tile_mutation=redraw`,
    `unroll_steps=0,16,64`, `tlm_borrow_own=true`); an unknown name or unreadable value names the field."""
    import ast
    sp = SearchParams()
    fields = {f.name: getattr(sp, f.name) for f in dataclasses.fields(SearchParams)}
    changes: dict = {}
    for text in overrides:
        name, eq, value = text.partition("=")
        name = name.strip().replace("-", "_")
        if not eq or name not in fields:
            raise ScheduleError(f"search parameter {text!r}: expected NAME=VALUE with NAME one of "
                                f"{', '.join(fields)}")
        old = fields[name]
        try:
            if isinstance(old, bool):
                new = {"true": True, "1": True, "false": False, "0": False}[value.strip().lower()]
            elif isinstance(old, tuple):
                new = ast.literal_eval(value if value.strip().startswith("(") else f"({value},)")
                if not isinstance(new, tuple):
                    raise ValueError(value)
            else:
                new = type(old)(value)  # int, float or str
        except (ValueError, SyntaxError, KeyError):
            raise ScheduleError(f"search parameter {name}: {value!r} cannot be read as "
                                f"{type(old).__name__} (the default is {old!r})") from None
        changes[name] = new
    return dataclasses.replace(sp, **changes)


def _cache_kb(level: int, default: int) -> int:
    path = f"/sys/devices/system/cpu/cpu0/cache/index{level}/size"
    try:
        text = open(path).read().strip()
    except OSError:
        return default
    mult = 1024 if text.endswith("M") else 1
    return int(text.rstrip("KM")) * mult


def cpu_model_name(default: str = "unknown CPU") -> str:
    """The host CPU's marketing name (benchmarks name the CPU with every number), or
    `default` where /proc/cpuinfo has none."""
    try:
        with open("/proc/cpuinfo") as fh:
            return next((ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name")), default)
    except OSError:
        return default


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
    `-cores=N`, `-l1=32K`, `-l2=1M` that override what the host reports; `cuda:sm_XX` (a
    GPU of that architecture, GPU_CLASSES: compiled without one) or `cuda` (this host's GPU)."""
    if not isinstance(spec, str) or not spec.strip():
        raise BuildError(f"target must be a string such as 'cpu' or 'cpu:avx2', got {spec!r}")
    head, *opts = spec.split()
    kind, _, isa = head.partition(":")
    if kind == "cuda":
        return _parse_cuda(spec, isa, opts)
    if kind != "cpu":
        raise BuildError(f"unknown target {spec!r}; available: cpu, cpu:avx2, cpu:avx512, cpu:sse, "
                         f"cuda, {', '.join('cuda:' + a for a in GPU_CLASSES)}")
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


def _parse_cuda(spec: str, arch: str, opts: list[str]) -> HardwareParams:
    if opts:
        raise BuildError(f"target {spec!r}: a CUDA target takes no options, got {' '.join(opts)!r}")
    if not arch:
        return host_gpu()
    if arch not in GPU_CLASSES:
        raise BuildError(f"target {spec!r}: unknown GPU architecture {arch!r}; available: "
                         f"{', '.join(GPU_CLASSES)}")
    return GPU_CLASSES[arch]


@functools.cache
def host_gpu() -> HardwareParams:
    """This host's GPU (device 0): its architecture, with the limits of the newest preset
    not newer than it and its own SM count, L2 size and launch limits. NoDeviceError where
    there is none."""
    from .gpu import device_attributes
    try:
        a = device_attributes()
    except NoDeviceError as e:
        raise NoDeviceError(f"target 'cuda' is this machine's GPU, and {e}; name an architecture "
                            f"(cuda:{', cuda:'.join(GPU_CLASSES)}) to compile for one without it") from None
    arch = f"sm_{a['major']}{a['minor']}"
    known = [k for k in GPU_CLASSES if int(k[3:]) <= a["major"] * 10 + a["minor"]]
    if not known:
        raise NoDeviceError(f"this host's GPU is {arch}, older than every architecture tlmir compiles for "
                            f"({', '.join(GPU_CLASSES)})")
    return dataclasses.replace(GPU_CLASSES[known[-1]], isa=arch, cores=a["sms"], l2_kb=a["l2_bytes"] // 1024,
                               max_threads=a["max_threads"], max_regs=a["max_regs"],
                               warp_size=a["warp_size"],
                               max_shared_kb=min(48, a["max_shared_bytes"] // 1024))
