"""A word-level tokenizer for tensor sentences (`tokenizers` WordLevel + WhitespaceSplit).

Ids 0..3 are the special tokens <pad> <unk> <s> </s>, then the reserved words of the
language, then every other word in a fixed order (numbers by value, then names).
The vocabulary is enumerated from the answer domains of the schedule spaces, never from
what a sample happened to contain (`language_words`):
- the hardware prompt of every CPU class at every core count (`target.hardware_variants`)
  and of this host;
- for every task, under the hardware whose rules differ (few and many cores, AVX2 and
  AVX-512): its prompt, every sketch id, every question and the words of every option
  any question offers (an `OptionRecorder` walks each sketch, going round the options of
  each question until it has taken every one and finds nothing new);
- every integer 0..1024 and every divisor of every extent of the tasks (tile answers).
So no valid decision of those tasks is <unk>, and a rule added later enters the
vocabulary when the tokenizer is rebuilt (tests/test_vocabulary.py fails until then).
For a GPU (`hw` of kind cuda: `tlmir tokenizer build --target cuda:sm_90`) the same walk
covers the GPU rules' spaces and every GPU class's prompt instead: a vocabulary of its
own, so the shipped CPU models' ids never change.
With `places`, the vocabulary holds names by place (tlmir.lm.place_names): `in0 s1 i0`
for the tensors, stages and axes a prompt declares, so any operator's names are words it
has, and a sentence is encoded through the map its own prompt gives. The word `<places>`
in the vocabulary says so (and changes its hash); `<numbers>` beside it says the prompt's
extents above 1024 are read by place too (`n0 n1 ...`), so no operator's extent is
`<unk>`. A tokenizer built with places has both; `<extents>` (built with `extents`) says
a tile question's extent that is the prompt's extent of its axis reads `ext`, so no
sentence copies a number from its prompt.
Saved as one JSON file (`tokenizers`' own format); `hash` identifies the vocabulary, to
check a checkpoint matches.
"""
from __future__ import annotations

import hashlib
import json
import os
import random
from typing import Iterable, Sequence

from ..errors import LanguageError
from ..runtime.target import GPU_CLASSES, HardwareParams, gpu_variants, hardware_variants, host_hardware
from ..schedule.decider import Decider
from .language import RESERVED_WORDS, VERSION, _is_int, decision_words, hw_prompt, prefix_words
from .place_names import AS_WRITTEN, EXTENT_WORD, LARGEST_WORD_NUMBER, NUMBER_PLACES, PlaceNames

PAD, UNK, BOS, EOS = "<pad>", "<unk>", "<s>", "</s>"
SPECIAL = (PAD, UNK, BOS, EOS)
PLACES = "<places>"  # in a vocabulary: it reads names by place
NUMBERS = "<numbers>"  # in a vocabulary: it reads a prompt's large extents by place
EXTENTS = "<extents>"  # in a vocabulary: it reads a tile question's extent as `ext` where it is the prompt's
SMALL_INTS = range(0, LARGEST_WORD_NUMBER + 1)
# the hardware whose rules offer different sketches and options (rfactor depends on the
# core count, vectorization on the lanes)
RULE_HARDWARE = (HardwareParams("cpu", "avx512", 2, 16, 32, 1024),
                 HardwareParams("cpu", "avx2", 64, 8, 32, 512))
# ... of the GPU rules (cross-thread reductions depend on the SM count)
GPU_RULE_HARDWARE = (GPU_CLASSES["sm_86"], GPU_CLASSES["sm_90"])


class OptionRecorder(Decider):
    """Answers at random but records the words of every option offered at every question.

    `taken` (option -> times taken, per question, shared across walks of one sketch)
    makes it pick, at every question but tile sizes, among the options taken least
    often, so repeated walks go round the choices that change the structure later
    questions see (compute locations, parallel depth). Tile sizes are random, or the
    smallest / largest factorization (`tile_mode`: outer or inner loops of extent 1),
    which change whether a `vec` question is asked. `new` counts the options this walk
    offered, or took, for the first time."""

    TILE_MODES = ("random", "outer-small", "random", "outer-large")

    def __init__(self, rng: random.Random, words: set, taken: dict | None = None,
                 tile_mode: str = "random"):
        super().__init__()
        self.rng, self.words, self.tile_mode = rng, words, tile_mode
        self.taken = taken if taken is not None else {}
        self.new = 0

    def _decide(self, question: str, options: list):
        counts = self.taken.setdefault(question, {})
        for opt in options:
            if opt not in counts:
                counts[opt] = 0
                self.new += 1
                q, a = decision_words(question, opt, options=options)
                self.words.update(q)
                self.words.update(a)
        if question.startswith("tile "):  # every factorization is recorded already
            if self.tile_mode == "outer-small":  # outer loops of extent 1
                return min(options)
            if self.tile_mode == "outer-large":
                return max(options)
            return self.rng.choice(options)
        least = min(counts[o] for o in options)
        pick = self.rng.choice([o for o in options if counts[o] == least])
        self.new += counts[pick] == 0
        counts[pick] += 1
        return pick

    def untaken(self) -> int:
        """Options (tile sizes aside) offered in some walk but never taken yet."""
        return sum(c == 0 for q, counts in self.taken.items() if not q.startswith("tile ")
                   for c in counts.values())


def _divisors(n: int) -> set[int]:
    out = set()
    d = 1
    while d * d <= n:
        if n % d == 0:
            out.update((d, n // d))
        d += 1
    return out


def space_words(task, hw: HardwareParams, samples_per_sketch: int = 2, seed: int = 0,
                max_walks: int = 64, patience: int = 3, places: bool = False) -> set[str]:
    """Every word a sentence of `task` on `hw` can contain (see the module docstring):
    each sketch is walked by an OptionRecorder at least `samples_per_sketch` times, until
    every option offered (tile sizes aside) has been taken once and `patience` walks in a
    row find nothing new (at most `max_walks`). With `places`, the words as a tokenizer
    with names by place reads them."""
    from ..schedule.space import SearchSpace
    words = set(prefix_words(task, hw))
    space = SearchSpace(task.outputs, hw)
    words.update(str(k) for k in range(len(space.sketches)))
    rng = random.Random(seed)
    for k in range(len(space.sketches)):
        taken: dict = {}
        quiet = 0  # walks in a row that found nothing new
        for walk in range(max_walks):
            rec = OptionRecorder(rng, words, taken, OptionRecorder.TILE_MODES[walk % 4])
            space.apply(k, rec)
            quiet = 0 if rec.new else quiet + 1
            if walk + 1 >= samples_per_sketch and quiet >= patience and not rec.untaken():
                break
    words |= extent_words(task, {int(w) for w in words if _is_int(w)})
    words.update(str(i) for i in SMALL_INTS)
    if places:
        prompt = prefix_words(task, hw)
        names = PlaceNames(prompt, numbers=True)
        return set(names.placed_words(prompt)) | {names.placed(w) for w in words - set(prompt)} | names.words
    return words


def extent_words(task, more: Iterable[int] = ()) -> set[str]:
    """Every extent of `task` (spatial, reduce, the fused reduce extent rfactor splits) and
    of `more`, with all their divisors: the numbers its tile questions and answers hold."""
    from ..ir.dag import ComputeDAG
    extents = set(more)
    for st in ComputeDAG(task.outputs).stages:
        extents.update(int(d) for d in st.op.shape)
        red = 1
        for a in st.op.reduce_axis:
            extents.add(a.extent)
            red *= a.extent
        extents.add(red)
    return {str(d) for e in extents if e > 0 for d in _divisors(e)}


def word_order(word: str) -> tuple:
    """The vocabulary's order of words: numbers by value, then the rest by name."""
    return (0, int(word), "") if _is_int(word) else (1, 0, word)


def _prompt_end(words: Sequence[str]) -> int:
    """Where a sentence's decisions start: the position of its first `sketch` (0 if none;
    the sketch id that follows it is the first answer)."""
    return words.index("sketch") if "sketch" in words else 0


class Tokenizer:
    """A `tokenizers.Tokenizer` (WordLevel, WhitespaceSplit) with the language's helpers."""

    def __init__(self, hf):
        self.hf = hf
        self._vocab: dict[str, int] = hf.get_vocab(with_added_tokens=True)
        self._words: list[str] = [""] * len(self._vocab)
        for w, i in self._vocab.items():
            if i >= len(self._words):
                raise LanguageError(f"tokenizer vocabulary is not dense (id {i} of {len(self._vocab)})")
            self._words[i] = w
        for i, w in enumerate(SPECIAL):
            if self._vocab.get(w) != i:
                raise LanguageError(f"tokenizer has {w!r} at id {self._vocab.get(w)}, expected {i}")
        self.pad_id, self.unk_id, self.bos_id, self.eos_id = range(4)
        self.hash = hashlib.sha256("\n".join(self._words).encode()).hexdigest()[:16]
        self.places = PLACES in self._vocab
        self.numbers = NUMBERS in self._vocab
        self.extents = EXTENTS in self._vocab
        if VERSION not in self._vocab:
            raise LanguageError(f"tokenizer does not speak tensor language {VERSION} (a model of an "
                                f"older version is retrained: docs/model.md)")

    # --- construction
    @classmethod
    def from_words(cls, words: Iterable[str]) -> "Tokenizer":
        from tokenizers import AddedToken, Tokenizer as HF, models, pre_tokenizers
        rest = sorted({w for w in words if w not in SPECIAL and w not in RESERVED_WORDS}, key=word_order)
        for w in rest:
            if not w or any(c.isspace() for c in w):
                raise LanguageError(f"vocabulary word {w!r} is not a single word")
        reserved = [w for w in RESERVED_WORDS if w not in SPECIAL]
        order = list(SPECIAL) + reserved + rest
        hf = HF(models.WordLevel({w: i for i, w in enumerate(order)}, unk_token=UNK))
        hf.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
        hf.add_special_tokens([AddedToken(w, special=True, single_word=True) for w in SPECIAL])
        return cls(hf)

    def extended(self, words: Iterable[str]) -> "Tokenizer":
        """This vocabulary with `words` it lacks appended (ids of the old words unchanged,
        so a model's embedding grows by rows: `model.GPT.grow_vocab`)."""
        from tokenizers import AddedToken, Tokenizer as HF, models, pre_tokenizers
        new = [w for w in dict.fromkeys(words) if w not in self._vocab]
        for w in new:
            if not w or any(c.isspace() for c in w):
                raise LanguageError(f"vocabulary word {w!r} is not a single word")
        hf = HF(models.WordLevel({w: i for i, w in enumerate(self._words + new)}, unk_token=UNK))
        hf.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
        hf.add_special_tokens([AddedToken(w, special=True, single_word=True) for w in SPECIAL])
        return Tokenizer(hf)

    def save(self, path: str) -> None:
        try:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            self.hf.save(path)
        except OSError as e:
            raise LanguageError(f"cannot write tokenizer file {path!r}: {e}") from None

    @classmethod
    def load(cls, path: str) -> "Tokenizer":
        from tokenizers import Tokenizer as HF
        if not os.path.isfile(path):
            raise LanguageError(f"tokenizer file {path!r} does not exist")
        try:
            with open(path) as fh:
                json.load(fh)
            hf = HF.from_file(path)
        except Exception as e:  # json / tokenizers raise assorted types for a bad file
            raise LanguageError(f"tokenizer file {path!r} is corrupt: {type(e).__name__}: "
                                f"{str(e)[:200]}") from None
        if type(hf.model).__name__ != "WordLevel":
            raise LanguageError(f"tokenizer file {path!r} is not a word-level tokenizer")
        return cls(hf)

    # --- use
    @property
    def vocab_size(self) -> int:
        return len(self._words)

    def id(self, word: str) -> int:
        return self._vocab.get(word, self.unk_id)

    def word(self, id: int) -> str:
        if not 0 <= id < len(self._words):
            raise LanguageError(f"token id {id} is outside the vocabulary (size {self.vocab_size})")
        return self._words[id]

    def covers(self, words: Iterable[str]) -> list[str]:
        """The words (each once, in order) that are not in the vocabulary."""
        missing: dict[str, None] = {}
        for w in words:
            if w not in self._vocab:
                missing.setdefault(w, None)
        return list(missing)

    def names(self, prompt: Sequence[str]):
        """How this tokenizer reads the names of a sentence whose words begin with `prompt`:
        by place (a PlaceNames) or as written (AS_WRITTEN)."""
        return PlaceNames(prompt, self.numbers, self.extents) if self.places else AS_WRITTEN

    def _placed(self, words: str | Sequence[str], names=None) -> str | list[str]:
        """`words` as this vocabulary spells them: as they are, or with the names of a
        whole sentence (`names=None`: its own prompt's) or of `names` by place."""
        if not self.places:
            return words
        wl = words.split() if isinstance(words, str) else list(words)
        if names is None:
            names = PlaceNames(wl, self.numbers, self.extents)
            names.check(wl)
        return names.placed_words(wl)

    def encode(self, words: str | Sequence[str], strict: bool = False, names=None) -> list[int]:
        """Token ids of a sentence (string) or of a list of words; unknown words become
        <unk>, or raise LanguageError with `strict`. With names by place, a whole sentence
        is read through its own prompt's names, a fragment through `names` (`self.names`)."""
        words = self._placed(words, names)
        if isinstance(words, str):
            ids = self.hf.encode(words).ids
            wl = words.split() if strict else None
        else:
            wl = list(words)
            ids = [self._vocab.get(w, self.unk_id) for w in wl]
        if strict and len(ids) > 1 and ids[0] == self.bos_id and wl[1] != VERSION:
            raise LanguageError(f"a sentence of version {wl[1]!r} cannot be encoded (this tlmir "
                                f"speaks tensor language {VERSION} only)")
        missing = self.covers(wl) if strict and self.unk_id in ids else []  # "<unk>" itself is a word
        if missing:
            raise LanguageError(f"unknown word{'s' if len(missing) > 1 else ''} "
                                f"{', '.join(map(repr, missing[:10]))} (not in the tokenizer's "
                                f"vocabulary of {self.vocab_size})")
        return ids

    def lacking(self, sentence: str) -> list[str]:
        """The words of a whole sentence, as this vocabulary reads them, that it lacks."""
        return self.covers(self._placed(sentence.split()))

    def unknown_decisions(self, sentence: str) -> list[str]:
        """The words after the prompt (after the first `sketch`) that are not in the
        vocabulary: a demonstration with any cannot be learnt from."""
        words = self._placed(sentence.split())
        return self.covers(words[_prompt_end(words):])

    def encode_demonstration(self, sentence: str) -> list[int]:
        """Token ids of a whole sentence for training. Prompt words (task and hardware
        facts, up to `sketch`) the vocabulary lacks become <unk>, as the generator reads a
        prompt (a host whose L2 size the model never saw: 1024K against its 2048K); an
        unknown decision word or another language version raises LanguageError."""
        words = self._placed(sentence.split())
        end = _prompt_end(words)
        return self.encode([w if not 2 <= k < end or w in self._vocab else UNK  # after <s> and the version
                            for k, w in enumerate(words)], strict=True, names=AS_WRITTEN)

    def decode(self, ids: Iterable[int]) -> str:
        """The words of `ids` joined by spaces (<pad> dropped)."""
        return " ".join(self.word(int(i)) for i in ids if int(i) != self.pad_id)

    def __repr__(self) -> str:
        return f"Tokenizer({self.vocab_size} words, hash {self.hash})"


def language_words(tasks: Iterable, hw: HardwareParams | None = None, samples_per_sketch: int = 2,
                   seed: int = 0, places: bool = False, extents: bool = False) -> set[str]:
    """Every word of the language of `tasks` (see the module docstring); `hw` (default:
    this host) joins the hardware whose rules are walked, and a GPU `hw` makes it the
    language of GPU targets; `places`: names by place; `extents` (with places): tile
    questions' extents by reference."""
    if extents and not places:
        raise LanguageError("a tokenizer reads tile extents by reference (`extents`) only with names by place")
    host = hw or host_hardware()
    gpu = host.kind == "cuda"
    words: set[str] = set(SPECIAL) | set(RESERVED_WORDS)
    if places:
        words |= {PLACES, NUMBERS} | {f"n{k}" for k in range(NUMBER_PLACES)}
    if extents:
        words |= {EXTENTS, EXTENT_WORD}
    for variant in (*(gpu_variants() if gpu else hardware_variants()), host):
        words.update(hw_prompt(variant))
    words.update(str(i) for i in SMALL_INTS)
    rule_hw = list(dict.fromkeys((*(GPU_RULE_HARDWARE if gpu else RULE_HARDWARE), host)))
    for task in tasks:
        for variant in rule_hw:
            words |= space_words(task, variant, samples_per_sketch, seed, places=places)
    return words


def build_tokenizer(tasks: Iterable, hw: HardwareParams | None = None, samples_per_sketch: int = 2,
                    seed: int = 0, places: bool = False, extents: bool = False) -> Tokenizer:
    """The tokenizer of the language of `tasks` (`language_words`)."""
    return Tokenizer.from_words(language_words(tasks, hw, samples_per_sketch, seed, places, extents))


def _share_words(args: tuple) -> set[str]:
    """Worker: the language words of tasks start, start + step, ... of a split."""
    from .novel_tasks import split_tasks_or_novel
    split, start, step, hw, places, extents = args
    return language_words(split_tasks_or_novel(split)[start::step], hw, places=places, extents=extents)


def build_splits_tokenizer(splits: Sequence[str] = ("train", "held-out"), hw: HardwareParams | None = None,
                           workers: int = 0, places: bool = False, extents: bool = False) -> Tokenizer:
    """The tokenizer of the language of every task of `splits`, walked in `workers`
    processes. With `places` (names by place) the novel tasks' words join: names by place
    are the words any operator is read with, and those tasks hold shapes and programs of
    no network."""
    import multiprocessing as mp
    workers = workers or os.cpu_count() or 1
    hw = hw or host_hardware()
    splits = (*splits, "novel") if places else tuple(splits)
    shares = [(split, i, workers, hw, places, extents) for split in splits for i in range(workers)]
    with mp.get_context("spawn").Pool(workers) as pool:
        parts = pool.map(_share_words, shares)
    return Tokenizer.from_words(set().union(*parts))
