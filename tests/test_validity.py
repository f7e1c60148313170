"""Validity training: the allowed words are the mask's, and tuning moves mass into them."""
import math

import pytest
import torch

from tlmir import ops
from tlmir.errors import ModelError
from tlmir.lm.generate import Generator, Sampling
from tlmir.lm.language import trace_to_sentence
from tlmir.lm.registry import load_model, model_dir
from tlmir.lm.validity import allowed_words, example, inputs, outside_mass, validity_loss, validity_tune
from tlmir.runtime.target import HardwareParams
from tlmir.runtime.task import Task
from tlmir.schedule.space import SearchSpace

HW = HardwareParams.from_key("cpu-avx512-c2-l1_48K-l2_2048K")


@pytest.fixture(scope="module")
def shipped():
    return load_model("tlm")


@pytest.fixture(scope="module")
def samples(shipped):
    model, tok, meta = shipped
    task = Task.from_op(ops.dense(48, 96, 64))
    space = SearchSpace(task.outputs, HW)
    gens = Generator.for_model(model, tok, meta, HW, Sampling(1.0), seed=3).generate(task, 8, 8, space)
    return task, space, [g.trace for g in gens]


def test_allowed_words_are_the_masks(samples):
    task, space, traces = samples
    for trace in traces:
        words, scored = allowed_words(space, task, HW, trace)
        assert words == trace_to_sentence(task, HW, trace).split()
        assert scored[0][1] == {str(i) for i in range(len(space.sketches))}
        for pos, ok in scored:
            assert words[pos] in ok
        for pos, ok in scored:  # a tile's first word: what is left after the outer factor divides the extent
            if words[pos - 1] == "=" and words[pos - 3] == "tile":
                extent = int(words[pos - 2])
                assert ok <= {str(d) for d in range(1, extent + 1) if extent % d == 0}
        # sentences scope also scores the question words, each with the one word the space asks
        words2, scored2 = allowed_words(space, task, HW, trace, scope="sentences")
        assert words2 == words and len(scored2) > len(scored)
        assert all(len(ok) == 1 for p, ok in scored2 if p not in dict(scored))
    with pytest.raises(ModelError, match="scope"):
        allowed_words(space, task, HW, traces[0], scope="everything")


def test_validity_loss_is_the_mass_outside_the_mask(samples, shipped):
    _, tok, _ = shipped
    task, space, traces = samples
    ex = example(tok, space, task, HW, traces[0])
    logits = torch.zeros(1, len(ex.ids), tok.vocab_size)
    for p, ok in zip(ex.positions, ex.allowed):
        logits[0, p - 1, ok] = 50.0  # all the mass inside
    assert float(validity_loss(logits, [ex])) < 1e-6
    uniform = torch.zeros(1, len(ex.ids), tok.vocab_size)
    expect = torch.tensor([math.log(1 - len(ok) / tok.vocab_size) for ok in ex.allowed])
    assert torch.allclose(outside_mass(uniform, [ex]), expect, atol=1e-5)
    inside = -sum(math.log(len(ok) / tok.vocab_size) for ok in ex.allowed) / len(ex.allowed)
    assert float(validity_loss(uniform, [ex])) > inside  # both terms push


def _outside(model, tok, examples):
    x = inputs(examples, tok.pad_id)
    with torch.no_grad():
        return float(outside_mass(model(x)[0], examples).exp().mean())


def test_tuning_moves_mass_into_the_mask(samples, tmp_path):
    base, tok, _ = load_model("base")  # pre-trained only: it still puts mass outside the mask
    task, space, traces = samples
    examples = [example(tok, space, task, HW, t) for t in traces]
    stats = validity_tune(model_dir("base"), str(tmp_path / "valid"), examples, steps=30,
                          batch_size=8, lr=1e-3, log=None)
    model, tok2, meta = load_model(str(tmp_path / "valid"))
    assert _outside(model, tok, examples) < _outside(base, tok, examples) / 2
    assert meta["validity"]["steps"] == 30 and len(stats["history"]) == 1
    assert meta["validity"]["previous"] is None  # `base` went through no validity stage before
    assert tok2.vocab_size == tok.vocab_size


def test_train_validity_samples_odd_shape_tasks_from_the_command_line(tmp_path, capsys):
    from tlmir.cli import main
    out = tmp_path / "odd"
    main(["train", "validity", "--model", "tlm", "--out", str(out), "--tasks", "1", "--novel", "0",
          "--odd", "2", "--per-task", "1", "--hardware", HW.key, "--steps", "2", "--batch-size", "2",
          "--scope", "sentences"])
    _, _, meta = load_model(str(out))
    assert meta["validity"]["sampled"]["odd"] == 2
    assert meta["validity"]["steps"] == 2
