"""The programs a new task borrows: each training task's fastest program per hardware.

The language model learns from the fastest programs measured on training tasks, but a
0.9 M-parameter model reproduces them only roughly on a shape it has not seen. A
`SourceLibrary` keeps those programs themselves: for a new task, `transfers` rewrites the
fastest programs of tasks of the same operator (search/transfer.py) for its shape, and
`tlm` measures some of them beside the model's own programs (the model's training data
read directly, as transfer tuning reads a tuning log). Only training tasks are sources:
the library is built from the records of the training split, never of held-out networks.

The library ships beside a model (`sources.jsonl.xz` in its directory); a model without
one measures only its own programs.
"""
from __future__ import annotations

import functools
import json
import lzma
import math
import os
import re
from dataclasses import asdict, dataclass
from typing import Iterable

from ..errors import RecordError
from ..runtime.target import HardwareParams, SearchParams
from ..runtime.task import Task, category, task_type
from ..schedule.decider import Trace
from ..schedule.schedule import Schedule
from ..schedule.space import SearchSpace
from .transfer import Replayed, epilogue_form, replay

SOURCES_FILE = "sources.jsonl.xz"
_GROUPS = re.compile(r"_g\d+(_|$)")
_STRIDES = re.compile(r"_s(\d+)(?:x(\d+))?(_|$)")
STRIDED = "_strided"


def source_category(task: Task) -> str:
    """`category` (the op family, with a convolution's kernel size) and whether a
    convolution is grouped, and strided: a grouped 3x3 conv borrows from grouped convs
    first, a stride-1 conv from stride-1 convs (a stride-2 program's loads and tiles
    are of another kind). A strided conv borrows from both (`SourceLibrary.nearest`):
    its own kind's programs are fewer, and stride-1 programs rewritten for it ran
    faster (ResNet-50's 1x1 stride-2 convs: 400 against 320 GFLOP/s at TLM-10)."""
    kind = task_type(task)
    rest = task.name[len(kind):]
    conv = "conv" in kind
    grouped = conv and _GROUPS.search(rest)
    stride = _STRIDES.search(rest) if conv else None
    strided = stride is not None and any(int(s) > 1 for s in stride.groups()[:2] if s)
    return category(task) + ("_grouped" if grouped else "") + (STRIDED if strided else "")


_EPILOGUES = {"bias", "relu", "gelu", "tanh", "silu", "sigmoid", "add", "mul", "nchw"}


def op_family(kind: str) -> str:
    """A task type without its element-wise epilogue words (and the layout word of a
    plain conv2d_nchw): dense_bias_gelu, dense_bias and a dense with a residual add are
    all "dense", conv2d_nchw and conv2d_bias_relu "conv2d", and borrow from one another."""
    words = kind.split("_")
    while len(words) > 1 and words[-1] in _EPILOGUES:
        words.pop()
    return "_".join(words)


def shape_signature(task: Task) -> tuple[int, ...]:
    """The dimensions of the task's first two inputs and its output (the data and the
    weights: sizes, channels, reduction extents), which tasks of one op family share
    whatever their epilogue reads besides."""
    return tuple(int(d) for t in task.inputs[:2] + task.outputs[:1] for d in t.shape)


def shape_distance(a: tuple[int, ...], b: tuple[int, ...]) -> float:
    """How far apart two shape signatures are: the sum over dimensions of |log2 ratio|
    (a 512- vs 576-channel 14x14 depthwise conv: 0.5; vs a 24-channel 96x96 one: 25);
    `math.inf` where they do not compare (different ranks, or one unknown)."""
    if not a or len(a) != len(b):
        return math.inf
    return sum(abs(math.log2(max(x, 1)) - math.log2(max(y, 1))) for x, y in zip(a, b))


def _shape_step(a: tuple[int, ...], b: tuple[int, ...]) -> float:
    """`shape_distance` in whole steps: within a factor of two overall is one step."""
    d = shape_distance(a, b)
    return d if d == math.inf else math.floor(d)


# How many shape steps another host's program counts farther than this host's: a program
# tuned here for a shape twice as large ties with one tuned elsewhere for the task's shape.
# Ordering every program of this host first had a held-out LayerNorm 128x768 borrow
# LayerNorms of 2^13 times another shape before the training one of its own shape.
OTHER_HOST_STEPS = 1


def _host_step(shape: tuple[int, ...], s: "Source", hw_key: str) -> float:
    return _shape_step(shape, s.shape) + (OTHER_HOST_STEPS if s.hw_key != hw_key else 0)


@functools.lru_cache(maxsize=None)
def _form(rules: str) -> str:
    return epilogue_form(rules)[0]


def isa(hw_key: str) -> str:
    """"cpu-avx512-c2-..." -> "cpu-avx512": programs of the same vector width."""
    return "-".join(hw_key.split("-")[:2])


@dataclass(frozen=True)
class Source:
    task_key: str
    task_type: str
    category: str
    hw_key: str
    gflops: float     # its throughput on hw_key
    sketch: str       # the rules of its sketch (`str(Sketch)`): sketch ids differ between tasks
    trace: str        # its trace, JSON
    shape: tuple[int, ...] = ()  # its task's `shape_signature` (empty in libraries older than it)

    def __post_init__(self):
        object.__setattr__(self, "shape", tuple(self.shape))  # a JSON list read back


class SourceLibrary:
    def __init__(self, sources: Iterable[Source]):
        self.by_type: dict[str, list[Source]] = {}
        for s in sources:
            self.by_type.setdefault(s.task_type, []).append(s)

    def __len__(self) -> int:
        return sum(len(v) for v in self.by_type.values())

    @classmethod
    def from_records(cls, records, tasks: dict[str, Task], sp: SearchParams | None = None) -> "SourceLibrary":
        """The fastest verified program of every task in `tasks` (key -> Task) per hardware
        among `records`; records of other tasks are ignored."""
        best: dict[tuple[str, str], tuple[float, str]] = {}
        for r in records:
            if r.ok and r.task_key in tasks:
                g = tasks[r.task_key].flops / r.best / 1e9
                if g > best.get((r.task_key, r.hw_key), (0.0, ""))[0]:
                    best[(r.task_key, r.hw_key)] = (g, r.trace)
        sp, sources = sp or SearchParams(), []
        for (key, hw_key), (g, trace_json) in sorted(best.items()):
            task, trace = tasks[key], Trace.from_json(trace_json)
            sketches = [str(sk) for sk in SearchSpace(task.outputs, HardwareParams.from_key(hw_key), sp).sketches]
            if 0 <= trace.sketch < len(sketches):
                sources.append(Source(key, task_type(task), source_category(task), hw_key, float(f"{g:.4g}"),
                                      sketches[trace.sketch], trace_json, shape_signature(task)))
        return cls(sources)

    def merge(self, other: "SourceLibrary") -> "SourceLibrary":
        """Both libraries, the faster program where both hold a task on a hardware (a
        model's library updated with a new run's programs)."""
        best: dict[tuple[str, str], Source] = {}
        for lib in (self, other):
            for group in lib.by_type.values():
                for s in group:
                    key = (s.task_key, s.hw_key)
                    if key not in best or s.gflops > best[key].gflops:
                        best[key] = s
        return SourceLibrary(best[k] for k in sorted(best))

    def save(self, path: str) -> None:
        with lzma.open(path, "wt") as f:
            for group in self.by_type.values():
                for s in group:
                    f.write(json.dumps(asdict(s), separators=(",", ":")) + "\n")

    @classmethod
    def load(cls, path: str) -> "SourceLibrary":
        try:
            with lzma.open(path, "rt") as f:
                return cls(Source(**json.loads(line)) for line in f if line.strip())
        except (OSError, lzma.LZMAError, EOFError, ValueError, TypeError) as e:
            raise RecordError(f"transfer sources {path}: unreadable ({e})") from None

    @classmethod
    def of_model(cls, model_dir: str) -> "SourceLibrary | None":
        """The library shipped in a model directory, or None where it has none."""
        path = os.path.join(model_dir, SOURCES_FILE)
        return cls.load(path) if os.path.isfile(path) else None

    def nearest(self, task: Task, hw_key: str, own: bool = False) -> list[Source]:
        """Sources for `task` on `hw_key`, best first: the same category before the rest of
        the op (`source_category`; for a strided conv, strided or not), then by shape
        (`shape_distance` in whole steps: within a factor of two overall is one step; a
        program measured on another host of the vector width counts `OTHER_HOST_STEPS`
        farther, other widths are not sources), each step its own op type before the
        others of its `op_family` (their sketches matched by `transfer.epilogue_form`: an
        epilogue changes a schedule less than a shape does), this hardware first, then by
        throughput. A program tuned for a 512-channel 14x14 map transfers to a 576-channel
        one; the fastest program of the op, tuned for a 96x96 map of 24 channels, does not,
        even on this host. The task's own programs are left out unless `own` (then another
        host's are its nearest)."""
        key = self._nearest_key(task, hw_key)
        family, width = op_family(task_type(task)), isa(hw_key)
        mine = [s for k, group in self.by_type.items() if op_family(k) == family for s in group
                if (own or s.task_key != task.key) and isa(s.hw_key) == width]
        return sorted(mine, key=key)

    @staticmethod
    def _nearest_key(task: Task, hw_key: str):
        """`nearest`'s order as a sort key of a source: (another category, not the task's
        own, host step, another op type, another host, -throughput, task key)."""
        kind, shape = task_type(task), shape_signature(task)
        family = op_family(kind)

        def family_category(category: str, source_kind: str) -> str:
            return family + category[len(source_kind):]

        cat = family_category(source_category(task), kind)
        loose = cat.endswith(STRIDED)  # a strided conv borrows stride-1 programs as readily

        def compared(category: str) -> str:
            return category.removesuffix(STRIDED) if loose else category

        cat = compared(cat)
        return lambda s: (compared(family_category(s.category, s.task_type)) != cat, s.task_key != task.key,
                          _host_step(shape, s, hw_key), s.task_type != kind, s.hw_key != hw_key,
                          -s.gflops, s.task_key)

    def by_structure(self, space: SearchSpace, task: Task, hw_key: str) -> list[Source]:
        """Sources for a task of an op no source is named for (an op written by hand in
        `te`, a matmul beside batch matmuls): those whose sketch has the `epilogue_form`
        of one of the task's sketches, so their questions are the task's; by shape, this
        hardware and throughput as in `nearest`. A dense with a tanh GELU
        written by hand reads as a dense, a matmul as a batch matmul."""
        forms = {_form(str(sk)) for sk in space.sketches}
        width, shape = isa(hw_key), shape_signature(task)
        mine = [s for group in self.by_type.values() for s in group
                if isa(s.hw_key) == width and s.task_key != task.key and _form(s.sketch) in forms]
        return sorted(mine, key=lambda s: (_host_step(shape, s, hw_key), s.hw_key != hw_key, -s.gflops, s.task_key))

    def transfers(self, space: SearchSpace, task: Task, limit: int, exclude: frozenset = frozenset(),
                  own: bool = False, deviation_steps: float = 0.0) -> list[tuple[Schedule, Trace]]:
        """`rewrites`' schedules and traces."""
        return [(r.schedule, r.trace) for r in self.rewrites(space, task, limit, exclude, own, deviation_steps)]

    def rewrites(self, space: SearchSpace, task: Task, limit: int, exclude: frozenset = frozenset(),
                 own: bool = False, deviation_steps: float = 0.0) -> list[Replayed]:
        """`sourced_rewrites`' programs."""
        return [r for _, r in self.sourced_rewrites(space, task, limit, exclude, own, deviation_steps)]

    def sourced_rewrites(self, space: SearchSpace, task: Task, limit: int, exclude: frozenset = frozenset(),
                         own: bool = False, deviation_steps: float = 0.0) -> list[tuple[Source, Replayed]]:
        """Up to `limit` distinct programs for `task`, each with its source: the nearest
        sources rewritten for its shape (those of its op family, else those of its
        structure), none whose trace (JSON) is in `exclude`; of a source task, one program
        of this host and one of the others (the others' programs of a task are often one;
        this host's, tuned harder for its own shape, can transfer worse than another's);
        the task's own first where `own` (`nearest`).

        With `deviation_steps` > 0 the programs of twice as many sources are ordered again,
        each source's shape step (`nearest`'s, within its category and own-first order)
        counting `deviation_steps` per unit of its rewrite's `replay` deviation (the
        source's inner tiles the task's extents could not keep), and the first `limit`
        kept: the 1x1 conv 704->128 on 14x14 maps then borrows a program of 12x12 maps
        whose tiles survive before one of 17x17 maps whose tiles do not."""
        hw_key = space.hw.key
        sources = self.nearest(task, hw_key, own)
        if sources:  # (another category, not the task's own, host step) as `nearest` orders them
            nearest_key = self._nearest_key(task, hw_key)
            place = lambda s: nearest_key(s)[:3]  # noqa: E731
        else:
            sources, shape = self.by_structure(space, task, hw_key), shape_signature(task)
            place = lambda s: (_host_step(shape, s, hw_key),)  # noqa: E731
        width = 2 * limit if deviation_steps > 0 else limit
        out, used, traces = [], set(), set(exclude)
        for s in sources:
            if len(out) == width:
                break
            source = (s.task_key, s.hw_key == hw_key)
            if source in used:
                continue
            got = replay(space, Trace.from_json(s.trace), s.sketch)
            if got is None:
                continue
            used.add(source)
            key = got.trace.to_json()
            if key not in traces:
                traces.add(key)
                *tier, step = place(s)
                out.append(((*tier, step + deviation_steps * got.deviation), s, got))
        if deviation_steps > 0:
            out.sort(key=lambda o: o[0])  # stable: nearest's order among equals
        return [(s, program) for _, s, program in out[:limit]]
