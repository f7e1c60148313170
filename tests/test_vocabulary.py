"""The shipped models speak the whole space: every answer any question of any task of
either split can be given, on every CPU class, has a token in their vocabulary."""
import multiprocessing as mp
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tlmir.lm.registry import BASE_MODEL, TOKENIZER_FILE, TUNED_MODEL, model_dir
from tlmir.lm.language import hw_prompt, task_prompt, trace_to_sentence
from tlmir.lm.tokenizer import RULE_HARDWARE, Tokenizer, extent_words, space_words
from tlmir.runtime.target import hardware_variants
from tlmir.schedule.space import SearchSpace
from tlmir.workloads import split_tasks


def _shipped() -> list[Tokenizer]:
    import os
    return [Tokenizer.load(os.path.join(d, TOKENIZER_FILE)) for d in (BASE_MODEL, TUNED_MODEL)
            if os.path.isfile(os.path.join(d, TOKENIZER_FILE))]


def _structure(task) -> tuple:
    """A task's prompt with its numbers blanked: tasks of one structure (an op at other
    shapes) have the same stage, axis and loop names, so the same non-number options."""
    return tuple("#" if w.isdigit() else w for w in task_prompt(task))


def _walk(args: tuple) -> dict:
    """Worker: structure name -> the words of its space (each sketch walked by an
    OptionRecorder on each rule hardware) that the tokenizer lacks."""
    split, names, tok_path = args
    tok = Tokenizer.load(tok_path)
    tasks = {t.name: t for t in split_tasks(split)}
    out = {}
    for name in names:
        words: set = set()
        for hw in RULE_HARDWARE:
            words |= space_words(tasks[name], hw, samples_per_sketch=1, patience=1, places=tok.places)
        lacking = tok.covers(sorted(words))
        if lacking:
            out[name] = lacking[:8]
    return out


@pytest.mark.parametrize("split", ["train", "held-out"])
def test_shipped_vocabulary_covers_every_answer_of_the_split(split):
    """Every option every question offers (OptionRecorder walks of every sketch of one task
    of each structure), and every task's prompt, extents and their divisors: no word of
    any sentence of any task of the split is <unk>."""
    import os
    path = os.path.join(model_dir("default"), TOKENIZER_FILE)
    tok = Tokenizer.load(path)
    tasks = split_tasks(split)
    missing = {}
    by_structure: dict = {}
    for task in tasks:
        by_structure.setdefault(_structure(task), task.name)
        prompt = task_prompt(task)
        names = tok.names(prompt + ["hw"])  # each word read in its clause, as a sentence reads it
        lacking = tok.covers(names.placed_words(prompt) + [names.placed(w) for w in sorted(extent_words(task))])
        if lacking:
            missing[task.name] = lacking[:8]
    names = list(by_structure.values())
    with mp.get_context("spawn").Pool(2) as pool:
        for part in pool.map(_walk, [(split, names[i::2], path) for i in range(2)]):
            missing.update(part)
    assert not missing, f"{len(missing)} tasks have words outside the vocabulary: {list(missing.items())[:5]}"


def test_shipped_vocabulary_speaks_every_cpu_class():
    for tok in _shipped():
        for hw in hardware_variants():
            assert tok.covers(hw_prompt(hw)) == [], hw


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10**6), st.integers(0, len(hardware_variants()) - 1))
def test_random_sentences_of_any_task_on_any_cpu_class_are_spelled(seed, which):
    """A random program of a random task of either split, for a random CPU class and core
    count: every word of its sentence has a token."""
    rng = random.Random(seed)
    tasks = _tasks()
    task, hw = tasks[rng.randrange(len(tasks))], hardware_variants()[which]
    _, trace = SearchSpace(task.outputs, hw).sample(rng)
    for tok in _shipped():
        assert tok.lacking(trace_to_sentence(task, hw, trace)) == [], task.name


_TASKS: list = []


def _tasks() -> list:
    if not _TASKS:
        _TASKS.extend(split_tasks("train") + split_tasks("held-out"))
    return _TASKS
