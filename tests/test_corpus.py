"""The pre-training corpus: sharded, resumable, de-duplicated, several CPU classes per task."""
import gzip
import json
import os

import pytest

from tlmir.errors import TlmirError
from tlmir.lm.language import parse_sentence
from tlmir.lm.sample import corpus_shards, encode_corpus, read_sentences, sample_corpus
from tlmir.lm.tokenizer import build_tokenizer
from tlmir.runtime.target import host_hardware
from tlmir.workloads import split_tasks

N_TASKS = 6


def _sample(out, **kw):
    args = dict(per_task=24, hw_per_task=3, shard_tasks=2, workers=2, limit=N_TASKS, log=lambda m: None)
    return sample_corpus("train", str(out), **{**args, **kw})


def _lines(path):
    with gzip.open(path, "rt") as fh:
        return fh.read().splitlines()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    out = tmp_path_factory.mktemp("corpus")
    assert _sample(out) > 0
    return out


def test_corpus_shards_hold_distinct_sentences_of_each_task_on_several_cpus(corpus):
    shards = corpus_shards(str(corpus))
    assert len(shards) == N_TASKS // 2
    records = [json.loads(line) for s in shards for line in _lines(s)]
    keys = [t.key for t in split_tasks("train")[:N_TASKS]]
    assert {r["key"] for r in records} == set(keys)
    for key in keys:
        mine = [r for r in records if r["key"] == key]
        sentences = [r["sentence"] for r in mine]
        assert len(sentences) == len(set(sentences)) and 0 < len(sentences) <= 24
        hws = {r["hw"] for r in mine}
        assert host_hardware().key in hws and len(hws) == 3
        for s in sentences[:3]:
            prompt, _ = parse_sentence(s)
            assert "hw" in prompt


def test_a_killed_run_draws_only_the_missing_shards_and_the_same_sentences(corpus, tmp_path):
    again = tmp_path / "again"
    again.mkdir()
    for name in os.listdir(corpus):
        if name.startswith(("shard-", "corpus.json")):
            (again / name).write_bytes((corpus / name).read_bytes())
    lost = corpus_shards(str(again))[1]
    os.remove(lost)
    torn = os.path.join(str(again), "." + os.path.basename(lost) + ".k3x9.tmp")
    with open(torn, "w") as fh:  # a shard in flight when the run was killed (atomic_write's name)
        fh.write("torn")
    assert _sample(again) == len(_lines(os.path.join(corpus, os.path.basename(lost))))
    assert _lines(lost) == _lines(os.path.join(corpus, os.path.basename(lost)))
    assert not [n for n in os.listdir(again) if ".tmp" in n]
    assert _sample(again) == 0  # complete: nothing drawn


def test_a_corpus_is_not_resumed_with_other_parameters(corpus):
    with pytest.raises(TlmirError, match="other per_task"):
        _sample(corpus, per_task=25)


def test_encoding_is_cached_per_tokenizer(corpus):
    tok = build_tokenizer(split_tasks("train")[:N_TASKS])
    packed, where = encode_corpus(str(corpus), tok, log=lambda m: None)
    records = read_sentences(str(corpus))
    assert len(packed) == len(records) == len(where)
    assert tok.decode(packed[0].tolist()) == records[0]["sentence"]
    assert os.path.exists(corpus / f"tokens-{tok.hash}.npz")
    again, where2 = encode_corpus(str(corpus), tok, log=lambda m: None)
    assert (again.ids == packed.ids).all() and (where2 == where).all()
    assert 0 <= where.min() and where.max() < 1


def test_missing_corpus_is_a_clear_error(tmp_path):
    with pytest.raises(TlmirError, match="no corpus shards"):
        read_sentences(str(tmp_path))
