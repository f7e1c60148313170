"""Names by place: what a model reads for the tensors, stages and axes a sentence names.

A tensor sentence names tensors, stages and loop axes as the operator's author did
(`tile sumsq.k`, `read x i k`). A word-level vocabulary cannot hold every name an author
may choose, and a model that has learnt the questions of `C` and `i` has learnt nothing
about those of `sumsq` and `k`: on operators of no workload, whose names it never read,
it writes no well-formed sentence. A tokenizer with names by place reads each name by
where the prompt puts it instead:

- the inputs `in0 in1 ...` and the stages `s0 s1 ...`, in the order the prompt declares
  them (the ComputeDAG's order, producers first);
- the axes `a0 a1 ...`, in the order the read clauses first use them;
- every other identifier (`local`, `outer`, `fused`, `pack`, `ax1`, ...) as it is, and
  so is a name that is no identifier.

A name that is also a word of the language (a stage called `reduce`) is read by place
inside a compound word (`reduce.k` -> `s0.a1`) and, standing alone, where the language
puts a tensor or stage name: after `stage`, `input`, `read` or a question's kind
(`parallel reduce` -> `parallel s0`). Elsewhere the bare word is the language's own
(`stage reduce reduce sp` -> `stage s0 reduce sp`). So a row reduction whose stage is
called `reduce` is read as every other row reduction is.

A word is read identifier by identifier (`C.local.i.c` -> `s0.local.a0.c`,
`p*2+rr` -> `a2*2+a4`), so the vocabulary of place words is closed: the same few hundred
words for any operator. The map is a bijection built from the sentence's own prompt, so
`real(placed(w)) == w` and decoding needs nothing but the prompt.
"""
from __future__ import annotations

import re
from typing import Sequence

from ..errors import LanguageError
from .language import QUESTION_KEYWORDS, RESERVED_WORDS

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# the words after which the language writes a tensor or stage name, standing alone
_NAME_AFTER = frozenset(("stage", "input", "read", *QUESTION_KEYWORDS))


def _prompt_clauses(words: Sequence[str]):
    """(inputs, stages, index words of the reads) of the task prompt in `words`."""
    inputs, stages, indices = [], [], []
    try:
        start, end = words.index("task"), words.index("hw")
    except ValueError:
        return inputs, stages, indices
    k = start + 1
    while k < end:
        w = words[k]
        if w == "input":
            inputs.append(words[k + 1])
            k += 2
        elif w == "stage":
            stages.append(words[k + 1])
            k += 2
        elif w == "read":
            k += 2
            while k < end and words[k] not in ("read", "stage", "input"):
                indices.append(words[k])
                k += 1
        else:
            k += 1
    return inputs, stages, indices


def _readable(name: str) -> bool:
    """Can `name` be read by place? A name that is not an identifier is read as written."""
    return bool(_IDENT.fullmatch(name))


class PlaceNames:
    """The bijection between the names of one prompt and their place words."""

    def __init__(self, prompt: Sequence[str]):
        inputs, stages, indices = _prompt_clauses(list(prompt))
        self.to_place: dict[str, str] = {}
        for prefix, names in (("in", inputs), ("s", stages)):
            for k, name in enumerate(names):
                if _readable(name) and name not in self.to_place:
                    self.to_place[name] = f"{prefix}{k}"
        axes = 0
        for word in indices:
            for ident in _IDENT.findall(word):
                if _readable(ident) and ident not in self.to_place:
                    self.to_place[ident] = f"a{axes}"
                    axes += 1
        self.to_real = {p: n for n, p in self.to_place.items()}

    def placed(self, word: str, after: str | None = None) -> str:
        """`word` with every name replaced by its place. A word of the language standing
        alone is a name only where the word before it (`after`) is `stage`, `input`,
        `read` or a question's kind; elsewhere it stays the language's own."""
        if word in RESERVED_WORDS and after not in _NAME_AFTER:
            return word
        return _IDENT.sub(lambda m: self.to_place.get(m.group(0), m.group(0)), word)

    def placed_words(self, words: Sequence[str]) -> list[str]:
        """`words` (a sentence, or a fragment from a question's kind on) read by place,
        each after the word before it."""
        return [self.placed(w, words[k - 1] if k else None) for k, w in enumerate(words)]

    def real(self, word: str) -> str:
        """The inverse of `placed` (place words the prompt does not have stay as they are)."""
        return _IDENT.sub(lambda m: self.to_real.get(m.group(0), m.group(0)), word)

    def check(self, words: Sequence[str]) -> None:
        """Refuse a sentence whose words hold, as an identifier that is no name of its
        prompt, a word some name is read as (it could not be told from that name)."""
        for w in words:
            for ident in _IDENT.findall(w):
                if ident not in self.to_place and ident in self.to_real:
                    raise LanguageError(f"word {w!r} holds {ident!r}, which is also the place of "
                                        f"name {self.to_real[ident]!r}: the sentence cannot be read by place")


class _AsWritten:
    """Names as their author wrote them: what a tokenizer without places reads."""

    def placed(self, word: str, after: str | None = None) -> str:
        return word

    def placed_words(self, words: Sequence[str]) -> list[str]:
        return list(words)

    def real(self, word: str) -> str:
        return word

    def check(self, words: Sequence[str]) -> None:
        pass


AS_WRITTEN = _AsWritten()
