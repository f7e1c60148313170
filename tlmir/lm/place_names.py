"""Names by place: what a model reads for the tensors, stages and axes a sentence names.

A tensor sentence names tensors, stages and loop axes as the operator's author did
(`tile sumsq.k`, `read x i k`). A word-level vocabulary cannot hold every name an author
may choose, and a model that has learnt the questions of `C` and `i` has learnt nothing
about those of `sumsq` and `k`: on operators of no workload, whose names it never read,
it writes no well-formed sentence. A tokenizer with names by place reads each name by
where the prompt puts it instead:

- the inputs `in0 in1 ...` and the stages `s0 s1 ...`, in the order the prompt declares
  them (the ComputeDAG's order, producers first);
- a stage's axes by the extent they run over: its spatial axes `i0 i1 ...` and reduce
  axes `r0 r1 ...` in the order its `sp` and `rd` clauses list their extents, so
  `tile s0.i1 1000` asks the axis of the stage's second spatial extent, 1000, in every
  operator (`bind_axes` reads the binding off the stage's read clauses);
- every other identifier (`local`, `outer`, `fused`, `pack`, `ax1`, ...) as it is, and
  so is a name that is no identifier.

An axis is read through the stage whose word it is in: in a read clause, the stage the
clause belongs to; in a compound word, the stage or tensor it begins with
(`sumsq.k.outer.v` -> `s0.r0.outer.v`). The same letter may be `i0` of one stage and
`i1` of another.

A name that is also a word of the language (a stage called `reduce`) is read by place
inside a compound word (`reduce.k` -> `s0.r0`) and, standing alone, where the language
puts a tensor or stage name: after `stage`, `input`, `read` or a question's kind
(`parallel reduce` -> `parallel s0`). Elsewhere the bare word is the language's own
(`stage reduce reduce sp` -> `stage s0 reduce sp`). So a row reduction whose stage is
called `reduce` is read as every other row reduction is.

With `numbers`, the extents of the prompt above the integers every vocabulary holds
(`LARGEST_WORD_NUMBER`, 1024) are read by place too: `n0 n1 ...` in the order the task
prompt first writes them, and so is every word of the sentence that is one of those
numbers (`tile s0.i1 3000` -> `tile s0.i1 n0`). A vocabulary holds the extents of the
tasks it was built from; an operator's other extents would be `<unk>`, a word a model
can neither read nor copy into the question that asks about it.

With `extents`, the extent a tile question carries (`tile s0.r0 640 =`, the product of
its answer) is read as `ext` where it is the prompt's extent of the axis asked (`r0` of
`s0`: its stage clause's first `rd` extent; in a compound word the first axis place,
`s0.local.i1.c` asks i1 of s0). A sentence copies that number from its
prompt, and a number few training prompts hold is one a model copies wrongly (it writes
another rare number); `ext` is the same word for every axis of every operator. The panel
an input is packed into (`tile in1.pack.ax1 640`) is read the same way, its axis `ax<d>`
the input's dimension d. Where the extent is another (a stage a rule adds, an axis
already split) it stays as written.

A word is read identifier by identifier (`C.local.i.c` -> `s0.local.i0.c`,
`p*2+rr` -> `i2*2+r1`), so the vocabulary of place words is closed: the same few hundred
words for any operator. The map is a bijection built from the sentence's own prompt, so
`real(placed(w)) == w` and decoding needs nothing but the prompt.
"""
from __future__ import annotations

import functools
import itertools
import re
from dataclasses import dataclass, field
from typing import Sequence

from ..errors import LanguageError
from .language import QUESTION_KEYWORDS, RESERVED_WORDS

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_INT = re.compile(r"\d+\Z")
_AXIS_PLACE = re.compile(r"[ir]\d+")  # a stage's spatial or reduce axis by place
# the words after which the language writes a tensor or stage name, standing alone
_NAME_AFTER = frozenset(("stage", "input", "read", *QUESTION_KEYWORDS))
_CLAUSE_WORDS = frozenset(("read", "stage", "input", "hw"))
LARGEST_WORD_NUMBER = 1024  # every vocabulary holds the integers 0 .. this as words
NUMBER_PLACES = 8  # n0 .. n7: a prompt's further large extents stay as written
EXTENT_WORD = "ext"  # with `extents`: a tile question's extent that is the prompt's extent of its axis


@dataclass
class StageClause:
    """One `stage` clause of a prompt: its extents and what it reads."""
    name: str
    sp: list[int] = field(default_factory=list)
    rd: list[int] = field(default_factory=list)
    reads: list[tuple[str, list[str]]] = field(default_factory=list)  # (tensor, index words)


def prompt_clauses(words: Sequence[str]) -> tuple[list[tuple[str, list[int]]], list[StageClause]]:
    """The inputs (name, shape) and stage clauses of the task prompt in `words`."""
    inputs: list[tuple[str, list[int]]] = []
    stages: list[StageClause] = []
    try:
        k, end = words.index("task") + 1, words.index("hw")
    except ValueError:
        return inputs, stages
    while k < end:
        w = words[k]
        if w == "input" and k + 1 < end:
            name, k = words[k + 1], k + 2
            shape = []
            while k < end and _INT.match(words[k]):
                shape.append(int(words[k]))
                k += 1
            inputs.append((name, shape))
        elif w == "stage" and k + 1 < end:
            stages.append(StageClause(words[k + 1]))
            k += 3  # the name and elem / reduce
            extents = stages[-1].sp
            while k < end and (words[k] in ("sp", "rd") or _INT.match(words[k])):
                if words[k] in ("sp", "rd"):
                    extents = stages[-1].sp if words[k] == "sp" else stages[-1].rd
                else:
                    extents.append(int(words[k]))
                k += 1
        elif w == "read" and k + 1 < end:
            tensor, k = words[k + 1], k + 2
            index = []
            while k < end and words[k] not in _CLAUSE_WORDS:
                index.append(words[k])
                k += 1
            if stages:
                stages[-1].reads.append((tensor, index))
        else:
            k += 1
    return inputs, stages


def _fits(names: Sequence[str], extents: Sequence[int], known: dict[str, int]) -> bool:
    """Can `names` take slots of `extents`, each name of known extent a slot of that extent?"""
    free = list(extents)
    for n in names:
        if n in known:
            if known[n] not in free:
                return False
            free.remove(known[n])
    return len(names) <= len(extents)


def _slots(names: Sequence[str], extents: Sequence[int], known: dict[str, int]) -> dict[str, int]:
    """Each name's slot: a name of known extent the first free slot of that extent, the
    others the free slots left, in the order the names are first used."""
    slot: dict[str, int] = {}
    free = list(range(len(extents)))
    for n in names:
        match = [s for s in free if n in known and extents[s] == known[n]]
        if match:
            slot[n] = match[0]
            free.remove(match[0])
    for n in names:
        if n not in slot and free:
            slot[n] = free.pop(0)
    return slot


def bind_axes(stage: StageClause, shapes: dict[str, list[int]],
              roles: dict[str, str] | None = None) -> dict[str, str]:
    """Each axis name of `stage`'s read clauses -> `i<k>` (its k-th spatial extent) or
    `r<k>` (its k-th reduce extent), read off the reads: an index that is a bare name
    runs over the extent of the dimension it indexes; the reduce axes are the names whose
    extents fit the `rd` list, preferring names that keep the role (`i` or `r`) an earlier
    stage gave them (`roles`), then names that do not lead a compound index (`p` of
    `p*2+rr` is an output position, `rr` the window), then names read from more tensors
    (the contracted `k` of `A[i, k] * B[k, j]`), then names used later. A name no slot is
    left for is `a<n>`."""
    order: list[str] = []
    tensors: dict[str, set[str]] = {}
    leads: set[str] = set()
    extents: dict[str, set[int]] = {}
    for tensor, index in stage.reads:
        shape = shapes.get(tensor)
        for d, w in enumerate(index):
            idents = _IDENT.findall(w)
            for ident in idents:
                if ident not in tensors:
                    order.append(ident)
                    tensors[ident] = set()
                tensors[ident].add(tensor)
            if len(idents) > 1:
                leads.add(idents[0])
            if shape is not None and len(shape) == len(index) and _IDENT.fullmatch(w):
                extents.setdefault(w, set()).add(shape[d])
    known = {n: next(iter(e)) for n, e in extents.items() if len(e) == 1}
    roles = roles or {}

    def preference(reduce: tuple[str, ...]) -> tuple:
        spatial = [n for n in order if n not in reduce]
        kept = sum(roles.get(n) == "r" for n in reduce) + sum(roles.get(n) == "i" for n in spatial)
        return (_fits(reduce, stage.rd, known) and _fits(spatial, stage.sp, known), kept,
                -sum(n in leads for n in reduce), sum(len(tensors[n]) for n in reduce),
                sum(order.index(n) for n in reduce))
    reduce = max(itertools.combinations(order, min(len(stage.rd), len(order))), key=preference)
    places = {n: f"r{k}" for n, k in _slots(reduce, stage.rd, known).items()}
    places.update((n, f"i{k}") for n, k in _slots([n for n in order if n not in reduce], stage.sp,
                                                  known).items())
    for n in order:
        if n not in places:
            places[n] = f"a{sum(p.startswith('a') for p in places.values())}"
    return places


def _readable(name: str) -> bool:
    """Can `name` be read by place? A name that is not an identifier is read as written."""
    return bool(_IDENT.fullmatch(name))


def _bind_stages(stages, names, shapes) -> dict[str, dict[str, str]]:
    """stage -> its axis names -> places (`bind_axes`), each stage keeping the roles the
    stages before it gave a name; `names` (tensors and stages) are no axes."""
    axes: dict[str, dict[str, str]] = {}
    roles: dict[str, str] = {}
    for st in stages:
        if st.name not in axes:
            axes[st.name] = {n: p for n, p in bind_axes(st, shapes, roles).items() if n not in names}
            for n, p in axes[st.name].items():
                roles.setdefault(n, p[0])
    return axes


@functools.lru_cache(maxsize=4096)  # a corpus has a few thousand prompts, each in many sentences
def _prompt_places(prompt: tuple[str, ...]) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    """(tensor and stage names -> places, stage -> axis names -> places) of a prompt."""
    inputs, stages = prompt_clauses(prompt)
    to_place: dict[str, str] = {}
    for prefix, names in (("in", [n for n, _ in inputs]), ("s", [st.name for st in stages])):
        for k, name in enumerate(names):
            if _readable(name) and name not in to_place:
                to_place[name] = f"{prefix}{k}"
    shapes = dict(inputs)
    shapes.update((st.name, st.sp) for st in stages)
    return to_place, _bind_stages(stages, set(to_place), shapes)


@functools.lru_cache(maxsize=4096)
def _tile_extents(prompt: tuple[str, ...]) -> tuple[tuple[str, int], ...]:
    """(`s0.i1`, the second spatial extent of the prompt's stage s0), ... for every axis of
    every stage read by place, and (`in1.pack.ax1`, in1's second dimension) for every
    dimension of every input: the space tiles only a pack in its input's own layout."""
    to_place, _ = _prompt_places(prompt)
    out: dict[str, int] = {}
    inputs, stages = prompt_clauses(prompt)
    for name, shape in inputs:
        if name in to_place:
            out.update((f"{to_place[name]}.pack.ax{d}", e) for d, e in enumerate(shape))
    for st in stages:
        place = to_place.get(st.name)
        if place is not None:
            for role, extents in (("i", st.sp), ("r", st.rd)):
                for k, e in enumerate(extents):
                    out.setdefault(f"{place}.{role}{k}", e)
    return tuple(out.items())


def number_places(prompt: Sequence[str]) -> dict[str, str]:
    """The task prompt's integers above LARGEST_WORD_NUMBER -> `n0 n1 ...`, by first use."""
    places: dict[str, str] = {}
    for w in prompt:
        if w == "hw":
            break
        if _INT.match(w) and int(w) > LARGEST_WORD_NUMBER and w not in places and len(places) < NUMBER_PLACES:
            places[w] = f"n{len(places)}"
    return places


class PlaceNames:
    """The bijection between the names (with `numbers`, the large extents; with `extents`,
    the tile questions' extents) of one prompt and their place words."""

    def __init__(self, prompt: Sequence[str], numbers: bool = False, extents: bool = False):
        words = list(prompt)
        task = words.index("task") if "task" in words else 0
        end = words.index("hw") + 1 if "hw" in words else 0
        to_place, axes = _prompt_places(tuple(words[task:end]))
        self.numbers = number_places(words[task:end]) if numbers else {}
        self.numbers_real = {p: n for n, p in self.numbers.items()}
        # a tile question's placed axis -> the prompt's extent of it (read as EXTENT_WORD)
        self.tile_extents = dict(_tile_extents(tuple(words[task:end]))) if extents else {}
        self.to_place: dict[str, str] = dict(to_place)  # tensors and stages
        self.to_real = {p: n for n, p in self.to_place.items()}
        self.axes = {s: dict(a) for s, a in axes.items()}  # stage -> its axis names -> places
        # by the stage's place word: what `real` reads
        self.axes_real = {self.to_place.get(s, s): {p: n for n, p in a.items()}
                          for s, a in self.axes.items()}

    @property
    def words(self) -> set[str]:
        """Every place word this prompt's names and numbers are read as."""
        return (set(self.to_place.values()) | {p for a in self.axes.values() for p in a.values()}
                | set(self.numbers.values()) | ({EXTENT_WORD} if self.tile_extents else set()))

    def _map(self, word: str, to: dict[str, str], axes: dict[str, dict[str, str]],
             stage: str | None) -> str:
        """`word` identifier by identifier through `to`, the axes through those of `stage`
        (a read clause's) or of the stage or tensor the word begins with."""
        if stage is None:
            first = _IDENT.match(word)
            stage = first.group(0) if first else None
        own = axes.get(stage, {})
        return _IDENT.sub(lambda m: own.get(m.group(0)) or to.get(m.group(0), m.group(0)), word)

    def placed(self, word: str, after: str | None = None, stage: str | None = None) -> str:
        """`word` with every name replaced by its place (`stage`: the stage of the read
        clause it is in). A word of the language standing alone is a name only where the
        word before it (`after`) is `stage`, `input`, `read` or a question's kind;
        elsewhere it stays the language's own."""
        if word in self.numbers:
            return self.numbers[word]
        if word in RESERVED_WORDS and after not in _NAME_AFTER:
            return word
        return self._map(word, self.to_place, self.axes, stage)

    def _axis_extent(self, placed_target: str) -> int | None:
        """The prompt's extent of the axis a tile question's placed target names: its
        stage's first place axis (`s0.local.i1.c` -> i1 of s0), an input's pack axis
        (`in1.pack.ax1`: in1's second dimension), or None."""
        idents = _IDENT.findall(placed_target)
        if idents[1:2] == ["pack"] and len(idents) > 2:
            return self.tile_extents.get(".".join(idents[:3]))
        axis = next((w for w in idents[1:] if _AXIS_PLACE.fullmatch(w)), None)
        return self.tile_extents.get(f"{idents[0]}.{axis}") if axis else None

    def _tile_extent(self, placed_target: str, word: str, after_tile: bool) -> bool:
        """Is `word`, after `tile <target>`, the prompt's extent of that axis?"""
        return (after_tile and bool(self.tile_extents) and _INT.match(word) is not None
                and self._axis_extent(placed_target) == int(word))

    def placed_at(self, words: Sequence[str], k: int, word: str | None = None) -> str:
        """`word` (default `words[k]`) read at position k of `words`, after the words
        before it (outside read clauses: the words a validity mask allows there)."""
        word = words[k] if word is None else word
        if k >= 2 and self._tile_extent(self.placed(words[k - 1], "tile"), word, words[k - 2] == "tile"):
            return EXTENT_WORD
        return self.placed(word, words[k - 1] if k else None)

    def placed_words(self, words: Sequence[str]) -> list[str]:
        """`words` (a sentence, or a fragment from a question's kind on) read by place,
        each after the word before it and a read clause's axes through its stage."""
        out = [self.placed(w, words[k - 1] if k else None, stage) for k, w, stage in _walk(words)]
        for k in range(2, len(out)):
            if self._tile_extent(out[k - 1], words[k], words[k - 2] == "tile"):
                out[k] = EXTENT_WORD
        return out

    def real(self, word: str, stage: str | None = None) -> str:
        """The inverse of `placed` (place words the prompt does not have stay as they are)."""
        if word in self.numbers_real:
            return self.numbers_real[word]
        return self._map(word, self.to_real, self.axes_real, stage)

    def real_words(self, words: Sequence[str]) -> list[str]:
        """The inverse of `placed_words` (an `ext` where no tile question asks stays `ext`)."""
        out = [self.real(w, stage) for _, w, stage in _walk(words)]
        for k in range(2, len(out)):
            if words[k] == EXTENT_WORD and words[k - 2] == "tile":
                extent = self._axis_extent(words[k - 1])
                out[k] = words[k] if extent is None else str(extent)
        return out

    def check(self, words: Sequence[str]) -> None:
        """Refuse a sentence whose words hold, as an identifier that is no name of its
        prompt, a word some name is read as (it could not be told from that name)."""
        for _, w, stage in _walk(words):
            idents = _IDENT.findall(w)
            own = self.axes.get(stage or (idents[0] if idents else ""), {})
            real = {p: n for n, p in own.items()} | self.to_real | self.numbers_real
            if self.tile_extents:
                real[EXTENT_WORD] = "a tile question's extent"
            for ident in idents:
                if ident not in self.to_place and ident not in own and ident in real:
                    raise LanguageError(f"word {w!r} holds {ident!r}, which is also the place of "
                                        f"name {real[ident]!r}: the sentence cannot be read by place")


def _walk(words: Sequence[str]):
    """(position, word, the stage whose read clause holds the word or None) over `words`."""
    stage, reading = None, 0
    for k, w in enumerate(words):
        if w in _CLAUSE_WORDS and reading != 1:
            reading = 1 if w == "read" else 0
            if w == "hw":
                stage = None
            yield k, w, None
            continue
        if k and words[k - 1] == "stage" and reading == 0:
            stage = w
        if reading == 1:  # the tensor a read clause reads
            reading = 2
            yield k, w, None
            continue
        yield k, w, stage if reading == 2 else None


class _AsWritten:
    """Names as their author wrote them: what a tokenizer without places reads."""

    def placed(self, word: str, after: str | None = None, stage: str | None = None) -> str:
        return word

    def placed_at(self, words: Sequence[str], k: int, word: str | None = None) -> str:
        return words[k] if word is None else word

    def placed_words(self, words: Sequence[str]) -> list[str]:
        return list(words)

    def real(self, word: str, stage: str | None = None) -> str:
        return word

    def real_words(self, words: Sequence[str]) -> list[str]:
        return list(words)

    def check(self, words: Sequence[str]) -> None:
        pass


AS_WRITTEN = _AsWritten()
