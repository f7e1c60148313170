"""`tlmir tokenizer grow`: a model's vocabulary takes the words a new rule brings without
moving any old word, and the model reads every old sentence exactly as before."""
import json
import os

import numpy as np
import torch

from tlmir.lm.checkpoint import load_checkpoint, save_checkpoint
from tlmir.lm.commands import grow_vocabulary
from tlmir.lm.model import GPT, GPTConfig
from tlmir.lm.registry import TOKENIZER_FILE
from tlmir.lm.tokenizer import Tokenizer
from tlmir.search.rankers import DEFAULT_EVALUATOR, evaluator_dir
from tlmir.search.world_model import WorldModelConfig
from tlmir.search.world_train import Evaluator, train_evaluator

from test_world_model import _toy_programs

# the evaluator's vocabulary, as written: it lacks the quality prompt's word, which SFT adds
TOK = Tokenizer.load(os.path.join(evaluator_dir(DEFAULT_EVALUATOR), TOKENIZER_FILE))
NEW = ["zz.n.outer.k.outer.fused", "zz.k.outer.outer", "2000000", "quality"]


def test_a_model_grows_by_the_words_it_lacks_and_keeps_its_old_ones(tmp_path):
    d = str(tmp_path / "tlm")
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=TOK.vocab_size, n_layer=1, n_head=2, n_embd=16, block_size=32)).eval()
    save_checkpoint(model, d, extra={"note": "kept"})
    TOK.save(os.path.join(d, TOKENIZER_FILE))
    words = TOK.extended(NEW)
    # in number-then-name order; the quality prompt's word is left to SFT
    assert grow_vocabulary(d, words) == ["2000000", "zz.k.outer.outer", "zz.n.outer.k.outer.fused"]
    tok = Tokenizer.load(os.path.join(d, TOKENIZER_FILE))
    assert tok.vocab_size == TOK.vocab_size + 3 and tok.covers(NEW) == ["quality"]
    assert all(tok.id(TOK.word(i)) == i for i in range(TOK.vocab_size))
    grown, meta = load_checkpoint(d, expect_vocab_size=tok.vocab_size)
    assert meta["note"] == "kept"
    idx = torch.randint(0, TOK.vocab_size, (2, 12))
    with torch.no_grad():
        assert torch.allclose(grown(idx)[0][..., :TOK.vocab_size], model(idx)[0], atol=1e-6)
    assert grow_vocabulary(d, words) == []  # nothing left to add


def test_an_evaluator_grows_and_scores_old_sentences_as_before(tmp_path):
    d = str(tmp_path / "ev")
    progs = _toy_programs(8)
    ev = train_evaluator(progs, TOK, WorldModelConfig(TOK.vocab_size, d_model=16), steps=2)
    ev.save(d, {"trained_on": "toy"})
    assert len(grow_vocabulary(d, TOK.extended(NEW))) == 3
    again = Evaluator.load(d)
    assert again.tok.vocab_size == TOK.vocab_size + 3
    with open(os.path.join(d, "config.json")) as f:
        assert json.load(f)["trained_on"] == "toy"
    sentences = [p.sentence for p in progs]
    np.testing.assert_allclose(again.score(sentences), ev.score(sentences), rtol=1e-5, atol=1e-6)
