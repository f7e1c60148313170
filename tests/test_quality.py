"""Quality-conditioned fine-tuning: tiers, labelled sentences, the grown vocabulary, and a
model that writes what its quality prompt asks for."""
import os
import random

import pytest
import torch

from tlmir import ops
from tlmir.errors import LanguageError, ModelError
from tlmir.lm.generate import Generator, Sampling
from tlmir.lm.language import QUALITY, parse_sentence, prefix_words, trace_to_sentence
from tlmir.lm.quality import prompt_tier, quality_config, quality_sentences, tier, tier_counts
from tlmir.lm.checkpoint import save_checkpoint
from tlmir.lm.model import GPT, GPTConfig
from tlmir.lm.registry import BASE_MODEL, TOKENIZER_FILE, load_model
from tlmir.lm.sft import answer_nll, sft
from tlmir.lm.tokenizer import Tokenizer
from tlmir.search.rankers import DEFAULT_EVALUATOR, evaluator_dir
from tlmir.runtime.records import Record
from tlmir.runtime.target import host_hardware
from tlmir.runtime.task import Task
from tlmir.schedule.space import SearchSpace

HW = host_hardware()


def test_tiers_and_config():
    assert [tier(r) for r in (1.0, 1.1, 1.1001, 1.5, 2.9, 3.0, 3.01, 50)] == [0, 0, 1, 1, 2, 2, 3, 3]
    assert tier(1.2, (1.3,)) == 0 and tier(1.4, (1.3,)) == 1
    assert quality_config((1.2, 2), 1) == {"bounds": [1.2, 2.0], "generate": 1}
    for bad in [((2.0, 1.5), 0), ((0.9,), 0), ((), 0), ((1.1,), 2)]:
        with pytest.raises(ModelError):
            quality_config(*bad)
    assert prompt_tier({}) is None and prompt_tier({"quality": quality_config()}) == 0
    with pytest.raises(ModelError, match="malformed"):
        prompt_tier({"quality": {"bounds": [1.1]}})


def _traces(task, n, seed=0):
    space = SearchSpace(task.outputs, HW)
    rng = random.Random(seed)
    out = {}
    while len(out) < n:
        t = space.sample(rng)[1]
        out.setdefault(t.to_json(), t)
    return list(out.values())


def test_quality_sentences_label_every_program_against_its_tasks_best():
    task = Task.from_op(ops.matmul(16, 16, 16))
    other = Task.from_op(ops.matmul(8, 16, 16))
    traces = _traces(task, 5)
    seconds = [1.0, 1.05, 1.4, 2.5, 9.0]

    def rec(trace, s, hw_key=HW.key, key=task.key):
        return Record(key, task.name, hw_key, trace.to_json(), [s])

    recs = [rec(t, s) for t, s in zip(traces, seconds)]
    recs += [rec(traces[1], 1.2),                     # measured twice: its fastest counts
             rec(traces[4], 0.1, hw_key="cpu-avx2-c8-l1_32K-l2_512K"),  # another machine
             Record(task.key, task.name, HW.key, traces[3].to_json(), error="wrong")]
    rows = quality_sentences(recs, [task, other], HW)
    assert [r["quality"] for r in rows] == [0, 0, 1, 2, 3] and tier_counts(rows) == [2, 1, 1, 1]
    assert [r["seconds"] for r in rows] == seconds
    for r, t in zip(rows, traces):
        prompt, parsed = parse_sentence(r["sentence"])
        assert parsed == t and prompt[-2:] == [QUALITY, str(r["quality"])]
    assert [r["quality"] for r in quality_sentences(recs, [task], HW, last_tier_share=1e-9)] == [0, 0, 1, 2]


def test_prefix_words_ask_for_a_tier_only_when_given():
    task = Task.from_op(ops.matmul(16, 16, 16))
    assert QUALITY not in prefix_words(task, HW)
    assert prefix_words(task, HW, 2)[-3:] == [QUALITY, "2", "sketch"]
    t = _traces(task, 1)[0]
    assert parse_sentence(trace_to_sentence(task, HW, t, quality=1))[1] == t


def test_extended_tokenizer_and_grown_model_keep_the_old_words():
    base, tok, _ = load_model(BASE_MODEL)
    word = "<a-new-word>"
    assert tok.id(word) == tok.unk_id
    grown_tok = tok.extended([word, "sketch"])  # a word it has is not added twice
    assert grown_tok.vocab_size == tok.vocab_size + 1 and grown_tok.id(word) == tok.vocab_size
    assert all(grown_tok.id(tok.word(i)) == i for i in range(tok.vocab_size))
    with pytest.raises(LanguageError, match="not a single word"):
        tok.extended(["two words"])
    grown = base.grow_vocab(grown_tok.vocab_size)
    ids = torch.tensor([tok.encode("<s> v4 task input A 8 hw cpu sketch".split())])
    with torch.no_grad():
        old, new = base(ids)[0], grown(ids)[0]
    assert torch.allclose(old, new[..., :tok.vocab_size], atol=1e-5)
    with pytest.raises(ModelError, match="fewer"):
        base.grow_vocab(10)


def test_conditioned_sft_learns_what_each_tier_looks_like(tmp_path):
    """Programs of sketch a are labelled tier 0, of sketch b tier 3: after SFT the tier-0
    prompt makes the sketch-a programs likelier than the tier-3 prompt does, and the
    other way round; generation asks for the tier the config names."""
    task = Task.from_op(ops.dense(32, 48, 64, bias=True, act="gelu"))
    tok = Tokenizer.load(os.path.join(evaluator_dir(DEFAULT_EVALUATOR), TOKENIZER_FILE))  # as written, no `quality`
    torch.manual_seed(0)  # a small base with a shipped vocabulary: it learns in seconds
    save_checkpoint(GPT(GPTConfig(vocab_size=tok.vocab_size, n_layer=2, n_head=2, n_embd=32, block_size=384)),
                    str(tmp_path / "base"))
    tok.save(str(tmp_path / "base" / TOKENIZER_FILE))
    traces = [t for t in _traces(task, 48, seed=1)
              if not tok.unknown_decisions(trace_to_sentence(task, HW, t))]
    sketches = sorted({t.sketch for t in traces})
    a = [t for t in traces if t.sketch == sketches[0]][:2]
    b = [t for t in traces if t.sketch == sketches[-1]][:2]
    assert len(a) == len(b) == 2 and sketches[0] != sketches[-1]
    demos = ([trace_to_sentence(task, HW, t, quality=0) for t in a]
             + [trace_to_sentence(task, HW, t, quality=3) for t in b])
    logs = []
    stats = sft(str(tmp_path / "base"), demos, str(tmp_path / "q"), epochs=300, batch_size=4, lr=3e-3,
                quality=quality_config(), log=logs.append)
    assert stats["completed"] and any("vocabulary grown by ['quality']" in line for line in logs)
    assert not (tmp_path / "q.init").exists()
    model, qtok, meta = load_model(str(tmp_path / "q"))
    assert qtok.vocab_size == tok.vocab_size + 1 and prompt_tier(meta) == 0

    def p_sketch(sketch, q):  # the first answer: which sketch the prompt's tier leads to
        ids = torch.tensor([qtok.encode(prefix_words(task, HW, q))])
        with torch.no_grad():
            return float(torch.softmax(model(ids)[0][0, -1], -1)[qtok.id(str(sketch))])

    first, last = sketches[0], sketches[-1]
    assert p_sketch(first, 0) > 2 * p_sketch(first, 3) and p_sketch(last, 3) > 2 * p_sketch(last, 0)
    swapped = [d.replace("quality 0", "quality 3") for d in demos[:2]] + [
        d.replace("quality 3", "quality 0") for d in demos[2:]]
    assert answer_nll(model, qtok, demos) < 0.8 * answer_nll(model, qtok, swapped)
    gen = Generator(model, qtok, HW, Sampling(1.0), seed=0, quality=prompt_tier(meta))
    out = gen.generate(task, 8, 8)
    assert all(g.trace is not None for g in out)
    assert sum(g.trace.sketch == first for g in out) > sum(g.trace.sketch == last for g in out)
    # fine-tuned again (on its tier-0 programs, say), a conditioned model stays conditioned
    sft(str(tmp_path / "q"), demos[:2], str(tmp_path / "q2"), epochs=1, batch_size=2, log=None)
    again, tok2, meta2 = load_model(str(tmp_path / "q2"))
    assert prompt_tier(meta2) == 0 and tok2.vocab_size == qtok.vocab_size


def test_iterate_fine_tunes_on_every_measured_program_with_quality(tmp_path):
    from tlmir.errors import TlmirError
    from tlmir.lm.iterate import IterateConfig, Iteration
    task = Task.from_op(ops.matmul(16, 16, 16))
    traces = _traces(task, 6)
    it = Iteration(str(tmp_path), "base", [task], IterateConfig(sft_data="quality", last_tier_share=1.0), log=None)
    for t, s in zip(traces, (1.0, 1.3, 2.0, 4.0, 5.0, 8.0)):
        it.db.append(Record(task.key, task.name, HW.key, t.to_json(), [s], strategy="iterate"))
    sentences, quality = it.training_sentences()
    assert quality == quality_config() and len(sentences) == 6
    assert [parse_sentence(s)[0][-1] for s in sentences] == ["0", "1", "2", "3", "3", "3"]
    best = Iteration(str(tmp_path / "best"), "base", [task], IterateConfig(), log=None)
    best.db.append(Record(task.key, task.name, HW.key, traces[0].to_json(), [1.0], strategy="iterate"))
    sentences, quality = best.training_sentences()
    assert quality is None and len(sentences) == 1 and QUALITY not in sentences[0].split()
    with pytest.raises(TlmirError, match="sft_data"):
        Iteration(str(tmp_path / "bad"), "base", [task], IterateConfig(sft_data="all"), log=None)
