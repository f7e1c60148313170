"""The tensor language (trace <-> sentence, exact round trips) and its word-level tokenizer."""
import random

import pytest

from tlmir import ops
from tlmir.errors import LanguageError, TlmirError
from tlmir.lm.language import (MAX_TOKENS, VERSION, answer_words, decision_words, hw_prompt,
                               length_summary, parse_sentence, prefix_words, sentence_lengths,
                               sentence_to_trace, task_prompt, trace_to_sentence)
from tlmir.lm.tokenizer import OptionRecorder, Tokenizer, build_tokenizer
from tlmir.runtime.target import HardwareParams
from tlmir.runtime.task import Task
from tlmir.schedule.decider import RandomDecider, Trace
from tlmir.schedule.space import SearchSpace

from test_ops_schedules import CASES

HW = HardwareParams()


def op_task(name):
    op = ops.make(name, **CASES[name])
    return Task.from_op(op), SearchSpace(op.outputs, HW)


@pytest.fixture(scope="module")
def workload_tasks():
    from tlmir.workloads import split_tasks
    tasks = split_tasks("train")
    return tasks[::len(tasks) // 10][:10]


@pytest.fixture(scope="module")
def op_tasks():
    return [op_task(name)[0] for name in CASES]


@pytest.fixture(scope="module")
def tokenizer(op_tasks, workload_tasks):
    return build_tokenizer(op_tasks + workload_tasks, HW)


class OfferedWords(RandomDecider):
    """Random answers; collects the words of every option offered."""

    def __init__(self, rng):
        super().__init__(rng)
        self.words = set()

    def _decide(self, question, options):
        for o in options:
            q, a = decision_words(question, o, options=options)
            self.words.update(q + a)
        return super()._decide(question, options)


def random_traces(space, rng, per_sketch):
    for k in range(len(space.sketches)):
        for _ in range(per_sketch):
            yield space.apply(k, RandomDecider(rng))[1]


# ------------------------------------------------------------------------ language

def test_prompt_words_of_a_matmul():
    task, _ = op_task("matmul")
    assert " ".join(task_prompt(task)) == ("task input A 24 20 input B 20 40 stage C reduce sp 24 40 "
                                           "rd 20 read A i k read B k j")
    assert hw_prompt(HW) == "hw cpu avx512 cores 2 vec 16 l1 48K l2 2048K".split()
    assert prefix_words(task, HW)[:2] == ["<s>", VERSION] and prefix_words(task, HW)[-1] == "sketch"


def test_index_expressions_are_one_word():
    task, _ = op_task("conv2d_nchw")
    text = " ".join(task_prompt(task))
    assert "read X n c h-1 w-1" in text and "read pad n rc p+rr q+rs" in text


def test_decision_words():
    # a tile answer is the extent left after each factor
    assert decision_words("tile C.i", (4, 8, 2, 16)) == ("tile C.i 1024 =".split(), "256 32 16 1".split())
    assert decision_words("tile C.i", (4, 8), extent=32)[0] == "tile C.i 32 =".split()
    # the options of `at` are numbered and the answer is the number
    assert decision_words("at pad", "conv.k.outer", options=["root", "conv.k.outer"]) == (
        "at pad 1 root 2 conv.k.outer =".split(), ["2"])
    assert answer_words("at pad", ["root", "inline", "conv.k.outer"]) == [["1"], ["2"], ["3"]]
    assert decision_words("parallel C", 2, options=[1, 2, 3]) == ("parallel C 1 2 3 =".split(), ["2"])
    with pytest.raises(LanguageError, match="not given"):
        decision_words("at pad", "conv.k.outer")
    with pytest.raises(LanguageError, match="not among its options"):
        decision_words("parallel C", 4, options=[1, 2, 3])
    assert decision_words("unroll C", 512) == (["unroll", "C", "="], ["512"])
    assert answer_words("tile C.i", [(1, 4), (2, 2)]) == [["4", "1"], ["2", "1"]]
    assert answer_words("unroll C", [0, 16]) == [["0"], ["16"]]
    with pytest.raises(LanguageError, match="multiplies to 8, not the extent 32"):
        decision_words("tile C.i", (4, 2), extent=32)
    with pytest.raises(LanguageError, match="not of a kind"):
        decision_words("bind C.i", "threadIdx.x")


@pytest.mark.parametrize("name", list(CASES))
def test_op_sentences_round_trip(name):
    task, space = op_task(name)
    rng = random.Random(hash(name) % 1000)
    for trace in random_traces(space, rng, per_sketch=3):
        sentence = trace_to_sentence(task, HW, trace)
        back = sentence_to_trace(sentence)
        assert back == trace, sentence
        assert all(type(a) is type(b) for (_, a), (_, b) in zip(back.decisions, trace.decisions))
        prompt, again = parse_sentence(sentence.split())
        assert prompt == task_prompt(task) + hw_prompt(HW) and again == trace
        assert len(sentence.split()) <= MAX_TOKENS
    space.replay(back)  # the parsed trace still builds a schedule


def test_workload_sentences_round_trip_and_fit(workload_tasks):
    rng = random.Random(0)
    for task in workload_tasks:
        space = SearchSpace(task.outputs, HW)
        for trace in random_traces(space, rng, per_sketch=2):
            sentence = trace_to_sentence(task, HW, trace)
            assert sentence_to_trace(sentence) == trace, sentence
    lengths = sentence_lengths(workload_tasks, HW, n_per_task=4, every_sketch=True)
    summary = length_summary(lengths)
    print(f"\nsentence lengths (words = tokens) over {len(workload_tasks)} training tasks: {summary}")
    assert summary["max"] <= MAX_TOKENS and summary["min"] > 20


def test_trace_json_and_sentence_agree():
    task, space = op_task("softmax")
    _, trace = space.sample(random.Random(3))
    assert sentence_to_trace(trace_to_sentence(task, HW, trace)) == Trace.from_json(trace.to_json())


# ------------------------------------------------------------------------ errors

def _sentence(op="matmul", sketch=2):
    """A fixed sentence: sketch `sketch` of a small `op`, answers drawn with seed 1."""
    task, space = op_task(op)
    _, trace = space.apply(sketch, RandomDecider(1))
    return trace_to_sentence(task, HW, trace)


def test_tile_chains():
    sentence = _sentence()
    assert " tile C.i 24 = 24 8 1 1 " in sentence  # the factors (1, 3, 8, 1) as the extent left
    assert sentence_to_trace(sentence).decisions[0] == ("tile C.i", (1, 3, 8, 1))
    with pytest.raises(LanguageError, match="5 does not divide the 8 left before it"):
        sentence_to_trace(sentence.replace(" tile C.i 24 = 24 8 1 1 ", " tile C.i 24 = 24 8 5 1 "))
    with pytest.raises(LanguageError, match="leaves 2, not 1, after its last factor"):
        sentence_to_trace(sentence.replace(" tile C.i 24 = 24 8 1 1 ", " tile C.i 24 = 24 8 2 2 "))


@pytest.mark.parametrize("edit, message", [
    (lambda s: s.replace(f"<s> {VERSION} ", "<s> v0 ", 1), "sentence is version v0, this tlmir speaks only v4"),
    (lambda s: s.replace(f"<s> {VERSION} ", "<s> v3 ", 1), "sentence is version v3, this tlmir speaks only v4"),
    (lambda s: s.replace(f"<s> {VERSION} ", "<s> ", 1), "no version word"),
    (lambda s: s[len("<s> "):], "does not start with <s>"),
    (lambda s: s[:-len(" </s>")], "does not end with </s>"),
    (lambda s: s.replace(" parallel C 1 2 3 4 = ", " parallel C 1 2 3 4 "), "has no '='"),
    (lambda s: s.replace(" parallel C 1 2 3 4 = 3 ", " parallel C 1 2 = 3 "), "not one of the options"),
    (lambda s: s.replace(" parallel C 1 2 3 4 = ", " parallel C = "), "lists no options"),
    (lambda s: s.replace(" unroll C = ", " unroll C "), "has no '='"),
    (lambda s: s.replace(" sketch 2 ", " "), "no 'sketch'"),
    (lambda s: s.replace(" sketch 2 ", " sketch x "), "sketch id"),
    (lambda s: s.replace(" tile C.i 24 = ", " tile C.i 25 = "), "24 does not divide the 25 left"),
    (lambda s: s.replace(" tile C.i 24 = ", " tile C.i 24 = foo "), "needs positive ints"),
    (lambda s: s.replace(" parallel C 1 2 3 4 = ", " frobnicate C = "), "expected a question"),
    (lambda s: s.rsplit(" ", 2)[0] + " </s>", "no answer after '='"),
    (lambda s: "", "empty sentence"),
    (lambda s: "lorem ipsum dolor", "does not start with <s>"),
])
def test_malformed_sentences_are_refused(edit, message):
    sentence = _sentence()
    assert sentence_to_trace(sentence)
    bad = edit(sentence)
    assert bad != sentence
    with pytest.raises(LanguageError, match=message):
        sentence_to_trace(bad)


def test_numbered_options_of_at():
    sentence = _sentence("avg_pool2d", 0)
    assert " at sum 1 root 2 out.n 3 out.c 4 out.p 5 out.q.outer = 4 " in sentence
    trace = sentence_to_trace(sentence)
    assert ("at sum", "out.p") in trace.decisions
    cases = [(" 5 out.q.outer = 4 ", " 5 out.q.outer = 6 ", "answers '6', not the number of one of the 5 options"),
             (" 5 out.q.outer = 4 ", " 5 out.q.outer = out.p ", "answers 'out.p', not the number"),
             (" 5 out.q.outer = 4 ", " 5 out.q.outer = 0 ", "not the number of one of the 5"),
             (" at sum 1 root 2 out.n ", " at sum 1 root 3 out.n ", "must number its options 1 2 3"),
             (" at sum 1 root 2 out.n ", " at sum root 2 out.n ", "must number its options 1 2 3")]
    for old, new, message in cases:
        assert old in sentence
        with pytest.raises(LanguageError, match=message):
            sentence_to_trace(sentence.replace(old, new, 1))


def test_language_error_is_a_tlmir_error():
    assert issubclass(LanguageError, TlmirError)


# ------------------------------------------------------------------------ tokenizer

def test_tokenizer_covers_every_answer_and_every_offered_option(tokenizer, op_tasks, workload_tasks):
    rng = random.Random(11)
    for task in op_tasks + workload_tasks:
        space = SearchSpace(task.outputs, HW)
        for k in range(len(space.sketches)):
            for _ in range(4):
                d = OfferedWords(rng)
                _, trace = space.apply(k, d)
                words = trace_to_sentence(task, HW, trace).split()
                assert tokenizer.covers(words) == [], task.name
                assert tokenizer.unk_id not in tokenizer.encode(words, strict=True)
                assert tokenizer.covers(d.words) == [], (task.name, tokenizer.covers(d.words))


def test_option_recorder_records_every_tile_factorization():
    from tlmir.schedule.decider import factorizations
    task, space = op_task("matmul")
    words = set()
    space.apply(2, OptionRecorder(random.Random(0), words))
    for f in factorizations(24, 4, 64) + factorizations(20, 2, 64):
        assert {str(x) for x in f} <= words
    assert {"tile", "C.i", "24", "=", "unroll", "512"} <= words


def test_tokenizer_ids_and_special_tokens(tokenizer):
    assert (tokenizer.pad_id, tokenizer.unk_id, tokenizer.bos_id, tokenizer.eos_id) == (0, 1, 2, 3)
    assert [tokenizer.word(i) for i in range(4)] == ["<pad>", "<unk>", "<s>", "</s>"]
    for w in ["sketch", "=", "tile", VERSION, "1024"]:
        assert tokenizer.word(tokenizer.id(w)) == w
    sentence = _sentence()
    ids = tokenizer.encode(sentence)
    assert ids == tokenizer.encode(sentence.split())
    assert ids[0] == tokenizer.bos_id and ids[-1] == tokenizer.eos_id
    assert tokenizer.decode(ids + [tokenizer.pad_id] * 3) == sentence
    assert tokenizer.encode("<s> flibbertigibbet </s>") == [2, 1, 3]
    assert tokenizer.covers(["flibbertigibbet", "tile", "flibbertigibbet"]) == ["flibbertigibbet"]
    with pytest.raises(LanguageError, match="flibbertigibbet"):
        tokenizer.encode(["tile", "flibbertigibbet"], strict=True)
    with pytest.raises(LanguageError, match="outside the vocabulary"):
        tokenizer.word(tokenizer.vocab_size)


def test_a_demonstration_from_unseen_hardware_reads_its_prompt_as_unk(op_tasks):
    """A host whose cache size (1536K) no CPU class of the vocabulary has can still teach
    the model: such prompt words become <unk>, as the generator reads them. An unknown
    decision word still makes the sentence unlearnable."""
    task = op_tasks[0]
    tok = build_tokenizer([task], HW)
    other = HardwareParams(cores=96, l2_kb=1536)
    trace = SearchSpace(task.outputs, other).sample(random.Random(0))[1]
    sentence = trace_to_sentence(task, other, trace)
    assert set(tok.covers(sentence.split())) == {"1536K"}
    assert tok.unknown_decisions(sentence) == []
    ids = tok.encode_demonstration(sentence)
    words = sentence.split()
    assert [tok.word(i) for i in ids] == [w if w != "1536K" else "<unk>" for w in words]
    bad = sentence.replace(" = ", " = flibbertigibbet ", 1)
    assert tok.unknown_decisions(bad) == ["flibbertigibbet"]
    with pytest.raises(LanguageError, match="flibbertigibbet"):
        tok.encode_demonstration(bad)


def test_tokenizer_vocabulary_includes_divisors_and_sketch_ids(op_tasks):
    tok = build_tokenizer(op_tasks[:1], HW)  # matmul 24x40x20
    assert tok.covers([str(d) for d in range(0, 1025)]) == []
    assert tok.covers(["4096", "9999"]) == ["4096", "9999"]


def test_tokenizer_speaks_every_cpu_class_and_core_count(op_tasks):
    from tlmir.runtime.target import hardware_variants
    tok = build_tokenizer(op_tasks[:1], HW)
    for hw in hardware_variants():
        assert tok.covers(hw_prompt(hw)) == [], hw
    assert tok.covers("avx2 avx512 vec 8 16 cores 1 64 32K 48K 256K 512K 1024K 1280K 2048K".split()) == []


def test_tokenizer_save_load_same_ids(tokenizer, tmp_path):
    path = tmp_path / "sub" / "tokenizer.json"
    tokenizer.save(str(path))
    loaded = Tokenizer.load(str(path))
    assert loaded.hash == tokenizer.hash and loaded.vocab_size == tokenizer.vocab_size
    sentence = _sentence()
    assert loaded.encode(sentence) == tokenizer.encode(sentence)
    assert [loaded.word(i) for i in range(loaded.vocab_size)] == [tokenizer.word(i) for i in range(tokenizer.vocab_size)]


def test_tokenizer_hash_is_stable_and_tracks_the_vocabulary(op_tasks):
    a = build_tokenizer(op_tasks[:1], HW)
    b = build_tokenizer(op_tasks[:1], HW)
    c = build_tokenizer(op_tasks[:2], HW)
    assert a.hash == b.hash and a.hash != c.hash


def test_tokenizer_load_errors(tmp_path):
    with pytest.raises(LanguageError, match="does not exist"):
        Tokenizer.load(str(tmp_path / "missing.json"))
    bad = tmp_path / "bad.json"
    bad.write_text('{"version": "1.0", "model": ')
    with pytest.raises(LanguageError, match="corrupt"):
        Tokenizer.load(str(bad))
    bad.write_text('{"not": "a tokenizer"}')
    with pytest.raises(LanguageError, match="corrupt"):
        Tokenizer.load(str(bad))


def test_a_tokenizer_speaks_the_one_version(op_tasks, tmp_path):
    tok = build_tokenizer(op_tasks[:1], HW)
    assert tok.covers([VERSION]) == []
    with pytest.raises(LanguageError, match="version 'v3' cannot be encoded"):
        tok.encode(_sentence().replace(f"<s> {VERSION} ", "<s> v3 ", 1), strict=True)
    old = tmp_path / "old.json"  # a tokenizer of an older language version
    tok.save(str(old))
    old.write_text(old.read_text().replace('"v4"', '"v3"'))
    with pytest.raises(LanguageError, match="does not speak tensor language v4"):
        Tokenizer.load(str(old))
