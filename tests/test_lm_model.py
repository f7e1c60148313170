"""The GPT: shapes, causality, ragged KV-cache stepping, overfitting, checkpoints."""
import json
import os

import pytest
import torch

from tlmir.errors import ModelError, TlmirError
from tlmir.lm.checkpoint import load_checkpoint, save_checkpoint
from tlmir.lm.model import GPT, PRESETS, GPTConfig, KVCache

V = 37


def tiny(block_size=64, **kw) -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=V, n_layer=2, n_head=2, n_embd=32, block_size=block_size, **kw)).eval()


def test_presets_and_config_errors():
    assert set(PRESETS) == {"tiny", "mini", "small", "medium", "gpt2-small"}
    cfg = GPTConfig.preset("small", vocab_size=812, block_size=512)
    assert (cfg.n_layer, cfg.n_head, cfg.n_embd, cfg.block_size, cfg.vocab_size) == (6, 6, 384, 512, 812)
    with pytest.raises(ModelError, match="tiny, mini, small, medium, gpt2-small"):
        GPTConfig.preset("huge", vocab_size=10)
    with pytest.raises(ModelError, match="divisible"):
        GPTConfig(vocab_size=10, n_layer=1, n_head=3, n_embd=32)
    assert issubclass(ModelError, TlmirError)


def test_forward_shapes_tied_head_and_init():
    m = tiny()
    assert m.lm_head.weight is m.wte.weight
    idx = torch.randint(0, V, (3, 10))
    logits, loss = m(idx)
    assert logits.shape == (3, 10, V) and loss is None
    targets = idx.clone()
    targets[:, 5:] = -100
    with torch.no_grad():
        _, loss = m(idx, targets)
        ref = torch.nn.functional.cross_entropy(logits[:, :5].reshape(-1, V), idx[:, :5].reshape(-1))
    assert abs(float(loss) - float(ref)) < 1e-5
    # residual projections start smaller than the rest (1/sqrt(2 n_layer))
    with torch.no_grad():
        assert float(m.h[0].attn.c_proj.weight.std()) < 0.8 * float(m.h[0].attn.c_attn.weight.std())
    with pytest.raises(ModelError, match="block_size"):
        m(torch.zeros(1, 65, dtype=torch.long))


def test_causality():
    m = tiny()
    g = torch.Generator().manual_seed(1)
    idx = torch.randint(0, V, (2, 20), generator=g)
    with torch.no_grad():
        base, _ = m(idx)
        for t in range(19):
            changed = idx.clone()
            changed[:, t + 1] = (changed[:, t + 1] + 1 + t) % V
            out, _ = m(changed)
            assert torch.equal(out[:, : t + 1], base[:, : t + 1]), t
            assert not torch.allclose(out[:, t + 1], base[:, t + 1])


def _full_logits(m: GPT, seq: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return m(torch.tensor([seq]))[0][0]


def _feed(m, cache, seqs, fed, outs, g, max_chunk=5, zero_rows=()):
    """One ragged step: each row feeds a random chunk (0..max_chunk tokens) of its sequence."""
    B = cache.batch_size
    n = [0 if b in zero_rows else int(torch.randint(0, max_chunk + 1, (1,), generator=g))
         for b in range(B)]
    n = [min(k, len(seqs[b]) - fed[b]) for b, k in enumerate(n)]
    width = max(max(n), 1) + 2  # extra padding columns
    tokens = torch.randint(0, V, (B, width), generator=g)  # padding holds junk ids
    for b in range(B):
        tokens[b, : n[b]] = torch.tensor(seqs[b][fed[b]: fed[b] + n[b]], dtype=torch.long)
    logits = m.step(tokens, torch.tensor(n), cache)
    assert logits.shape == (B, width, V)
    for b in range(B):
        outs[b].append(logits[b, : n[b]])
        fed[b] += n[b]
    assert cache.lengths.tolist() == fed


@pytest.mark.parametrize("initial", [4, 128])
def test_ragged_step_matches_full_forward(monkeypatch, initial):
    monkeypatch.setattr(KVCache, "INITIAL", initial)  # 4: the cache grows several times
    m = tiny()
    g = torch.Generator().manual_seed(2)
    B = 6
    seqs = [torch.randint(0, V, (40,), generator=g).tolist() for _ in range(B)]
    cache = m.new_cache(B)
    fed, outs = [0] * B, [[] for _ in range(B)]
    for i in range(12):
        # row 0 never feeds anything early on; row 3 sits out every other step
        _feed(m, cache, seqs, fed, outs, g, zero_rows={0} if i < 4 else ({3} if i % 2 else ()))
    assert fed[0] > 0 and all(f > 5 for f in fed)
    assert cache.allocated >= max(fed) and cache.capacity == 64
    for b in range(B):
        got = torch.cat(outs[b])
        assert torch.allclose(got, _full_logits(m, seqs[b][: fed[b]]), atol=1e-4), b


def test_step_single_tokens_and_zero_width_rows():
    m = tiny()
    cache = m.new_cache(3, capacity=16)
    seq = [[1, 2, 3], [4, 5, 6], [7, 8, 9]]
    rows = []
    for t in range(3):
        n = torch.tensor([1, 1 if t < 2 else 0, 1])
        out = m.step(torch.tensor([[s[t]] for s in seq]), n, cache)
        rows.append(out[:, 0])
    assert cache.lengths.tolist() == [3, 2, 3]
    for b, length in enumerate([3, 2, 3]):
        ref = _full_logits(m, seq[b][:length])
        got = torch.stack([rows[t][b] for t in range(length)])
        assert torch.allclose(got, ref, atol=1e-4)
    # nothing fed anywhere: cache unchanged
    m.step(torch.zeros(3, 2, dtype=torch.long), torch.zeros(3, dtype=torch.long), cache)
    assert cache.lengths.tolist() == [3, 2, 3]


def test_expand_and_select():
    m = tiny()
    g = torch.Generator().manual_seed(3)
    prompt = torch.randint(0, V, (9,), generator=g).tolist()
    cache = m.new_cache(1)
    first = m.step(torch.tensor([prompt]), torch.tensor([len(prompt)]), cache)
    assert torch.allclose(first[0], _full_logits(m, prompt), atol=1e-4)
    B = 5
    big = cache.expand(B, capacity=40)
    assert isinstance(big, KVCache) and big.batch_size == B and big.capacity == 40
    assert big.allocated <= 40
    assert cache.batch_size == 1 and int(cache.lengths[0]) == len(prompt)  # untouched
    conts = [torch.randint(0, V, (20,), generator=g).tolist() for _ in range(B)]
    seqs = [prompt + c for c in conts]
    fed, outs = [len(prompt)] * B, [[] for _ in range(B)]
    for _ in range(3):
        _feed(m, big, seqs, fed, outs, g, max_chunk=3)
    # drop rows 1 and 3, duplicate row 4
    keep = [0, 2, 4, 4]
    ret = big.select(torch.tensor(keep))
    assert ret is big and big.batch_size == 4
    seqs = [seqs[k] for k in keep]
    fed = [fed[k] for k in keep]
    outs = [list(outs[k]) for k in keep]
    for _ in range(4):
        _feed(m, big, seqs, fed, outs, g, max_chunk=3)
    for b in range(4):
        ref = _full_logits(m, seqs[b][: fed[b]])[len(prompt):]
        assert torch.allclose(torch.cat(outs[b]), ref, atol=1e-4), b
    big.select(torch.tensor([True, False, True, False]))
    assert big.batch_size == 2 and big.lengths.tolist() == [fed[0], fed[2]]


def test_step_errors():
    m = tiny(block_size=16)
    cache = m.new_cache(2, capacity=8)
    m.step(torch.zeros(2, 6, dtype=torch.long), torch.tensor([6, 2]), cache)
    with pytest.raises(ModelError, match="capacity"):
        m.step(torch.zeros(2, 3, dtype=torch.long), torch.tensor([3, 0]), cache)
    assert cache.lengths.tolist() == [6, 2]  # a refused step changes nothing
    with pytest.raises(ModelError, match="block_size"):
        m.new_cache(1, capacity=17)
    with pytest.raises(ModelError, match="rows"):
        m.step(torch.zeros(3, 1, dtype=torch.long), torch.ones(3, dtype=torch.long), cache)
    with pytest.raises(ModelError, match="batch-1"):
        cache.expand(4)
    with pytest.raises(ModelError, match="n_new"):
        m.step(torch.zeros(2, 1, dtype=torch.long), torch.tensor([2, 0]), cache)
    with pytest.raises(ModelError, match="vocabulary"):
        m.step(torch.tensor([[V], [0]]), torch.tensor([1, 0]), cache)
    # ids in padding are never looked at, whatever they are
    m.step(torch.tensor([[1, -5], [V + 9, 3]]), torch.tensor([1, 0]), cache)
    assert cache.lengths.tolist() == [7, 2]


def test_overfits_a_tiny_set():
    torch.manual_seed(0)
    m = GPT(GPTConfig(vocab_size=V, n_layer=2, n_head=2, n_embd=32, block_size=32))
    g = torch.Generator().manual_seed(4)
    data = torch.randint(0, V, (8, 17), generator=g)
    opt = torch.optim.AdamW(m.parameters(), lr=3e-3)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny ops: one thread is fastest, and immune to busy machines
    try:
        for _ in range(300):
            _, loss = m(data[:, :-1], data[:, 1:])
            opt.zero_grad()
            loss.backward()
            opt.step()
    finally:
        torch.set_num_threads(threads)
    assert float(loss.detach()) < 0.1


# -- checkpoints ---------------------------------------------------------------------------

def test_checkpoint_round_trip(tmp_path):
    m = tiny()
    with torch.no_grad():
        m.wte.weight.add_(0.5)  # tied head must come back as the same tensor
    d = str(tmp_path / "ckpt")
    save_checkpoint(m, d, extra={"tokenizer_vocab": V, "note": "x"})
    assert sorted(os.listdir(d)) == ["config.json", "model.safetensors"]
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    assert cfg["format"] == "tlmir-gpt" and cfg["version"] == 1 and cfg["n_embd"] == 32
    m2, meta = load_checkpoint(d, expect_vocab_size=V)
    assert meta["tokenizer_vocab"] == V and meta["note"] == "x"
    assert m2.lm_head.weight is m2.wte.weight and not m2.training
    idx = torch.randint(0, V, (2, 12))
    with torch.no_grad():
        assert torch.equal(m(idx)[0], m2(idx)[0])
    with pytest.raises(ModelError, match="clash"):
        save_checkpoint(m, d, extra={"n_layer": 3})


def _fresh(tmp_path, name="c"):
    d = str(tmp_path / name)
    save_checkpoint(tiny(), d)
    return d, os.path.join(d, "model.safetensors"), os.path.join(d, "config.json")


def _edit_config(path, **changes):
    with open(path) as f:
        cfg = json.load(f)
    cfg.update(changes)
    for k in [k for k, v in changes.items() if v is None]:
        del cfg[k]
    with open(path, "w") as f:
        json.dump(cfg, f)


def test_checkpoint_errors(tmp_path):
    with pytest.raises(ModelError, match="does not exist"):
        load_checkpoint(str(tmp_path / "nope"))

    d, w, c = _fresh(tmp_path, "novocab")
    with pytest.raises(ModelError, match=f"checkpoint vocabulary {V} does not match the tokenizer's 40"):
        load_checkpoint(d, expect_vocab_size=40)

    d, w, c = _fresh(tmp_path, "noweights")
    os.unlink(w)
    with pytest.raises(ModelError, match="no model.safetensors") as e:
        load_checkpoint(d)
    assert d in str(e.value)

    d, w, c = _fresh(tmp_path, "noconfig")
    os.unlink(c)
    with pytest.raises(ModelError, match="no config.json"):
        load_checkpoint(d)

    d, w, c = _fresh(tmp_path, "truncated")
    size = os.path.getsize(w)
    with open(w, "r+b") as f:
        f.truncate(size // 2)
    with pytest.raises(ModelError, match="model.safetensors"):
        load_checkpoint(d)
    _edit_config(c, weights_sha256=None)  # without the hash, safetensors itself must refuse
    with pytest.raises(ModelError, match="not a readable safetensors"):
        load_checkpoint(d)

    d, w, c = _fresh(tmp_path, "garbage")
    with open(w, "wb") as f:
        f.write(b"\x00" * 64)
    _edit_config(c, weights_sha256=None)
    with pytest.raises(ModelError, match="not a readable safetensors"):
        load_checkpoint(d)

    d, w, c = _fresh(tmp_path, "format")
    _edit_config(c, format="something-else")
    with pytest.raises(ModelError, match="not a tlmir-gpt"):
        load_checkpoint(d)

    d, w, c = _fresh(tmp_path, "version")
    _edit_config(c, version=2)
    with pytest.raises(ModelError, match="version 2"):
        load_checkpoint(d)

    d, w, c = _fresh(tmp_path, "badjson")
    with open(c, "w") as f:
        f.write("{not json")
    with pytest.raises(ModelError, match="unreadable"):
        load_checkpoint(d)

    d, w, c = _fresh(tmp_path, "shape")  # config says wider than the stored tensors
    _edit_config(c, n_embd=64, weights_sha256=None)
    with pytest.raises(ModelError, match="shape"):
        load_checkpoint(d)

    d, w, c = _fresh(tmp_path, "layers")  # config says more layers than stored
    _edit_config(c, n_layer=3, weights_sha256=None)
    with pytest.raises(ModelError, match="missing"):
        load_checkpoint(d)

    d, w, c = _fresh(tmp_path, "swapped")  # weights of another model under this config
    save_checkpoint(GPT(GPTConfig(vocab_size=V, n_layer=2, n_head=2, n_embd=32, block_size=32)),
                    str(tmp_path / "other"))
    os.replace(str(tmp_path / "other" / "model.safetensors"), w)
    with pytest.raises(ModelError, match="hash"):
        load_checkpoint(d)
