"""The tensor language: a schedule trace written as one sentence of words.

    <s> v4 task <task prompt> hw <hardware prompt> [quality <q>] sketch <id> <decisions> </s>

Task prompt (the ComputeDAG of the task's outputs, producers first):
    input A 1024 1024                                  a placeholder and its shape
    stage C reduce sp 1024 1024 rd 1024 read A i k read B k j
        kind (elem | reduce), spatial extents, reduce extents (reductions only), then
        for every distinct tensor read: the tensor's name and each index expression
        printed as one word (spaces removed: `p*2+rr`, `k//4*4+rc`).
Hardware prompt: `hw cpu avx512 cores 2 vec 16 l1 48K l2 2048K`; a GPU's names its
    architecture, SMs, caches and per-block limits: `hw cuda sm_90 sms 132 l1 256K
    l2 51200K threads 1024 shared 48K regs 65536 warp 32 vthread 8`.
Quality prompt (optional): `quality 0` says how fast the program is against the best one
    measured for its task (0: the best tier; tlmir.lm.quality). A model fine-tuned on
    sentences with it writes programs of the tier it is asked for.
Decisions, in trace order:
    tile C.i 1024 = 256 32 16 1   a tile question: name, extent, `=`, then the extent
                                  left after each factor, outermost first: the factors
                                  are 1024/256 = 4, 256/32 = 8, 32/16 = 2, 16/1 = 16
    at pad 1 root 2 conv.k.outer 3 conv.p.outer = 2
                                  a question whose options depend on earlier answers
                                  (compute location `at`) numbers them before `=`; the
                                  answer is the number of one of them
    parallel C 1 2 3 = 3          the fused-loop count lists its options (numbers) too
    vec C = 1   unroll C = 512    any other question: its words, `=`, one answer word

One version is spoken: v4 (the version word after <s>). Earlier versions wrote tile
answers as factors (v1), named `at` options without listing or numbering them (v2, v3);
each change is explained in docs/architecture.md. A sentence of any other version is
refused, never silently read; a model of an older version is retrained (docs/model.md).

Every word is one token of a word-level vocabulary (tlmir.lm.tokenizer). Answers parse
back to the types the space offers — tuples of ints for tiles, ints for numeric
choices, strings otherwise — so `sentence_to_trace(trace_to_sentence(task, hw, t)) == t`.
"""
from __future__ import annotations

import random
import re
import statistics
from typing import Any, Iterable, Sequence

from ..errors import LanguageError, TlmirError
from ..ir.dag import ComputeDAG
from ..ir.expr import TensorRead, walk
from ..ir.expr import expr_str
from ..ir.tensor import ComputeOp
from ..runtime.target import HardwareParams
from ..schedule.decider import Trace
from ..schedule.rules import question_keywords

VERSION = "v4"  # the one version this tlmir reads and writes
LISTED_KINDS = ("at", "parallel")  # questions that list their options before `=`
NUMBERED_KINDS = ("at",)  # ... numbered, and answered by the number
BOS, EOS = "<s>", "</s>"
QUESTION_KEYWORDS = question_keywords()  # what the rule sets ask (schedule.rules)
QUALITY = "quality"
STRUCTURAL_WORDS = (BOS, EOS, VERSION, "task", "hw", "sketch", "stage", "input", "read",
                    "sp", "rd", "elem", "reduce", "=", QUALITY)
RESERVED_WORDS = STRUCTURAL_WORDS + QUESTION_KEYWORDS
MAX_TOKENS = 1024

_INT = re.compile(r"-?\d+\Z")
# words a name may never be: they would make a sentence ambiguous to parse
_FORBIDDEN_NAMES = {BOS, EOS, "sketch", "=", "<pad>", "<unk>"}


def _is_int(word: str) -> bool:
    return bool(_INT.match(word))


def _name(name: str, what: str) -> str:
    if not name or any(c.isspace() for c in name) or name in _FORBIDDEN_NAMES or "=" in name:
        raise LanguageError(f"{what} name {name!r} cannot be written in a tensor sentence "
                            f"(it must be one word, without '=', and not one of "
                            f"{sorted(_FORBIDDEN_NAMES)})")
    return name


def _one_word(e) -> str:
    return "".join(expr_str(e).split())


# ------------------------------------------------------------------------ prompts

def task_prompt(task) -> list[str]:
    """`task` + one clause per stage of the task's ComputeDAG, producers first.
    `task` is a Task (anything with `.outputs`) or a list of output tensors."""
    outputs = getattr(task, "outputs", task)
    words = ["task"]
    for facts in ComputeDAG(outputs).stages:
        op = facts.op
        if not isinstance(op, ComputeOp):
            words += ["input", _name(op.name, "tensor")] + [str(int(d)) for d in op.shape]
            continue
        words += ["stage", _name(op.name, "stage"), "reduce" if op.reduce_axis else "elem", "sp"]
        words += [str(a.extent) for a in op.axis]
        if op.reduce_axis:
            words += ["rd"] + [str(a.extent) for a in op.reduce_axis]
        seen: set = set()
        for node in walk(op.body):
            if isinstance(node, TensorRead):
                clause = ("read", _name(node.tensor.name, "tensor"),
                          *(_one_word(i) for i in node.indices))
                if clause not in seen:
                    seen.add(clause)
                    words += clause
    return words


def hw_prompt(hw: HardwareParams) -> list[str]:
    """`hw cpu avx512 cores 2 vec 16 l1 48K l2 2048K`, or a GPU's `hw cuda sm_90 sms 132 ...`."""
    if hw.kind == "cuda":
        return ["hw", "cuda", _name(hw.isa, "architecture"), "sms", str(hw.cores), "l1", f"{hw.l1_kb}K",
                "l2", f"{hw.l2_kb}K", "threads", str(hw.max_threads), "shared", f"{hw.max_shared_kb}K",
                "regs", str(hw.max_regs), "warp", str(hw.warp_size), "vthread", str(hw.max_vthread)]
    return ["hw", _name(hw.kind, "hardware kind"), _name(hw.isa, "isa"), "cores", str(hw.cores),
            "vec", str(hw.vector_lanes), "l1", f"{hw.l1_kb}K", "l2", f"{hw.l2_kb}K"]


def prefix_words(task, hw: HardwareParams, quality: int | None = None) -> list[str]:
    """Everything a sentence says before the decisions, ending with `sketch`; with
    `quality`, the quality prompt asks for a program of that tier."""
    asked = [] if quality is None else [QUALITY, str(int(quality))]
    return [BOS, VERSION] + task_prompt(task) + hw_prompt(hw) + asked + ["sketch"]


# ------------------------------------------------------------------------ decisions

def _question_words(question: str) -> list[str]:
    words = question.split()
    if not words or words[0] not in QUESTION_KEYWORDS:
        raise LanguageError(f"question {question!r} is not of a kind the language can "
                            f"write (kinds: {', '.join(QUESTION_KEYWORDS)})")
    if len(words) != 2 or words[1] in _FORBIDDEN_NAMES or "=" in words[1]:
        raise LanguageError(f"question {question!r} must be '<kind> <name>' with a name "
                            f"that is one word, without '=', and not one of {sorted(_FORBIDDEN_NAMES)}")
    return words


def _answer_word(answer: Any, question: str) -> str:
    if isinstance(answer, bool) or not isinstance(answer, (int, str)):
        raise LanguageError(f"answer {answer!r} to {question!r} must be an int or a string")
    word = str(answer)
    if isinstance(answer, str) and (not word or any(c.isspace() for c in word) or _is_int(word)
                                    or word in RESERVED_WORDS or word in _FORBIDDEN_NAMES):
        raise LanguageError(f"answer {answer!r} to {question!r} cannot be written as one "
                            f"unambiguous word")
    return word


def tile_words(factors: Sequence[int]) -> list[str]:
    """A tile answer's words: the extent left after each factor, outermost first."""
    left = 1
    for f in factors:
        left *= f
    out = []
    for f in factors:
        left //= f
        out.append(str(left))
    return out


def decision_words(question: str, answer: Any, extent: int | None = None,
                   options: Sequence | None = None) -> tuple[list[str], list[str]]:
    """(question words ending with '=', answer words) of one decision.

    A tile question's words carry the extent (the product of the answer when `extent`
    is None); its answer words are `tile_words`. Any other answer is one word; the words
    of an `at` / `parallel` question end with its `options`, which must be given."""
    qwords = _question_words(question)
    if qwords[0] in LISTED_KINDS:
        if options is None:
            raise LanguageError(f"the options of {question!r} were not given (writing a sentence "
                                f"needs the task, to replay the trace)")
        listed = [_answer_word(o, question) for o in options]
        word = _answer_word(answer, question)
        if word not in listed:
            raise LanguageError(f"answer {answer!r} to {question!r} is not among its options {listed}")
        if qwords[0] in NUMBERED_KINDS:
            numbered = [w for i, o in enumerate(listed, 1) for w in (str(i), o)]
            return qwords + numbered + ["="], [str(listed.index(word) + 1)]
        return qwords + listed + ["="], [word]
    if qwords[0] == "tile":
        if not isinstance(answer, (tuple, list)) or not answer or not all(
                isinstance(f, int) and not isinstance(f, bool) and f >= 1 for f in answer):
            raise LanguageError(f"answer {answer!r} to {question!r} must be a tuple of positive ints")
        prod = 1
        for f in answer:
            prod *= f
        if extent is None:
            extent = prod
        elif extent != prod:
            raise LanguageError(f"answer {tuple(answer)} to {question!r} multiplies to {prod}, "
                                f"not the extent {extent}")
        return qwords + [str(extent), "="], tile_words(answer)
    return qwords + ["="], [_answer_word(answer, question)]


def answer_words(question: str, options: Sequence) -> list[list[str]]:
    """Each option of `question` as its answer words (for constrained decoding)."""
    if _question_words(question)[0] in NUMBERED_KINDS:
        return [[str(i)] for i in range(1, len(options) + 1)]
    out = []
    for o in options:
        if isinstance(o, (tuple, list)):
            out.append(tile_words(o))
        else:
            out.append([_answer_word(o, question)])
    return out


# ------------------------------------------------------------------------ sentences

def trace_words(trace: Trace, options: dict) -> list[str]:
    """`<id> <decisions>` (the words between `sketch` and `</s>`); `options` maps a question
    to the options the space offered it (see `trace_options`)."""
    if isinstance(trace.sketch, bool) or not isinstance(trace.sketch, int) or trace.sketch < 0:
        raise LanguageError(f"sketch id {trace.sketch!r} must be a non-negative int")
    words = [str(trace.sketch)]
    for question, answer in trace.decisions:
        q, a = decision_words(question, answer, options=options.get(question))
        words += q + a
    return words


def trace_options(task, hw: HardwareParams, trace: Trace) -> dict:
    """Question -> the options the space of `task` on `hw` offers it when `trace` replays."""
    from ..schedule.decider import ReplayDecider
    from ..schedule.space import SearchSpace

    class _Recorder(ReplayDecider):
        def _decide(self, question: str, options: list):
            answer = super()._decide(question, options)
            # an answer that only replays (schedule.decider.Decider.choice) is listed too
            seen[question] = options if answer in options else options + [answer]
            return answer

    seen: dict = {}
    try:
        SearchSpace(getattr(task, "outputs", task), hw).apply(trace.sketch, _Recorder(trace))
    except TlmirError as e:
        raise LanguageError(f"trace does not replay in the space of the task, so its options "
                            f"are unknown: {e}") from None
    return seen


def trace_to_sentence(task, hw: HardwareParams, trace: Trace, quality: int | None = None) -> str:
    """The sentence of a trace of `task` on `hw` (the trace is replayed to learn the options
    its questions were offered), with a quality prompt if `quality` is given."""
    return " ".join(prefix_words(task, hw, quality) + trace_words(trace, trace_options(task, hw, trace))
                    + [EOS])


def _words(sentence) -> list[str]:
    if isinstance(sentence, str):
        return sentence.split()
    if isinstance(sentence, (list, tuple)) and all(isinstance(w, str) for w in sentence):
        return list(sentence)
    raise LanguageError(f"a sentence is a string or a list of words, not {type(sentence).__name__}")


def _show(words: Sequence[str], n: int = 12) -> str:
    text = " ".join(words[:n])
    return text + (" ..." if len(words) > n else "")


def parse_sentence(sentence) -> tuple[list[str], Trace]:
    """(prompt words (from `task` up to `sketch`, exclusive), Trace)."""
    words = _words(sentence)
    if not words:
        raise LanguageError("empty sentence")
    if words[0] != BOS:
        raise LanguageError(f"sentence does not start with {BOS}: {_show(words)!r}")
    if words[-1] != EOS:
        raise LanguageError(f"sentence does not end with {EOS} (truncated?): ...{' '.join(words[-8:])!r}")
    if len(words) < 3 or not re.match(r"v\d+\Z", words[1]):
        raise LanguageError(f"sentence has no version word after {BOS} (this tlmir speaks "
                            f"{VERSION}): {_show(words)!r}")
    if words[1] != VERSION:
        raise LanguageError(f"sentence is version {words[1]}, this tlmir speaks only {VERSION} "
                            f"(docs/model.md: retraining a model of an older version)")
    if words[2] != "task":
        raise LanguageError(f"expected 'task' after the version, got {words[2]!r}")
    try:
        s = words.index("sketch", 3)
    except ValueError:
        raise LanguageError(f"sentence has no 'sketch' word: {_show(words)!r}") from None
    prompt = words[2:s]
    if "hw" not in prompt:
        raise LanguageError("sentence has no hardware prompt ('hw ...') before 'sketch'")
    body = words[s + 1:-1]
    if not body or not _is_int(body[0]) or int(body[0]) < 0:
        raise LanguageError(f"expected a sketch id after 'sketch', got {body[0] if body else EOS!r}")
    return prompt, Trace(int(body[0]), _parse_decisions(body[1:], s + 2))


def _parse_tile(question: str, extent: int, answer: list[str], where: str) -> tuple:
    """The factors of a tile answer's words, or a LanguageError saying what is wrong."""
    nums = [int(x) for x in answer]
    if not nums or any(f < 1 for f in nums):
        raise LanguageError(f"{where}: tile {question!r} needs positive ints after '=', "
                            f"got {_show(answer + ['...'], 6)!r}")
    factors, left = [], extent
    for r in nums:
        if left % r:
            raise LanguageError(f"{where}: tile {question!r} {extent} = {' '.join(answer)}: "
                                f"{r} does not divide the {left} left before it")
        factors.append(left // r)
        left = r
    if left != 1:
        raise LanguageError(f"{where}: tile {question!r} {extent} = {' '.join(answer)} leaves "
                            f"{left}, not 1, after its last factor")
    return tuple(factors)


def _parse_decisions(w: list[str], offset: int) -> list:
    decisions, p, n = [], 0, len(w)
    while p < n:
        kw = w[p]
        where = f"word {offset + p}"
        if kw not in QUESTION_KEYWORDS:
            raise LanguageError(f"{where}: expected a question ({', '.join(QUESTION_KEYWORDS)}), "
                                f"got {kw!r} in {_show(w[p:], 8)!r}")
        qlen = 3 if kw == "tile" else 2
        head = w[p:p + qlen]
        eq = p + qlen                     # where '=' must be
        listed = None
        if kw in LISTED_KINDS:  # the options come before '='
            while eq < n and w[eq] != "=" and w[eq] not in RESERVED_WORDS:
                eq += 1
            listed = w[p + qlen:eq]
        if len(head) < qlen or eq >= n or w[eq] != "=":
            raise LanguageError(f"{where}: decision {_show(w[p:eq + 1], 8)!r} has no '=' "
                                f"after its question (expected "
                                f"'{'tile <stage.axis> <extent>' if kw == 'tile' else kw + ' <name>'}"
                                f"{' <options>' if listed is not None else ''} =')")
        if listed == []:
            raise LanguageError(f"{where}: question {_show(w[p:eq + 1], 8)!r} lists no "
                                f"options before '='")
        name = head[1]
        if name in _FORBIDDEN_NAMES:
            raise LanguageError(f"{where}: question {kw!r} names a reserved word {name!r}")
        question = f"{kw} {name}"
        numbered = kw in NUMBERED_KINDS
        if numbered:
            listed = _numbered_options(listed, question, where)
        a = eq + 1
        if kw == "tile":
            if not _is_int(head[2]) or int(head[2]) < 1:
                raise LanguageError(f"{where}: tile extent {head[2]!r} of {question!r} is not a positive int")
            e = a
            while e < n and _is_int(w[e]):
                e += 1
            decisions.append((question, _parse_tile(question, int(head[2]), w[a:e], where)))
            p = e
        else:
            if a >= n:
                raise LanguageError(f"{where}: decision {question!r} has no answer after '='")
            word = w[a]
            if word in RESERVED_WORDS or word in _FORBIDDEN_NAMES:
                raise LanguageError(f"{where}: decision {question!r} has no answer after '=' "
                                    f"(got the reserved word {word!r})")
            if numbered:
                if not _is_int(word) or not 1 <= int(word) <= len(listed):
                    raise LanguageError(f"{where}: {question!r} answers {word!r}, not the number of "
                                        f"one of the {len(listed)} options it lists")
                word = listed[int(word) - 1]
            elif listed is not None and word not in listed:
                raise LanguageError(f"{where}: {question!r} answers {word!r}, not one of the "
                                    f"options it lists ({' '.join(listed)})")
            decisions.append((question, int(word) if _is_int(word) else word))
            p = a + 1
    return decisions


def _numbered_options(listed: list[str], question: str, where: str) -> list[str]:
    """The options of a numbered list `1 a 2 b ...`, or a LanguageError."""
    if len(listed) % 2 or any(listed[i] != str(i // 2 + 1) for i in range(0, len(listed), 2)):
        raise LanguageError(f"{where}: {question!r} must number its options 1 2 3 ... in order "
                            f"(`1 <option> 2 <option> ...`), got {_show(listed, 8)!r}")
    return listed[1::2]


def sentence_to_trace(sentence) -> Trace:
    """The trace a sentence describes (the prompt is not needed to read it)."""
    return parse_sentence(sentence)[1]


# ------------------------------------------------------------------------ statistics

def sentence_lengths(tasks: Iterable, hw: HardwareParams, n_per_task: int = 4, seed: int = 0,
                     every_sketch: bool = False) -> list[int]:
    """Words (= tokens) of random sentences of each task: `n_per_task` random traces,
    plus one per sketch with `every_sketch` (catches the longest sketch)."""
    from ..schedule.decider import RandomDecider
    from ..schedule.space import SearchSpace
    rng = random.Random(seed)
    out = []
    for task in tasks:
        space = SearchSpace(task.outputs, hw)
        prefix = len(prefix_words(task, hw))
        traces = [space.sample(rng)[1] for _ in range(n_per_task)]
        if every_sketch:
            traces += [space.apply(k, RandomDecider(rng))[1] for k in range(len(space.sketches))]
        out += [prefix + len(trace_words(t, trace_options(task, hw, t))) + 1 for t in traces]
    return out


def length_summary(lengths: Sequence[int]) -> dict:
    """min / median / p95 / max / mean of sentence lengths."""
    if not lengths:
        return {"n": 0}
    s = sorted(lengths)
    return {"n": len(s), "min": s[0], "median": statistics.median(s),
            "p95": s[min(len(s) - 1, int(0.95 * len(s)))], "max": s[-1],
            "mean": round(statistics.fmean(s), 1)}
