"""scaled_dot_product_attention runs on tlmir kernels: capture decomposes it into the
matmuls (the first with the scale and mask as its epilogue) and the softmax, masks (additive, boolean, causal)
give eager's values, fully masked rows give zeros, dropout stays in PyTorch by name."""
import math

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from tlmir import frontend  # noqa: E402
from tlmir.frontend.attention import safe_softmax  # noqa: E402


def _names(imported):
    return sorted(t.name for t, _ in imported.tasks())


def _close(a, b, tol=1e-5):
    assert a.shape == b.shape
    assert float((a - b).abs().max()) <= tol * max(1.0, float(b.abs().max()))


class SelfAttention(nn.Module):
    """qkv projection, SDPA over 4 heads (of `kv_heads` key / value heads), projection;
    `mask` is a constant buffer, or the forward's second argument."""
    def __init__(self, d=32, heads=4, kv_heads=4, mask=None, **sdpa):
        super().__init__()
        self.h, self.kvh, self.dh, self.sdpa = heads, kv_heads, d // heads, sdpa
        self.q, self.kv = nn.Linear(d, d), nn.Linear(d, 2 * kv_heads * (d // heads))
        self.proj = nn.Linear(d, d)
        self.register_buffer("mask", mask)

    def forward(self, x, mask=None):
        b, s, d = x.shape
        q = self.q(x).reshape(b, s, self.h, self.dh).transpose(1, 2)
        k, v = (t.reshape(b, s, self.kvh, self.dh).transpose(1, 2)
                for t in self.kv(x).split(self.kvh * self.dh, dim=-1))
        mask = self.mask if mask is None else mask
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, **self.sdpa)
        return self.proj(y.transpose(1, 2).reshape(b, s, d))


def _check(m, *inputs):
    imported = frontend.import_model(m.eval(), inputs)
    cm = frontend.compile(imported, None, strategy=None)
    with torch.no_grad():
        _close(cm(*inputs), m(*inputs))
    return imported


def test_unmasked_and_causal_attention_are_batch_matmul_softmax_batch_matmul():
    torch.manual_seed(0)
    x = torch.randn(2, 8, 32)
    plain = _check(SelfAttention(), x)
    assert "batch_matmul_scale_b8_m8_n8_k8" in _names(plain)       # the 1/sqrt(8) scale
    causal = _check(SelfAttention(is_causal=True, scale=0.2), x)
    for imported in (plain, causal):
        names = _names(imported)
        assert {"batch_matmul_b8_m8_n8_k8", "softmax_64x8"} <= set(names), names
        assert imported.fallbacks() == {} and not any(n.startswith("ewise") for n in names)
        assert not any("safe" in n for n in names)     # no row can be all masked
    assert "batch_matmul_scale_mask_b8_m8_n8_k8" in _names(causal)  # the -inf above the diagonal


def test_constant_boolean_mask_keeping_every_row_is_a_plain_softmax():
    torch.manual_seed(0)
    x, keep = torch.randn(1, 8, 32), torch.rand(8, 8) > 0.5
    keep[:, 0] = True
    imported = _check(SelfAttention(mask=keep), x)
    assert "softmax_32x8" in _names(imported) and imported.fallbacks() == {}


def test_fully_masked_rows_give_zeros_like_eager():
    torch.manual_seed(0)
    x = torch.randn(2, 8, 32)
    keep = torch.rand(2, 1, 8, 8) > 0.5
    keep[0, 0, 3] = False                                # query 3 of batch 0 sees no key
    imported = _check(SelfAttention(mask=keep), x)
    assert "safe_softmax_64x8" in _names(imported) and imported.fallbacks() == {}
    additive = torch.randn(8, 8)
    additive[5] = -math.inf
    m = SelfAttention()                                  # a float mask given at call time
    imported = _check(m, x, additive)
    names = _names(imported)
    assert "safe_softmax_64x8" in names and "batch_matmul_scale_mask_b8_m8_n8_k8" in names
    cm = frontend.compile(imported, None, strategy=None)
    other = torch.randn(8, 8).masked_fill(torch.rand(8, 8) > 0.7, -math.inf)
    with torch.no_grad():
        _close(cm(x, other), m(x, other))


def test_safe_softmax_reference_zeroes_masked_rows():
    task = safe_softmax(3, 4)
    x = torch.tensor([[0.0, 1.0, -math.inf, 2.0], [-math.inf] * 4, [3.0, 3.0, 3.0, 3.0]]).numpy()
    out = task.reference(x)[0]
    assert (out[1] == 0).all() and abs(out[2] - 0.25).max() < 1e-12
    assert abs(out[0] - torch.softmax(torch.from_numpy(x[0]).double(), -1).numpy()).max() < 1e-12


def test_grouped_query_attention():
    torch.manual_seed(0)
    x = torch.randn(1, 8, 32)
    imported = _check(SelfAttention(kv_heads=2, enable_gqa=True), x)
    assert "batch_matmul_b4_m8_n8_k8" in _names(imported) and imported.fallbacks() == {}


def test_dropout_stays_in_pytorch_by_name():
    torch.manual_seed(0)
    m, x = SelfAttention(dropout_p=0.5).eval(), torch.randn(1, 8, 32)
    imported = frontend.import_model(m, (x,))
    assert imported.fallbacks() == {"fallback:scaled_dot_product_attention": 1}
    assert not any("batch_matmul" in n for n in _names(imported))
    cm = frontend.compile(imported, None, strategy=None)
    assert "PyTorch fallbacks: scaled_dot_product_attention x1" in cm.report((x,), repeat=1)
    torch.manual_seed(1)
    got = cm(x)
    torch.manual_seed(1)                                 # the same dropout draw as eager's
    with torch.no_grad():
        _close(got, m(x))


def test_causal_and_a_mask_together():
    """Eager adds both masks, a constant one or one given at call time."""
    torch.manual_seed(0)
    x, keep = torch.randn(1, 8, 32), torch.rand(8, 8) > 0.5
    keep[2] = False
    imported = _check(SelfAttention(mask=keep, is_causal=True), x)
    assert "safe_softmax_32x8" in _names(imported)
    imported = _check(SelfAttention(is_causal=True), x, torch.randn(8, 8))
    assert "safe_softmax_32x8" in _names(imported) and imported.fallbacks() == {}


@pytest.mark.parametrize("spec", ["transformers:bert-tiny", "transformers:llama-tiny"])
def test_transformers_sdpa_attention_runs_on_tlmir(spec):
    """transformers' default attention (SDPA) with its causal or padding mask: both
    matmuls and the softmax are tlmir tasks, and the model equals eager."""
    pytest.importorskip("transformers")
    from tlmir.frontend.models import load
    model, inputs, name = load(spec, "1,16")
    imported = frontend.import_model(model, inputs, name)
    heads = 2 if "bert" in spec else 4
    names = _names(imported)
    assert f"softmax_{heads * 16}x16" in names, names
    assert sum(w for t, w in imported.tasks() if t.name.startswith("batch_matmul")) == 2 * 2  # 2 layers
    assert imported.fallbacks() == {"fallback:embedding": 1}     # export's assertions dropped
    cm = frontend.compile(imported, None, strategy=None)
    with torch.no_grad():
        ref = model(*inputs).last_hidden_state
    _close(cm(*inputs).last_hidden_state, ref, 1e-4)


def test_masks_fused_as_epilogue_or_left_element_wise():
    """A call-time mask of the scores' shape per batch (b, 1, L, S) is the batch matmul's
    epilogue input; one broadcast along the queries (b, 1, 1, S) stays an element-wise add."""
    torch.manual_seed(0)
    x, m = torch.randn(2, 8, 32), SelfAttention()
    imported = _check(m, x, torch.randn(2, 1, 8, 8))
    assert "batch_matmul_scale_mask_b8_m8_n8_k8" in _names(imported)
    imported = _check(m, x, torch.randn(2, 1, 1, 8))
    names = _names(imported)
    assert "batch_matmul_scale_b8_m8_n8_k8" in names and "ewise_add_2x4x8x8" in names


def test_scores_epilogue_leaves_what_it_cannot_compute():
    """A division by zero, scaled scores added to themselves (the scale fuses, the add
    not) and a mask that widens the scores' batch stay element-wise stages; all equal eager."""
    class Odd(nn.Module):
        def forward(self, q, k, m):
            kt = k.transpose(-1, -2)
            twice = (q @ kt) * 2.0
            return ((q @ kt) / 0.0).nan_to_num(), twice + twice, (q @ kt) + m

    torch.manual_seed(0)
    q, k, m = torch.randn(1, 2, 4, 8), torch.randn(1, 2, 4, 8), torch.randn(3, 2, 4, 4)
    imported = frontend.import_model(Odd(), (q, k, m))
    names = _names(imported)
    assert {"batch_matmul_b2_m4_n4_k8", "batch_matmul_scale_b2_m4_n4_k8", "ewise_div_1x2x4x4",
            "add_1x2x4x4", "ewise_add_3x2x4x4"} <= set(names) and not any("mask" in n for n in names)
    cm = frontend.compile(imported, None, strategy=None)
    for got, want in zip(cm(q, k, m), Odd()(q, k, m)):
        _close(got, want)
