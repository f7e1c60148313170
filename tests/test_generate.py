"""LM-driven generation: with any weights, constrained generation yields valid programs."""
import numpy as np
import pytest
import torch

import tlmir
from tlmir import ops
from tlmir.build import reference_outputs
from tlmir.errors import TlmirError
from tlmir.lm.generate import Generator, Sampling
from tlmir.lm.language import sentence_to_trace
from tlmir.lm.model import GPT, GPTConfig
from tlmir.lm.tokenizer import build_tokenizer
from tlmir.runtime.target import HardwareParams
from tlmir.runtime.task import Task
from tlmir.schedule.decider import Trace
from tlmir.schedule.space import SearchSpace

HW = HardwareParams()


def _random_model(tok, seed=0, block_size=512):
    torch.manual_seed(seed)
    return GPT(GPTConfig(vocab_size=tok.vocab_size, n_layer=2, n_head=2, n_embd=32, block_size=block_size))


def test_random_weights_give_only_valid_verified_programs():
    tasks = [Task.from_op(ops.conv2d_bias_relu(1, 4, 8, 8, 8, 3, 3, padding=1)),
             Task.from_op(ops.softmax(8, 32))]
    tok = build_tokenizer(tasks, HW)
    gen = Generator(_random_model(tok), tok, HW, Sampling(temperature=1.0), seed=1)
    for task in tasks:
        space = SearchSpace(task.outputs, HW)
        res = gen.generate(task, 8, batch_size=5, space=space)
        assert len(res) == 8 and all(g.trace is not None for g in res)
        ins = task.random_inputs(0)
        want = reference_outputs(task, ins)
        for g in res:
            assert sentence_to_trace(g.sentence) == g.trace
            assert str(tlmir.lower(space.replay(g.trace), task.args)) == str(tlmir.lower(g.schedule, task.args))
            outs = [np.zeros(t.shape, t.dtype) for t in task.outputs]
            tlmir.build(g.schedule, task.args)(*ins, *outs)
            for got, w in zip(outs, want):
                np.testing.assert_allclose(got, w, rtol=1e-4, atol=1e-4)


def test_batched_generation_matches_its_own_kv_cache_free_scores():
    """Greedy constrained decoding is deterministic and independent of the batch size."""
    task = Task.from_op(ops.matmul(16, 16, 16))
    tok = build_tokenizer([task], HW)
    model = _random_model(tok, seed=3)
    one = Generator(model, tok, HW, Sampling(temperature=0.0)).generate(task, 1, batch_size=1)
    many = Generator(model, tok, HW, Sampling(temperature=0.0)).generate(task, 6, batch_size=6)
    assert all(g.trace == one[0].trace for g in many)


def test_a_programs_logprob_is_the_models_likelihood_of_its_answers():
    """What generation records of each program (the pool's second ranking) is what the model,
    reading the whole sentence at once, gives its answers: every answer word, the sketch id
    included, and nothing else (the sentence's closing </s> is not sampled)."""
    from tlmir.lm.sft import answer_flags
    task = Task.from_op(ops.conv2d_bias_relu(1, 4, 8, 8, 8, 3, 3, padding=1))
    tok = build_tokenizer([task], HW)
    model = _random_model(tok, seed=5).eval()
    res = Generator(model, tok, HW, Sampling(temperature=1.0), seed=2).generate(task, 4, batch_size=4)
    for g in res:
        ids = tok.encode(g.sentence.split())
        words = [tok.word(i) for i in ids]
        flags = answer_flags(words)
        with torch.no_grad():
            logp = torch.log_softmax(model(torch.tensor([ids[:-1]]))[0][0], -1)
        want = sum(float(logp[t - 1, ids[t]]) for t in range(1, len(ids)) if flags[t] and words[t] != "</s>")
        assert g.logprob < 0 and abs(g.logprob - want) < 1e-3 * abs(want)


def test_sampling_with_a_seed_writes_the_same_programs_again():
    """Rows draw their random numbers in row order, whatever order their threads asked in."""
    task = Task.from_op(ops.conv2d_bias_relu(1, 4, 8, 8, 8, 3, 3, padding=1))
    tok = build_tokenizer([task], HW)
    model = _random_model(tok, seed=4)
    runs = [[g.sentence for g in Generator(model, tok, HW, Sampling(temperature=1.0), seed=7).generate(task, 16, 16)]
            for _ in range(2)]
    assert runs[0] == runs[1] and len(set(runs[0])) > 1


def test_unconstrained_sampling_reports_malformed_sentences():
    task = Task.from_op(ops.matmul(16, 16, 16))
    tok = build_tokenizer([task], HW)
    res = Generator(_random_model(tok), tok, HW, seed=0).unconstrained(task, 4, batch_size=4, max_tokens=120)
    assert len(res) == 4
    assert all((g.trace is None) == (g.error is not None) for g in res)
    short = _random_model(tok, block_size=64)  # sentences run into its block size: cut off, malformed
    res = Generator(short, tok, HW, seed=0).unconstrained(task, 2, batch_size=2)
    assert len(res) == 2 and all(g.trace is None and g.error for g in res)


def test_unmasked_answers_keep_the_space_questions_and_report_bad_answers():
    """masked=False: the sketch code still asks; an answer outside the space ends its
    candidate with a LanguageError naming the question, the rest replay exactly."""
    task = Task.from_op(ops.softmax(8, 32))
    tok = build_tokenizer([task], HW)
    space = SearchSpace(task.outputs, HW)
    res = Generator(_random_model(tok), tok, HW, seed=0).generate(task, 12, batch_size=6, space=space,
                                                                   masked=False)
    assert len(res) == 12
    assert all((g.trace is None) == (g.error is not None) for g in res)
    bad = [g for g in res if g.trace is None]
    assert bad, "a random model should answer outside the space at least once"
    for g in bad:
        assert "LanguageError" in g.error
        assert "not one of the space's answers" in g.error or "not a sketch number" in g.error
    for g in res:
        if g.trace is not None:
            assert sentence_to_trace(g.sentence) == g.trace
            space.replay(g.trace)


def test_the_shipped_model_writes_verified_programs_of_pack_sketches():
    """BERT's 128x768x768 dense: the default model's vocabulary spells the sketches that pack
    W (`W:packD`), it picks them, and their programs build and match numpy."""
    from tlmir.lm.registry import load_model
    from tlmir.runtime.target import host_hardware
    model, tok, _ = load_model("default")
    hw = host_hardware()
    task = Task.from_op(ops.dense(128, 768, 768, bias=True, act="gelu"))
    space = SearchSpace(task.outputs, hw)
    packed = {k for k, s in enumerate(space.sketches) if "pack" in str(s)}
    assert packed and tok.covers(str(k) for k in packed) == []
    res = Generator(model, tok, hw, Sampling(temperature=1.0), seed=0).generate(task, 32, space=space)
    mine = [g for g in res if g.trace.sketch in packed]
    assert mine, f"no pack sketch among 32 programs: {sorted(g.trace.sketch for g in res)}"
    assert all(tok.lacking(g.sentence) == [] for g in mine)
    ins = task.random_inputs(0)
    want = reference_outputs(task, ins)
    for g in mine[:2]:
        outs = [np.zeros(t.shape, t.dtype) for t in task.outputs]
        tlmir.build(g.schedule, task.args)(*ins, *outs)
        np.testing.assert_allclose(outs[0], want[0], rtol=1e-3, atol=1e-3)


def test_variants_keep_every_answer_but_the_freed_ones():
    """A variant is the model's mutation of a trace: same sketch, the same answers except
    to the freed questions (and to questions the changed answers made new)."""
    import random
    from tlmir.lm.tlm_search import free_questions
    task = Task.from_op(ops.conv2d_bias_relu(1, 4, 8, 8, 8, 3, 3, padding=1))
    tok = build_tokenizer([task], HW)
    space = SearchSpace(task.outputs, HW)
    rng = random.Random(0)
    parents = [space.sample(rng)[1] for _ in range(4)]
    variants = [(p, free_questions(p, rng, {"tile": 1.0}, 1 + i % 2)) for i, p in enumerate(parents * 3)]
    assert all(free and all(q.startswith("tile") for q in free) for _, free in variants)
    res = Generator(_random_model(tok, seed=2), tok, HW, Sampling(temperature=1.0), seed=4).generate(
        task, 0, batch_size=5, space=space, variants=variants)
    assert len(res) == len(variants)
    changed = 0
    for g, (parent, free) in zip(res, variants):
        assert g.trace is not None and g.trace.sketch == parent.sketch
        before, after = parent.answers(), g.trace.answers()
        for q in {q for q in after if q in before and after[q] != before[q]} - free:
            kept = Trace(g.trace.sketch, [(d, before[q] if d == q else a) for d, a in g.trace.decisions])
            with pytest.raises(TlmirError):  # rewritten only because the space no longer offers it
                space.replay(kept)
        changed += after != before
    assert changed >= len(variants) // 2  # a random model rarely writes the freed answers back
