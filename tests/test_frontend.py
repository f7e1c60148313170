"""The PyTorch front end: import gives the expected tasks, compiled modules equal eager,
unsupported ops fall back by name, shapes are static, records are reused."""
import math

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from tlmir import frontend, zoo  # noqa: E402
from tlmir.cli import main  # noqa: E402
from tlmir.errors import FrontendError  # noqa: E402
from tlmir.runtime.records import RecordDB  # noqa: E402
from tlmir.workloads import cnn  # noqa: E402


def _names(imported):
    return sorted(t.name for t, _ in imported.tasks())


def _close(a, b, tol=1e-4):
    scale = max(1.0, float(b.abs().max()))
    assert float((a - b).abs().max()) <= tol * scale


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(24, 40), nn.Linear(40, 8)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


class ConvBlock(nn.Module):
    """conv-BN-ReLU, then conv-BN (no ReLU) + residual + ReLU, as a ResNet block."""
    def __init__(self):
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(8, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8)
        self.c2, self.b2 = nn.Conv2d(8, 8, 1, bias=False), nn.BatchNorm2d(8)
        for bn in (self.b1, self.b2):   # BN statistics other than identity, so folding matters
            bn.running_mean.uniform_(-1, 1)
            bn.running_var.uniform_(0.5, 2)
            bn.weight.data.uniform_(0.5, 1.5)
            bn.bias.data.uniform_(-1, 1)

    def forward(self, x):
        y = F.relu(self.b1(self.c1(x)))
        return F.relu(self.b2(self.c2(y)) + x)


class Attention(nn.Module):
    """One pre-LN self-attention block with a GELU MLP."""
    def __init__(self, d=32, heads=4):
        super().__init__()
        self.h, self.d = heads, d
        self.ln = nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc = nn.Linear(d, 2 * d)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(self.ln(x)).split(d, dim=-1)
        q, k, v = (t.reshape(b, s, self.h, d // self.h).transpose(1, 2) for t in (q, k, v))
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d // self.h), dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, s, d)
        x = x + self.proj(y)
        return F.gelu(self.fc(x))


def test_mlp_tasks_and_numerics():
    torch.manual_seed(0)
    m, x = MLP().eval(), torch.randn(5, 24)
    imported = frontend.import_model(m, (x,))
    assert _names(imported) == ["dense_bias_m5_n8_k40", "dense_bias_relu_m5_n40_k24"]
    cm = frontend.compile(imported, None, strategy=None)
    _close(cm(x), m(x).detach())


def test_conv_bn_relu_block_folds_batchnorm():
    torch.manual_seed(0)
    m, x = ConvBlock().eval(), torch.randn(1, 8, 9, 9)
    imported = frontend.import_model(m, (x,))
    assert _names(imported) == ["add_relu_1x8x9x9", "conv2d_bias_1x8x9x9_k8_1x1_s1_p0",
                                "conv2d_bias_relu_1x8x9x9_k8_3x3_s1_p1"]
    assert imported.fallbacks() == {}
    cm = frontend.compile(imported, None, strategy=None)
    _close(cm(x), m(x).detach())


def test_attention_block():
    torch.manual_seed(0)
    m, x = Attention().eval(), torch.randn(2, 16, 32)
    imported = frontend.import_model(m, (x,))
    names = _names(imported)
    assert len(imported.part.subgraphs) == 7      # Q·Kᵀ takes the / sqrt(d), proj the residual add
    assert not any(n.startswith("ewise") for n in names)
    for want in ("layernorm_32x32_eps1e-05", "dense_bias_m32_n96_k32", "batch_matmul_scale_b8_m16_n16_k8",
                 "softmax_128x16", "batch_matmul_b8_m16_n8_k16", "dense_bias_m32_n32_k32_add",
                 "dense_bias_gelu_m32_n64_k32"):
        assert want in names, names
    cm = frontend.compile(imported, None, strategy=None)
    _close(cm(x), m(x).detach())
    assert cm.copies > 0          # q, k, v are strided views: copied before their kernels


def test_unsupported_op_falls_back_and_is_named():
    class Odd(nn.Module):
        def forward(self, x):
            return torch.cumsum(F.relu(x), dim=1) * 2.0

    m, x = Odd(), torch.randn(4, 6)
    imported = frontend.import_model(m, (x,))
    assert imported.fallbacks() == {"fallback:cumsum": 1}
    cm = frontend.compile(imported, None, strategy=None)
    _close(cm(x), m(x))
    report = cm.report((x,), repeat=1, eager=m)
    assert "PyTorch fallbacks: cumsum x1" in report
    last = report.splitlines()[-1]  # which way is better, in words
    assert last.startswith("end to end: tlmir ") and (last.endswith("x faster than PyTorch")
                                                      or last.endswith("x slower than PyTorch"))


def test_wrong_shape_is_refused_not_miscomputed():
    m, x = MLP().eval(), torch.randn(5, 24)
    cm = frontend.compile(m, (x,), strategy=None)
    with pytest.raises(FrontendError, match=r"input 0 has shape \(6, 24\); it was compiled for \(5, 24\)"):
        cm(torch.randn(6, 24))
    with pytest.raises(FrontendError, match="expected 1 input"):
        cm(x, x)
    y = cm(x.double())             # converted once, counted
    assert cm.conversions == 1 and y.dtype == torch.float32


def test_torch_compile_backend_and_dynamic_shapes():
    torch.manual_seed(0)
    m, x = ConvBlock().eval(), torch.randn(1, 8, 9, 9)
    fast = torch.compile(m, backend="tlmir", dynamic=False, options={"strategy": None})
    torch.testing.assert_close(fast(x), m(x), rtol=1e-3, atol=1e-3)
    x2 = torch.randn(2, 8, 9, 9)               # a new shape: a static recompile
    torch.testing.assert_close(fast(x2), m(x2), rtol=1e-3, atol=1e-3)
    torch._dynamo.reset()
    dyn = torch.compile(m, backend="tlmir", dynamic=True, options={"strategy": None})
    with pytest.raises(Exception, match="dynamic shapes"):
        dyn(x)
    torch._dynamo.reset()


def test_tuned_compile_reuses_records_and_keeps_a_faster_default(tmp_path, monkeypatch):
    torch.manual_seed(0)
    m, x = MLP().eval(), torch.randn(5, 24)
    db = str(tmp_path / "mlp.db")
    cm = frontend.compile(m, (x,), strategy="random", trials_per_task=4, db=db, progress=False)
    _close(cm(x), m(x).detach())
    kept_default = "untuned default (faster than random's best of 4)"
    assert set(cm.compiled.sources.values()) <= {"random, 4 measured", kept_default}
    rdb = RecordDB(db)
    before = rdb.count()
    rdb.close()
    times = iter([2.0, 1.0] * len(cm.compiled.sources))  # each task: its tuned program, then its default
    monkeypatch.setattr(frontend, "kernel_seconds", lambda task, kernel, repeat: next(times))
    again = frontend.compile(m, (x,), strategy="random", trials_per_task=4, db=db, progress=False)
    rdb = RecordDB(db)
    assert rdb.count() == before >= 8     # nothing measured twice
    rdb.close()
    assert set(again.compiled.sources.values()) == {kept_default}
    _close(again(x), m(x).detach())


def test_resnet50_import_matches_the_hand_table():
    """The zoo ResNet-50 gives the hand table's tasks, except that a conv followed by BN and
    no ReLU keeps its folded bias (conv2d_bias) where the table drops it (conv2d_nchw)."""
    imported = frontend.import_model(zoo.resnet50().eval(), (torch.randn(1, 3, 224, 224),))
    got = {t.name.replace("conv2d_bias_1x", "conv2d_nchw_1x"): w for t, w in imported.tasks()}
    want = {t.name: w for t, w in cnn.resnet50().tasks()}
    assert got == want
    hand_keys = {t.key for t, _ in cnn.resnet50().tasks()}
    same = [t for t, _ in imported.tasks() if t.key in hand_keys]
    assert len(same) == len(want) - sum(1 for n in want if n.startswith("conv2d_nchw"))


def test_cli_import(capsys):
    assert main(["import", "zoo:squeezenet1_1", "--input", "1,3,64,64"]) == 0
    out = capsys.readouterr().out
    assert "squeezenet1_1:" in out and "conv2d_bias_relu_1x3x64x64_k64_3x3_s2_p0" in out
    assert main(["import", "zoo:resnet9", "--input", "1,3,64,64"]) == 2
    assert "unknown model 'resnet9'" in capsys.readouterr().err
    assert main(["import", "zoo:resnet18", "--input", "1,x"]) == 2
    assert "--input: expected positive comma-separated sizes" in capsys.readouterr().err


def test_transformers_bert_from_config():
    """A transformers BERT (built from its config, random weights) runs on tlmir kernels;
    only the embedding gather stays in PyTorch."""
    pytest.importorskip("transformers")
    from tlmir.frontend.models import load
    model, inputs, name = load("transformers:bert-tiny", "1,16")
    imported = frontend.import_model(model, inputs, name)
    assert imported.fallbacks() == {"fallback:embedding": 1}
    names = _names(imported)
    assert "dense_bias_gelu_m16_n512_k128" in names and "softmax_32x16" in names
    cm = frontend.compile(imported, None, strategy=None)
    with torch.no_grad():
        ref = model(*inputs).last_hidden_state
    _close(cm(*inputs).last_hidden_state, ref)


def test_llama_layer_runs_without_fallbacks():
    """RMSNorm's mean of squares is a row reduction, SwiGLU's silu and product are the
    epilogues of the gate and up projections, the residual adds those of the output
    projections: no PyTorch op left."""
    torch.manual_seed(0)
    m, x = zoo.llama_decoder_layer(dim=64, n_heads=4, hidden=128).eval(), torch.randn(1, 8, 64)
    imported = frontend.import_model(m, (x,))
    assert imported.fallbacks() == {}
    names = _names(imported)
    for want in ("row_mean_8x64", "dense_m8_n128_k64_silu", "dense_m8_n128_k64_mul", "dense_m8_n64_k128_add"):
        assert want in names, names
    cm = frontend.compile(imported, None, strategy=None)
    _close(cm(x), m(x).detach())


def test_whole_tensor_reductions_fall_back_instead_of_failing():
    class Reduce(nn.Module):
        def forward(self, x):
            return torch.relu(x).mean() + x.mean(dim=(2, 3)).sum()

    m, x = Reduce(), torch.randn(1, 4, 6, 6)
    cm = frontend.compile(m, (x,), strategy=None)
    _close(cm(x), m(x))
    assert cm.fallback_ops() == {"mean": 1, "sum": 1, "add": 1}


class Conv1D(nn.Module):
    """transformers' Conv1D (GPT-2): addmm(b, x, W) with W [in, out], then GELU."""
    def __init__(self, nx=24, nf=40, alpha=1.0, beta=1.0):
        super().__init__()
        self.w, self.b = nn.Parameter(torch.randn(nx, nf)), nn.Parameter(torch.randn(nf))
        self.alpha, self.beta = alpha, beta

    def forward(self, x):
        y = torch.addmm(self.b, x.view(-1, x.shape[-1]), self.w, alpha=self.alpha, beta=self.beta)
        return F.gelu(y).view(*x.shape[:-1], -1)


def test_addmm_is_a_dense_with_its_weight_transposed_once():
    torch.manual_seed(0)
    x = torch.randn(2, 3, 24)
    for m, want in ((Conv1D(), "dense_bias_gelu_m6_n40_k24"),
                    (Conv1D(alpha=0.5, beta=2.0), "dense_bias_gelu_m6_n40_k24"),
                    (Conv1D(beta=0.0), "dense_gelu_m6_n40_k24")):
        imported = frontend.import_model(m.eval(), (x,))
        assert _names(imported) == [want] and imported.fallbacks() == {}
        cm = frontend.compile(imported, None, strategy=None)
        _close(cm(x), m(x).detach())


class NewGELU(nn.Module):
    """GPT-2's MLP: Conv1D, then the tanh-GELU written out (x read three times), then a
    scale by a per-column vector and a residual add."""
    def __init__(self, d=24, h=40):
        super().__init__()
        self.fc, self.scale = Conv1D(d, h), nn.Parameter(torch.rand(h) + 0.5)
        self.fc.forward = lambda x: torch.addmm(self.fc.b, x.view(-1, x.shape[-1]), self.fc.w).view(
            *x.shape[:-1], -1)

    def forward(self, x, r):
        y = self.fc(x)
        g = 0.5 * y * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (y + 0.044715 * torch.pow(y, 3.0))))
        return g * self.scale + r


def test_dense_takes_the_element_wise_region_after_it_as_its_epilogue():
    torch.manual_seed(0)
    m, x, r = NewGELU().eval(), torch.randn(2, 3, 24), torch.randn(2, 3, 40)
    imported = frontend.import_model(m, (x, r))
    assert _names(imported) == ["dense_bias_m6_n40_k24_mul_pow_mul_add_etc"] and imported.fallbacks() == {}
    task = imported.part.subgraphs[0].task
    assert [tuple(t.shape) for t in task.inputs] == [(6, 24), (40, 24), (40,), (40,), (6, 40)]
    cm = frontend.compile(imported, None, strategy=None)
    _close(cm(x, r), m(x, r).detach())

    class Escapes(nn.Module):   # the GELU's input is also returned: no single exit, no fusion
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(24, 40)

        def forward(self, x):
            y = self.fc(x)
            return y, y * torch.sigmoid(y)
    m = Escapes().eval()
    imported = frontend.import_model(m, (x,))
    assert "dense_bias_m6_n40_k24" in _names(imported)
    cm = frontend.compile(imported, None, strategy=None)
    for a, b in zip(cm(x), m(x)):
        _close(a, b.detach())


def test_addmm_of_two_graph_values_falls_back_by_name():
    class Two(nn.Module):
        def forward(self, b, x, w):
            return torch.addmm(b, x, w)

    args = (torch.randn(5), torch.randn(3, 4), torch.randn(4, 5))
    cm = frontend.compile(Two(), args, strategy=None)
    assert cm.fallback_ops() == {"addmm": 1}
    _close(cm(*args), Two()(*args))


def test_transformers_gpt2_maps_addmm_and_drops_assertions():
    """GPT-2's Conv1D layers (addmm) are dense tasks; export's `_assert_tensor_metadata`
    checks are dropped at capture: only the embedding gather stays in PyTorch."""
    pytest.importorskip("transformers")
    from tlmir.frontend.models import load
    model, (ids,), name = load("transformers:gpt2-tiny", "1,16")
    imported = frontend.import_model(model, (ids,), name)
    assert imported.fallbacks() == {"fallback:embedding": 1}
    assert "dense_bias_m16_n192_k64" in _names(imported)   # the qkv projection
    cm = frontend.compile(imported, None, strategy=None)
    with torch.no_grad():
        ref = model(ids).last_hidden_state
    _close(cm(ids).last_hidden_state, ref)
