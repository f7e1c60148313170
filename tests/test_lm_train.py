"""pretrain(): artifacts, resuming (exactly), loss masks, init_from, bad inputs."""
import json
import os
import random

import pytest
import torch
import torch.nn.functional as F

from tlmir.errors import ModelError
from tlmir.lm.checkpoint import load_checkpoint, save_checkpoint
from tlmir.lm.model import GPT, GPTConfig
from tlmir.lm.train import lr_at, pretrain

PAD, BOS, EOS, V = 0, 1, 2, 20
CFG = GPTConfig(vocab_size=V, n_layer=2, n_head=2, n_embd=32, block_size=32)


def data(n, seed=0, lo=4, hi=14):
    rnd = random.Random(seed)
    return [[BOS] + [rnd.randrange(3, V) for _ in range(rnd.randint(lo, hi))] + [EOS] for _ in range(n)]


def run(out, steps, logs=None, **kw):
    kw.setdefault("eval_every", 10)
    kw.setdefault("warmup", 5)
    kw.setdefault("batch_size", 8)
    return pretrain(kw.pop("train", data(40)), kw.pop("val", data(8, seed=1)), kw.pop("config", CFG),
                    str(out), PAD, steps, log=(logs.append if logs is not None else None),
                    threads=1, **kw)


def weights(d):
    m, _ = load_checkpoint(str(d))
    return m.state_dict()


def test_lr_schedule():
    assert lr_at(0, 100, 1.0, 10) == pytest.approx(0.1)
    assert lr_at(9, 100, 1.0, 10) == pytest.approx(1.0)
    assert lr_at(10, 100, 1.0, 10) == pytest.approx(1.0)
    assert lr_at(100, 100, 1.0, 10) == pytest.approx(0.1)
    mids = [lr_at(s, 100, 1.0, 10) for s in range(10, 101)]
    assert all(a >= b for a, b in zip(mids, mids[1:]))


def test_artifacts_and_resume_continues_history(tmp_path):
    out = tmp_path / "run"
    threads = torch.get_num_threads()
    logs = []
    s1 = run(out, 20, logs)
    assert torch.get_num_threads() == threads
    assert s1["step"] == 20 and s1["completed"] and s1["resumed_from"] is None
    assert {"model.safetensors", "config.json", "train_state.safetensors", "history.json",
            "loss.png"} <= set(os.listdir(out))
    with open(out / "loss.png", "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    _, meta = load_checkpoint(str(out), expect_vocab_size=V)
    assert meta["train"]["step"] == 20 and meta["train"]["val_loss"] == pytest.approx(s1["val_loss"])
    hist1 = json.load(open(out / "history.json"))
    assert [h["step"] for h in hist1] == [1 * i for i in range(1, 21)]  # log_every = 10 // 10
    assert set(hist1[0]) == {"step", "train_loss", "val_loss", "lr", "tokens_seen", "elapsed_seconds"}
    assert [h["step"] for h in hist1 if h["val_loss"] is not None] == [10, 20]

    logs.clear()
    s2 = run(out, 40, logs)
    assert s2["resumed_from"] == 20 and s2["step"] == 40 and s2["completed"]
    assert any("resuming at step 20" in line for line in logs)
    hist2 = json.load(open(out / "history.json"))
    assert hist2[:20] == hist1
    assert [h["step"] for h in hist2] == list(range(1, 41))
    assert all(a["tokens_seen"] < b["tokens_seen"] for a, b in zip(hist2, hist2[1:]))
    assert all(a["elapsed_seconds"] <= b["elapsed_seconds"] for a, b in zip(hist2, hist2[1:]))
    assert s2["tokens_seen"] == hist2[-1]["tokens_seen"]
    # asking for no more steps than done: nothing happens
    s3 = run(out, 40)
    assert s3["step"] == 40 and json.load(open(out / "history.json")) == hist2


def test_resume_after_time_limit_is_exact(tmp_path):
    cfg = GPTConfig(vocab_size=V, n_layer=2, n_head=2, n_embd=32, block_size=32, dropout=0.1)
    straight = run(tmp_path / "a", 25, config=cfg, seed=3)
    cut = run(tmp_path / "b", 25, config=cfg, seed=3, time_limit=0)  # stops after one step
    assert cut["stopped_early"] and cut["step"] == 1 and not cut["completed"]
    assert load_checkpoint(str(tmp_path / "b"))[1]["train"]["step"] == 1
    again = run(tmp_path / "b", 25, config=cfg, seed=3)
    assert again["resumed_from"] == 1 and again["step"] == 25
    wa, wb = weights(tmp_path / "a"), weights(tmp_path / "b")
    for k in wa:
        assert torch.allclose(wa[k], wb[k], atol=1e-6, rtol=0), k
    assert again["val_loss"] == pytest.approx(straight["val_loss"], abs=1e-6)


def test_loss_falls(tmp_path):
    train = data(8, seed=5)
    s = run(tmp_path / "fit", 150, train=train, val=train, lr=1e-2, eval_every=150, batch_size=8)
    hist = json.load(open(tmp_path / "fit" / "history.json"))
    assert hist[0]["train_loss"] > 2.0 and s["val_loss"] < 0.5 * hist[0]["train_loss"]


def test_loss_mask_scores_only_flagged_positions(tmp_path):
    seqs = data(4, seed=7, lo=6, hi=9)
    k = 4  # only token 4 of each sequence (predicted from tokens 0..3) is scored
    s = run(tmp_path / "m", 1, train=seqs, val=seqs, lr=0.0, batch_size=4,
            loss_mask=lambda seq: [i == k for i in range(len(seq))])
    model, _ = load_checkpoint(str(tmp_path / "m"))
    with torch.no_grad():
        ref = sum(float(F.cross_entropy(model(torch.tensor([q[:-1]]))[0][0, k - 1:k], torch.tensor([q[k]])))
                  for q in seqs) / len(seqs)
    assert s["val_loss"] == pytest.approx(ref, abs=1e-5)
    assert s["train_loss"] == pytest.approx(ref, abs=1e-5)
    # one flag per target (len(seq) - 1) means the same
    s2 = run(tmp_path / "m2", 1, train=seqs, val=seqs, lr=0.0, batch_size=4,
             loss_mask=lambda seq: [i == k - 1 for i in range(len(seq) - 1)])
    assert s2["val_loss"] == pytest.approx(ref, abs=1e-5)
    with pytest.raises(ModelError, match="loss_mask gave 3 flags"):
        run(tmp_path / "m3", 1, train=seqs, val=seqs, loss_mask=lambda seq: [True] * 3)


def test_init_from(tmp_path):
    run(tmp_path / "base", 5)
    s = run(tmp_path / "sft", 0, init_from=str(tmp_path / "base"))
    assert s["step"] == 0
    wa, wb = weights(tmp_path / "base"), weights(tmp_path / "sft")
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    s = run(tmp_path / "sft2", 3, init_from=str(tmp_path / "base"))
    assert s["step"] == 3
    other = GPTConfig(vocab_size=V, n_layer=1, n_head=2, n_embd=32, block_size=32)
    with pytest.raises(ModelError, match="init_from"):
        run(tmp_path / "sft3", 3, config=other, init_from=str(tmp_path / "base"))


def test_bad_inputs(tmp_path):
    with pytest.raises(ModelError, match="block_size 32 allows at most 33"):
        run(tmp_path / "x", 1, train=data(3) + [[BOS] + [3] * 40 + [EOS]])
    with pytest.raises(ModelError, match="token id 25"):
        run(tmp_path / "x", 1, train=[[BOS, 25, EOS]])
    with pytest.raises(ModelError, match="at least 2"):
        run(tmp_path / "x", 1, train=[[BOS]])
    with pytest.raises(ModelError, match="pad_id"):
        pretrain(data(3), [], CFG, str(tmp_path / "x"), 99, 1, log=None)
    run(tmp_path / "r", 2)
    other = GPTConfig(vocab_size=V, n_layer=1, n_head=2, n_embd=32, block_size=32)
    with pytest.raises(ModelError, match="holds a run of config"):
        run(tmp_path / "r", 4, config=other)
    save_checkpoint(GPT(CFG), str(tmp_path / "plain"))
    with pytest.raises(ModelError, match="no training state"):
        run(tmp_path / "plain", 4)
    with open(tmp_path / "r" / "train_state.safetensors", "ab") as f:
        f.write(b"junk")
    with pytest.raises(ModelError, match="interrupted save"):
        run(tmp_path / "r", 4)


def test_packed_sequences_take_rows_in_order():
    import numpy as np

    from tlmir.lm.train import Packed
    p = Packed.of([[1, 2, 3], [4, 5], [6, 7, 8, 9]])
    assert len(p) == 3 and p.lengths().tolist() == [3, 2, 4]
    q = p.take(np.array([2, 0]))
    assert [q[i].tolist() for i in range(len(q))] == [[6, 7, 8, 9], [1, 2, 3]]
    assert len(p.take(np.array([], np.int64))) == 0
