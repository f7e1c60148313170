"""Names by place: a tokenizer that reads any operator's names as the same closed words."""
import random

import numpy as np
import pytest
import torch

import tlmir
from tlmir import te
from tlmir.build import reference_outputs
from tlmir.errors import LanguageError
from tlmir.lm.generate import Generator, Sampling
from tlmir.lm.language import sentence_to_trace, trace_to_sentence
from tlmir.lm.model import GPT, GPTConfig
from tlmir.lm.place_names import PlaceNames
from tlmir.lm.tokenizer import Tokenizer, build_tokenizer
from tlmir.runtime.target import HardwareParams
from tlmir.runtime.task import Task
from tlmir.schedule.decider import RandomDecider
from tlmir.schedule.space import SearchSpace

HW = HardwareParams()


def row_norm(names=("x", "sumsq", "norm"), reduce_axis="k", m=16, n=24) -> Task:
    """sqrt(sum_k x[i, k]^2), its tensors and reduce axis named as given; other names
    (not "x") also rename the row axis (`r`)."""
    x = te.placeholder((m, n), name=names[0])
    k = te.reduce_axis(n, reduce_axis)
    if names[0] == "x":
        ss = te.compute((m,), lambda i: te.sum(x[i, k] * x[i, k], axis=k), name=names[1])
        out = te.compute((m,), lambda i: te.sqrt(ss[i]), name=names[2])
    else:
        ss = te.compute((m,), lambda r: te.sum(x[r, k] * x[r, k], axis=k), name=names[1])
        out = te.compute((m,), lambda r: te.sqrt(ss[r]), name=names[2])
    return Task("row_norm", [x, out])


def test_a_prompt_names_its_tensors_stages_and_axes_by_place_and_back():
    task = row_norm()
    space = SearchSpace(task.outputs, HW)
    _, trace = space.apply(0, RandomDecider(random.Random(0)))
    words = trace_to_sentence(task, HW, trace).split()
    names = PlaceNames(words)
    assert names.to_place == {"x": "in0", "sumsq": "s0", "norm": "s1"}
    assert names.axes == {"sumsq": {"i": "i0", "k": "r0"}, "norm": {"i": "i0"}}
    placed = names.placed_words(words)
    assert "read in0 i0 r0" in " ".join(placed) and not {"x", "sumsq", "norm"} & set(placed)
    assert names.real_words(placed) == words
    assert names.placed("sumsq.k.outer.v") == "s0.r0.outer.v"
    assert names.real("s0.r0.outer.v") == "sumsq.k.outer.v"


def test_operators_that_differ_only_in_names_read_as_the_same_tokens():
    one, other = row_norm(), row_norm(("A", "total", "root2"), "c")
    tok = build_tokenizer([one], HW, places=True)
    assert tok.places and "sumsq" not in tok._vocab
    for seed in range(4):
        t1 = SearchSpace(one.outputs, HW).apply(0, RandomDecider(random.Random(seed)))[1]
        t2 = SearchSpace(other.outputs, HW).apply(0, RandomDecider(random.Random(seed)))[1]
        s1, s2 = trace_to_sentence(one, HW, t1), trace_to_sentence(other, HW, t2)
        assert s1 != s2 and tok.encode(s1, strict=True) == tok.encode(s2, strict=True)


def test_places_survive_save_and_load(tmp_path):
    tok = build_tokenizer([row_norm()], HW, places=True)
    tok.save(str(tmp_path / "tokenizer.json"))
    again = Tokenizer.load(str(tmp_path / "tokenizer.json"))
    assert again.places and again.hash == tok.hash
    assert not build_tokenizer([row_norm()], HW).places


def test_generation_with_places_writes_verified_programs_in_the_authors_names():
    task = row_norm(("X2", "acc", "result"), "col")
    tok = build_tokenizer([row_norm()], HW, places=True)  # learnt from other names
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=tok.vocab_size, n_layer=2, n_head=2, n_embd=32, block_size=512))
    gen = Generator(model, tok, HW, Sampling(temperature=1.0), seed=1)
    space = SearchSpace(task.outputs, HW)
    ins = task.random_inputs(0)
    want = reference_outputs(task, ins)
    for g in gen.generate(task, 6, batch_size=3, space=space):
        assert g.trace is not None and "acc" in g.sentence
        assert sentence_to_trace(g.sentence) == g.trace
        outs = [np.zeros(t.shape, t.dtype) for t in task.outputs]
        tlmir.build(g.schedule, task.args)(*ins, *outs)
        np.testing.assert_allclose(outs[0], want[0], rtol=1e-4, atol=1e-4)
    for g in gen.unconstrained(task, 3, batch_size=3, max_tokens=200):
        assert " s0" not in g.sentence.split(" sketch ")[0]  # the prompt as the author wrote it


def test_names_that_are_words_of_the_language_are_read_by_place_where_a_name_stands():
    prompt = "<s> v4 task input read 4 stage reduce reduce sp 4 rd 4 read read i k hw".split()
    names = PlaceNames(prompt)
    assert names.to_place == {"read": "in0", "reduce": "s0"}
    placed = names.placed_words(prompt)
    assert " ".join(placed) == "<s> v4 task input in0 4 stage s0 reduce sp 4 rd 4 read in0 i0 r0 hw"
    assert names.real_words(placed) == prompt
    assert names.placed("reduce.k") == "s0.r0"
    assert names.placed_words("parallel reduce 1 2 = 2 unroll reduce = 16".split()) == \
        "parallel s0 1 2 = 2 unroll s0 = 16".split()


def test_a_word_that_could_be_told_from_a_place_is_refused_by_name():
    names = PlaceNames("<s> v4 task input x 4 stage y elem sp 4 read x i hw".split())
    with pytest.raises(LanguageError, match="'s0'"):
        names.check(["tile", "s0.i", "4"])  # `s0` is no name here, and `y` is read as s0
    with pytest.raises(LanguageError, match="'i0'"):
        names.check(["tile", "y.i0", "4"])  # `i0` is no axis of y, and its `i` is read as i0


def test_validity_masks_read_a_stage_called_reduce_as_the_sentence_reads_it():
    from tlmir.lm.validity import example
    task = row_norm(names=("x", "reduce", "post"))
    tok = build_tokenizer([task], HW, places=True)
    space = SearchSpace(task.outputs, HW)
    for seed in range(4):
        _, trace = space.apply(seed % len(space.sketches), RandomDecider(random.Random(seed)))
        ex = example(tok, space, task, HW, trace, scope="sentences")
        for p, allowed in zip(ex.positions, ex.allowed):
            assert ex.ids[p] in allowed, (tok.word(ex.ids[p]), [tok.word(i) for i in allowed])


@pytest.mark.parametrize("op, spatial, reduce", [
    (lambda: tlmir.ops.matmul(64, 64, 64), ["i", "j"], ["k"]),       # equal extents: the contracted k
    (lambda: tlmir.ops.dense(8, 24, 16), ["i", "j"], ["k"]),
    (lambda: tlmir.ops.conv2d_nchw(1, 8, 10, 10, 16, 3, 3, padding=0), ["n", "k", "p", "q"], ["rc", "rr", "rs"]),
])
def test_axes_are_read_by_the_extent_they_run_over(op, spatial, reduce):
    """A stage's spatial axes are i0 i1 ... and its reduce axes r0 ..., in the order of
    its sp / rd extents, whatever the order the reads first use them in."""
    task = Task.from_op(op())
    words = trace_to_sentence(task, HW, SearchSpace(task.outputs, HW).apply(
        0, RandomDecider(random.Random(0)))[1]).split()
    names = PlaceNames(words)
    main = [s for s in names.axes if len(names.axes[s]) == len(spatial) + len(reduce)][-1]
    want = {n: f"i{k}" for k, n in enumerate(spatial)} | {n: f"r{k}" for k, n in enumerate(reduce)}
    assert names.axes[main] == want


def test_a_stage_keeps_the_roles_an_earlier_stage_gave_its_axes():
    """layernorm's var reads mean[i] (i from two tensors) but reduces over k, as mean does."""
    task = Task.from_op(tlmir.ops.layernorm(64, 64))
    names = PlaceNames(trace_to_sentence(task, HW, SearchSpace(task.outputs, HW).apply(
        0, RandomDecider(random.Random(0)))[1]).split())
    assert names.axes["mean"] == names.axes["var"] == {"i": "i0", "k": "r0"}


def test_max_pool_window_axes_are_its_reduce_axes():
    prompt = "<s> v4 task input X 1 8 9 9 stage pool reduce sp 1 8 4 4 rd 3 3 read X n c p*2+rr q*2+rs hw"
    names = PlaceNames(prompt.split())
    assert names.axes["pool"] == {"n": "i0", "c": "i1", "p": "i2", "q": "i3", "rr": "r0", "rs": "r1"}
    assert names.placed("q*2+rs", stage="pool") == "i3*2+r1"


def test_large_extents_are_read_by_place_so_an_unseen_extent_is_no_unk():
    """An extent above 1024 the vocabulary was not built from reads as n0, which the
    model can copy into the question that asks about it, and decodes back."""
    task = row_norm(m=8, n=3000)
    seen = build_tokenizer([row_norm(m=8, n=4096)], HW, places=True)
    assert seen.numbers and "3000" not in seen._vocab and "n0" in seen._vocab
    space = SearchSpace(task.outputs, HW)
    for seed in range(3):
        sentence = trace_to_sentence(task, HW, space.apply(0, RandomDecider(random.Random(seed)))[1])
        ids = seen.encode(sentence, strict=True)
        assert seen.unk_id not in ids and ids.count(seen.id("n0")) == sentence.split().count("3000")
        names = seen.names(sentence.split())
        assert names.real_words(seen.decode(ids).split()) == sentence.split()
    names = PlaceNames("<s> v4 task input x 8 3000 stage y elem sp 8 3000 read x i j hw".split(), numbers=True)
    assert names.placed("3000") == "n0" and names.placed("1024") == "1024" and names.real("n0") == "3000"
    assert PlaceNames("<s> v4 task input x 3000 stage y elem sp 3000 read x i hw".split()).placed("3000") == "3000"
    with pytest.raises(LanguageError, match="'n0'"):
        names.check(["tile", "y.n0", "4"])  # `n0` is no axis of y, and 3000 is read as n0


def test_tile_extents_read_by_reference_and_back():
    """With extents, `tile <axis> <extent>` reads `ext` where the extent is the prompt's
    extent of that axis, so no sentence copies a number; any other extent stays."""
    prompt = "<s> v4 task input x 8 640 stage y elem sp 8 640 read x i j hw".split()
    names = PlaceNames(prompt, numbers=True, extents=True)
    words = ("tile y.j 640 = 16 1 tile y.j 320 = 2 1 tile y.pack.ax1 640 = 8 "
             "tile x.pack.ax1 640 = 8 tile x.pack.ax0 640 = 8 parallel y 1 2 = 2").split()
    placed = names.placed_words(words)
    assert placed[:3] == ["tile", "s0.i1", "ext"] and placed[8] == "320" and placed[14] == "640"
    assert placed[18:20] == ["in0.pack.ax1", "ext"] and placed[24] == "640"  # x: 8 by 640
    assert names.real_words(placed) == words
    assert names.placed_at(words, 2) == "ext" and names.placed_at(words, 2, "16") == "16"
    assert PlaceNames(prompt, numbers=True).placed_words(words)[2] == "640"  # without extents
    assert names.real_words(["tile", "s0.i1", "ext", "ext"])[2:] == ["640", "ext"]  # one per question
    with pytest.raises(LanguageError, match="'ext'"):
        names.check(["tile", "y.ext", "4"])


def test_a_tokenizer_with_extents_encodes_every_tile_extent_of_the_prompt_as_one_word(tmp_path):
    from tlmir.lm.validity import example
    task = Task.from_op(tlmir.ops.dense(8, 24, 40))
    tok = build_tokenizer([task], HW, places=True, extents=True)
    tok.save(str(tmp_path / "tokenizer.json"))
    tok = Tokenizer.load(str(tmp_path / "tokenizer.json"))
    assert tok.extents and "ext" in tok._vocab and not build_tokenizer([task], HW, places=True).extents
    space = SearchSpace(task.outputs, HW)
    for seed in range(4):
        _, trace = space.apply(seed % len(space.sketches), RandomDecider(random.Random(seed)))
        sentence = trace_to_sentence(task, HW, trace)
        ids = tok.encode(sentence, strict=True)
        asked = sum(q.startswith("tile D.") for q, _ in trace.decisions)
        assert asked and ids.count(tok.id("ext")) >= asked
        assert tok.names(sentence.split()).real_words(tok.decode(ids).split()) == sentence.split()
        ex = example(tok, space, task, HW, trace, scope="sentences")
        for p, allowed in zip(ex.positions, ex.allowed):
            assert ex.ids[p] in allowed, (tok.word(ex.ids[p]), [tok.word(i) for i in allowed])
    with pytest.raises(LanguageError, match="names by place"):
        build_tokenizer([task], HW, extents=True)


def test_a_packed_panel_is_tiled_by_reference():
    """The panel a matmul packs B into (`tile B.pack.ax1 72`) asks B's own dimension, so
    its extent reads `ext` as a stage axis's does, and decodes back."""
    task = Task.from_op(tlmir.ops.matmul(40, 72, 56))
    tok = build_tokenizer([task], HW, places=True, extents=True)
    space = SearchSpace(task.outputs, HW)
    packed = 0
    for sketch in range(len(space.sketches)):
        _, trace = space.apply(sketch, RandomDecider(random.Random(sketch)))
        sentence = trace_to_sentence(task, HW, trace)
        words = tok.decode(tok.encode(sentence, strict=True)).split()
        if "tile B.pack.ax1 72" in sentence:
            packed += 1
            assert "tile in1.pack.ax1 ext" in " ".join(words)
        assert tok.names(sentence.split()).real_words(words) == sentence.split()
    assert packed
