"""The tensor language speaks of GPU targets: GPU prompts from the presets, GPU sentences
that round-trip, a GPU vocabulary of its own (`tokenizer build --target cuda:sm_XX`)
covering them, and the shipped CPU models' vocabulary untouched."""
import os
import random

from tlmir import ops
from tlmir.lm.language import hw_prompt, sentence_to_trace, trace_to_sentence
from tlmir.lm.registry import TOKENIZER_FILE, model_dir
from tlmir.lm.sample import _task_hardware, task_sentences
from tlmir.lm.tokenizer import Tokenizer, build_tokenizer
from tlmir.runtime.target import GPU_CLASSES, gpu_variants
from tlmir.runtime.task import Task
from tlmir.schedule.rules import question_keywords, rule_set
from tlmir.schedule.space import SearchSpace

SM90 = GPU_CLASSES["sm_90"]
TASKS = [Task.from_op(ops.matmul(64, 64, 64)), Task.from_op(ops.softmax(8, 96)),
         Task.from_op(ops.conv2d_bias_relu(1, 8, 8, 8, 16, 3, 3, padding=1))]


def test_a_gpu_prompt_names_the_architecture_and_its_limits():
    assert hw_prompt(SM90) == ("hw cuda sm_90 sms 132 l1 256K l2 51200K threads 1024 shared 48K "
                               "regs 65536 warp 32 vthread 8").split()


def test_gpu_sentences_round_trip():
    rng = random.Random(0)
    for task in TASKS:
        space = SearchSpace(task.outputs, SM90)
        for _ in range(3):
            _, trace = space.sample(rng)
            sentence = trace_to_sentence(task, SM90, trace)
            assert "hw cuda sm_90" in sentence and sentence_to_trace(sentence) == trace


def test_a_gpu_vocabulary_covers_gpu_sentences_on_every_gpu_class():
    tok = build_tokenizer(TASKS, SM90, samples_per_sketch=1)
    rng = random.Random(1)
    for task in TASKS:
        for hw in gpu_variants():
            _, trace = SearchSpace(task.outputs, hw).sample(rng)
            assert tok.covers(trace_to_sentence(task, hw, trace).split()) == [], (task.name, hw.isa)


def test_the_shipped_vocabulary_is_not_renumbered():
    """The GPU rules ask no new kind of question: the language's reserved words (which a
    newly built tokenizer numbers first) are what they were, and the shipped models
    already have every GPU question's first word."""
    assert rule_set("cuda").questions == ("tile", "vec", "unroll")
    assert question_keywords() == rule_set("cpu").questions
    shipped = Tokenizer.load(os.path.join(model_dir("default"), TOKENIZER_FILE))
    assert shipped.covers(rule_set("cuda").questions) == []


def test_a_gpu_corpus_draws_the_target_first_then_the_other_gpu_classes():
    hws = _task_hardware(random.Random(0), GPU_CLASSES["sm_80"], 3)
    assert hws[0] == GPU_CLASSES["sm_80"] and all(h.kind == "cuda" for h in hws) and len(set(hws)) == 3
    rows = task_sentences(TASKS[0], 4, 0, hws)
    assert len(rows) == 4 and {r["hw"] for r in rows} <= {h.key for h in hws}
    assert all(" hw cuda sm_" in r["sentence"] for r in rows)
