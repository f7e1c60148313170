"""LM-driven schedule generation (paper Alg. 2, constrained).

Each candidate runs the ordinary sketch code in its own thread with an `LMDecider`.
At every question the decider hands the question's words and the words of every
valid answer to the batcher and waits. The batcher advances all waiting candidates
together: it feeds the question words through the model (one ragged KV-cache step
for the whole batch), then samples the answer word by word with the logits masked to
the words that continue some valid answer (factor by factor for tile sizes). Every
generated program is therefore valid by construction. Two ways to measure how well the
model has learned the language itself rather than leaning on the mask:
`generate(..., masked=False)` keeps the sketch code asking the questions (as the paper's
Alg. 2 does) but samples each answer from the whole vocabulary, and `unconstrained`
lets the model write the entire sentence, question words included.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import torch

from ..errors import LanguageError, TlmirError
from ..runtime.target import HardwareParams
from ..schedule.decider import Decider, Trace
from ..schedule.space import SearchSpace
from .language import (answer_words, decision_words, prefix_words, sentence_to_trace,
                       trace_to_sentence)
from .prompt_hardware import prompt_hardware
from .quality import prompt_tier


@dataclass
class Sampling:
    temperature: float = 1.0
    top_k: int = 0        # 0: no top-k cut
    top_p: float = 1.0    # 1: no nucleus cut


@dataclass
class _Request:
    question: list            # token ids to feed (the question words, ending in "=")
    options: list             # each valid answer as a list of token ids
    done: threading.Event = field(default_factory=threading.Event)
    choice: int = -1          # index into options; -1: the (unmasked) answer is not among them
    answer: list = field(default_factory=list)   # the token ids sampled


class LMDecider(Decider):
    """Answers questions by asking the batcher (one instance per candidate thread)."""

    def __init__(self, batcher: "_Batcher", row: int, kept: dict | None = None):
        super().__init__()
        self.batcher, self.row = batcher, row
        self.kept = kept or {}  # question -> the answer it keeps where the space still offers it

    def tile(self, question: str, extent: int, parts: int, max_innermost: int) -> tuple:
        self._extent = extent
        try:
            return super().tile(question, extent, parts, max_innermost)
        finally:
            self._extent = None

    _extent = None

    def _decide(self, question: str, options: list):
        if question in self.kept and self.kept[question] in options:
            options = [self.kept[question]]  # fed through the model all the same: its cache follows
        tok, names = self.batcher.tok, self.batcher.names
        qwords, _ = decision_words(question, options[0], self._extent, options)
        req = _Request(tok.encode(qwords, names=names),
                       [tok.encode(w, names=names) for w in answer_words(question, options)])
        self.batcher.submit(self.row, req)
        if req.choice < 0:
            raise LanguageError(f"question {question!r}: the model answered "
                                f"{' '.join(names.real(tok.word(i)) for i in req.answer)!r}, "
                                f"not one of the space's answers")
        return options[req.choice]


class _Batcher:
    """Runs the model for all waiting candidates at once."""

    def __init__(self, model, tok, names, sampling: Sampling, rng: torch.Generator):
        self.model, self.tok, self.sampling, self.rng = model, tok, sampling, rng
        self.names = names  # how the tokenizer reads this task's names (Tokenizer.names)
        self.cv = threading.Condition()
        self.pending: dict[int, _Request] = {}
        self.active: set[int] = set()
        self.decisions = 0
        self.logprob: dict[int, float] = {}  # row -> log-likelihood of its tokens so far

    def submit(self, row: int, req: _Request) -> None:
        with self.cv:
            self.pending[row] = req
            self.cv.notify_all()
        req.done.wait()

    def finish(self, row: int) -> None:
        with self.cv:
            self.active.discard(row)
            self.cv.notify_all()

    def wait_all_blocked(self) -> dict:
        with self.cv:
            self.cv.wait_for(lambda: set(self.pending) >= self.active)
            batch, self.pending = self.pending, {}
            return batch

    def pick(self, logits: torch.Tensor, allowed: list[int]) -> int:
        return sample_token(logits, allowed, self.sampling, self.rng)

    def add_logprob(self, logits: torch.Tensor, rows: list[int], tokens: list[int]) -> None:
        """Add to each row the log-likelihood of the token it picked from its row of `logits`
        under the unmasked model: one log-softmax per step, not per token."""
        if rows:
            picked = torch.log_softmax(logits[rows].float(), -1)[torch.arange(len(rows)), tokens]
            for r, lp in zip(rows, picked.tolist()):
                self.logprob[r] = self.logprob.get(r, 0.0) + lp


def sample_token(logits: torch.Tensor, allowed: list[int], s: Sampling, rng: torch.Generator) -> int:
    """Sample one token id among `allowed` from a row's logits (temperature, top-k, top-p)."""
    sub = logits[allowed].float()
    if s.temperature <= 0:
        return allowed[int(torch.argmax(sub))]
    sub = sub / s.temperature
    if s.top_k and s.top_k < len(allowed):
        kth = torch.topk(sub, s.top_k).values[-1]
        sub = torch.where(sub < kth, torch.full_like(sub, -float("inf")), sub)
    probs = torch.softmax(sub, dim=0)
    if s.top_p < 1.0:
        sorted_p, order = torch.sort(probs, descending=True)
        keep = torch.cumsum(sorted_p, 0) - sorted_p < s.top_p
        mask = torch.zeros_like(probs, dtype=torch.bool)
        mask[order[keep]] = True
        probs = torch.where(mask, probs, torch.zeros_like(probs))
        probs = probs / probs.sum()
    return allowed[int(torch.multinomial(probs, 1, generator=rng))]


@dataclass
class Generated:
    trace: Trace | None
    schedule: object | None
    sentence: str
    error: str | None = None
    logprob: float = 0.0  # the model's log-likelihood of the answers it gave (unmasked, T = 1)


class Generator:
    """Generates schedules for a task with a trained TLM on hardware `hw` (the space its
    answers are masked to). `quality`: the tier a quality-conditioned model is asked for
    (tlmir.lm.quality.prompt_tier of its config); None for a model without the quality
    prompt. `prompt_hw`: the hardware its prompt names, if not `hw`
    (tlmir.lm.prompt_hardware: the nearest class the model was fine-tuned on)."""

    def __init__(self, model, tokenizer, hw: HardwareParams, sampling: Sampling | None = None, seed: int = 0,
                 quality: int | None = None, prompt_hw: HardwareParams | None = None):
        self.model, self.tok, self.hw = model.eval(), tokenizer, hw
        self.prompt_hw = prompt_hw or hw
        self.sampling = sampling or Sampling()
        self.rng = torch.Generator().manual_seed(seed)
        self.seed, self.quality = seed, quality

    @classmethod
    def for_model(cls, model, tokenizer, meta: dict, hw: HardwareParams, sampling: Sampling | None = None,
                  seed: int = 0, prompt: str = "host") -> "Generator":
        """A Generator for a loaded model with config `meta`: it asks for the tier the model
        is conditioned on, and its prompt names `hw` (`prompt="host"`) or the nearest
        hardware to `hw` that the model was tuned on (`"nearest"`; SearchParams.tlm_prompt)."""
        prompt_hw = prompt_hardware(hw, meta) if prompt == "nearest" else hw
        return cls(model, tokenizer, hw, sampling, seed, prompt_tier(meta), prompt_hw)

    def _prefix_cache(self, task, batch: int):
        """(KV cache of the prompt for `batch` rows, logits after it, how the tokenizer
        reads the task's names)."""
        prefix = prefix_words(task, self.prompt_hw, self.quality)
        ids = self.tok.encode(prefix)
        cache = self.model.new_cache(1)
        logits = self.model.step(torch.tensor([ids]), torch.tensor([len(ids)]), cache)
        return cache.expand(batch), logits[0, -1], self.tok.names(prefix)

    @torch.inference_mode()
    def generate(self, task, n: int, batch_size: int = 64, space: SearchSpace | None = None,
                 masked: bool = True, variants: list[tuple[Trace, set]] | None = None) -> list[Generated]:
        """n candidates for `task`. Masked (the default), every one is a valid schedule of
        the space; unmasked, an answer outside the space ends its candidate with an error.
        `variants` (masked only): per candidate, a (trace, questions) pair: the candidate keeps
        the trace's sketch and every answer but those to `questions` (and to questions whose
        recorded answer the space no longer offers), which the model writes anew."""
        space = space or SearchSpace(task.outputs, self.hw)
        if variants is not None:
            if not masked:
                raise TlmirError("generate: variants of a trace keep answers only the mask can force")
            n = len(variants)
        out: list[Generated] = []
        while len(out) < n:
            b = min(batch_size, n - len(out))
            out += self._batch(task, space, b, masked,
                               variants[len(out):len(out) + b] if variants is not None else None)
        return out

    def _batch(self, task, space: SearchSpace, b: int, masked: bool = True,
               variants: list[tuple[Trace, set]] | None = None) -> list[Generated]:
        cache, first, names = self._prefix_cache(task, b)
        batcher = _Batcher(self.model, self.tok, names, self.sampling, self.rng)
        sketch_ids = [self.tok.encode([str(i)], names=names)[0] for i in range(len(space.sketches))]
        vocab = list(range(self.tok.vocab_size))
        if variants is None:
            starts = [batcher.pick(first, sketch_ids if masked else vocab) for _ in range(b)]
            kept: list[dict] = [{} for _ in range(b)]
        else:
            starts = [sketch_ids[trace.sketch] for trace, _ in variants]
            kept = [{q: a for q, a in trace.decisions if q not in free} for trace, free in variants]
        batcher.add_logprob(first.expand(b, -1), list(range(b)), starts)
        feed: list[list[int]] = [[t] for t in starts]  # tokens chosen but not yet fed
        results: list = [None] * b
        batcher.active = set(range(b))

        def run(row: int) -> None:
            try:
                if starts[row] not in sketch_ids:
                    raise LanguageError(f"the model began the decisions with "
                                        f"{self.tok.word(starts[row])!r}, not a sketch number")
                sch, trace = space.apply(sketch_ids.index(starts[row]), LMDecider(batcher, row, kept[row]))
                results[row] = Generated(trace, sch, "", logprob=batcher.logprob[row])
            except TlmirError as e:  # cannot happen for valid spaces; reported, not hidden
                results[row] = Generated(None, None, "", f"{type(e).__name__}: {e}")
            finally:
                batcher.finish(row)

        threads = [threading.Thread(target=run, args=(r,), daemon=True) for r in range(b)]
        for t in threads:
            t.start()
        while True:
            reqs = batcher.wait_all_blocked()
            if not reqs:
                break
            self._answer(reqs, feed, cache, batcher, masked)
        for t in threads:
            t.join()
        for g in results:
            if g.trace is not None:
                g.sentence = trace_to_sentence(task, self.hw, g.trace)
        return results

    def _step(self, feed: list, rows: list[int], cache) -> torch.Tensor:
        """Feed each listed row its pending tokens; returns the logits after each row's last token."""
        b = len(feed)
        width = max(len(feed[r]) for r in rows)
        tokens = torch.full((b, width), self.tok.pad_id, dtype=torch.long)
        n_new = torch.zeros(b, dtype=torch.long)
        for r in rows:
            tokens[r, : len(feed[r])] = torch.tensor(feed[r])
            n_new[r] = len(feed[r])
        logits = self.model.step(tokens, n_new, cache)
        last = torch.clamp(n_new - 1, min=0)
        out = logits[torch.arange(b), last]
        for r in rows:
            feed[r] = []
        return out

    def _answer(self, reqs: dict, feed: list, cache, batcher: _Batcher, masked: bool = True) -> None:
        """Sample every waiting row's answer, word by word. Masked, only words continuing
        some valid answer are allowed; unmasked, any word is, and a row stops as soon as
        its words can no longer become a valid answer."""
        for r, req in reqs.items():
            feed[r] = feed[r] + req.question
        chosen: dict[int, list[int]] = {r: [] for r in reqs}
        live = {r: list(range(len(req.options))) for r, req in reqs.items()}
        vocab = list(range(self.tok.vocab_size))
        rows = sorted(reqs)  # draws in row order, not in the order the threads asked: a seed repeats
        while rows:
            logits = self._step(feed, rows, cache)
            nxt = []
            for r in rows:
                depth = len(chosen[r])
                opts = reqs[r].options
                allowed = sorted({opts[i][depth] for i in live[r]}) if masked else vocab
                tok = batcher.pick(logits[r], allowed)
                chosen[r].append(tok)
                live[r] = [i for i in live[r] if opts[i][depth] == tok]
                feed[r] = [tok]
                if any(len(opts[i]) > depth + 1 for i in live[r]):
                    nxt.append(r)
            batcher.add_logprob(logits, rows, [chosen[r][-1] for r in rows])
            rows = nxt
        for r, req in reqs.items():
            req.answer = chosen[r]
            req.choice = next((i for i in live[r] if req.options[i] == chosen[r]), -1)
            batcher.decisions += 1
            req.done.set()

    @torch.inference_mode()
    def unconstrained(self, task, n: int, batch_size: int = 64, max_tokens: int = 1024) -> list[Generated]:
        """Sample the raw model (no mask) and parse what comes out; a sentence cut off at
        `max_tokens` or the model's block size is reported malformed."""
        out: list[Generated] = []
        prefix = prefix_words(task, self.prompt_hw, self.quality)
        max_tokens = min(max_tokens, self.model.config.block_size)
        while len(out) < n:
            b = min(batch_size, n - len(out))
            cache, first, names = self._prefix_cache(task, b)
            words: list[list[str]] = [[] for _ in range(b)]
            logits = first.expand(b, -1)
            alive = list(range(b))
            vocab = list(range(self.tok.vocab_size))
            feed: list[list[int]] = [[] for _ in range(b)]
            for _ in range(max_tokens - len(prefix)):
                for r in alive:
                    t = sample_token(logits[r], vocab, self.sampling, self.rng)
                    feed[r] = [t]
                    words[r].append(self.tok.word(t))
                alive = [r for r in alive if words[r][-1] != "</s>"]
                if not alive:
                    break
                logits = self._step(feed, alive, cache)
            for w in words:
                sentence = " ".join(prefix + names.real_words(w))
                try:
                    out.append(Generated(sentence_to_trace(sentence), None, sentence))
                except LanguageError as e:
                    out.append(Generated(None, None, sentence, str(e)))
        return out


def replay_errors(gens: list[Generated], space) -> list[str | None]:
    """Per generated sentence: None if it parsed into a trace that replays in `space`, else
    why not (how well-formed unconstrained sentences are)."""
    out: list[str | None] = []
    for g in gens:
        if g.trace is None:
            out.append(g.error)
            continue
        try:
            space.replay(g.trace)
            out.append(None)
        except TlmirError as e:
            out.append(f"replay: {e}")
    return out


def programs_per_second(gen: Generator, task, n: int, batch_size: int) -> tuple[float, float]:
    """(complete programs/s, decisions/s) of constrained generation."""
    t0 = time.perf_counter()
    res = gen.generate(task, n, batch_size)
    dt = time.perf_counter() - t0
    decisions = sum(len(g.trace.decisions) + 1 for g in res if g.trace is not None)
    return len(res) / dt, decisions / dt

