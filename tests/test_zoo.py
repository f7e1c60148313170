"""The model zoo: torchvision's parameter counts and state-dict names, forward shapes at
small inputs, torch.export, the LLaMA layer's causality, unknown names."""
import pytest

torch = pytest.importorskip("torch")

from tlmir import zoo  # noqa: E402
from tlmir.errors import DefinitionError, FrontendError, TlmirError  # noqa: E402

# torchvision's numbers (and the DCGAN example's / a LLaMA-7B layer's).
PARAMS = {
    "resnet18": 11_689_512,
    "resnet34": 21_797_672,
    "resnet50": 25_557_032,
    "resnet101": 44_549_160,
    "resnext50_32x4d": 25_028_904,
    "wide_resnet50_2": 68_883_240,
    "mobilenet_v2": 3_504_872,
    "vgg11": 132_863_336,
    "vgg16": 138_357_544,
    "vgg16_bn": 138_365_992,
    "densenet121": 7_978_856,
    "inception_v3": 23_834_568,
    "squeezenet1_1": 1_235_496,
    "dcgan_generator": 3_576_704,
    "llama_decoder_layer": 4 * 4096 * 4096 + 3 * 4096 * 11008 + 2 * 4096,
}

# Input and output shapes of a forward pass at a small size.
SHAPES = {name: ((1, 3, 64, 64), (1, 1000)) for name in PARAMS}
SHAPES["inception_v3"] = ((1, 3, 80, 80), (1, 1000))
SHAPES["dcgan_generator"] = ((2, 100, 1, 1), (2, 3, 64, 64))
TINY_LLAMA = dict(dim=64, n_heads=4, hidden=128, max_seq=16)
SHAPES["llama_decoder_layer"] = ((2, 8, 64), (2, 8, 64))

# A few state-dict keys of torchvision's models (checkpoints load by these names).
KEYS = {
    "resnet50": ["layer4.2.bn3.running_var", "layer2.0.downsample.1.weight", "fc.bias"],
    "mobilenet_v2": ["features.0.0.weight", "features.1.conv.1.weight", "features.18.1.bias",
                     "classifier.1.weight"],
    "vgg16": ["features.28.weight", "classifier.6.weight"],
    "vgg16_bn": ["features.41.running_mean", "classifier.3.bias"],
    "densenet121": ["features.denseblock4.denselayer16.conv2.weight",
                    "features.transition3.conv.weight", "features.norm5.running_var",
                    "classifier.weight"],
    "inception_v3": ["Conv2d_1a_3x3.conv.weight", "Mixed_7c.branch3x3dbl_3b.bn.running_mean", "fc.weight"],
    "squeezenet1_1": ["features.12.expand3x3.weight", "classifier.1.weight"],
    "dcgan_generator": ["main.0.weight", "main.12.weight", "main.10.running_var"],
}


def n_params(model) -> int:
    return sum(p.numel() for p in model.parameters())


def test_registry_covers_every_model():
    assert set(zoo.MODELS) == set(PARAMS)


@pytest.mark.parametrize("name", sorted(PARAMS))
def test_parameter_count_and_names(name):
    with torch.device("meta"):      # shapes only: no memory, no init cost
        model = zoo.get(name)
    assert n_params(model) == PARAMS[name]
    keys = model.state_dict().keys()
    assert all(k in keys for k in KEYS.get(name, [])), sorted(set(KEYS[name]) - set(keys))


def test_inception_aux_logits_count():
    with torch.device("meta"):
        model = zoo.inception_v3(aux_logits=True)
    assert n_params(model) == 27_161_264
    assert n_params(model.AuxLogits) == 27_161_264 - 23_834_568


@pytest.mark.parametrize("name", sorted(PARAMS))
def test_forward_shape(name):
    torch.manual_seed(0)
    model = zoo.get(name, **(TINY_LLAMA if name == "llama_decoder_layer" else {})).eval()
    shape_in, shape_out = SHAPES[name]
    with torch.no_grad():
        y = model(torch.randn(shape_in))
    assert tuple(y.shape) == shape_out
    assert torch.isfinite(y).all()


def test_num_classes():
    model = zoo.resnet18(num_classes=10).eval()
    with torch.no_grad():
        assert model(torch.randn(1, 3, 32, 32)).shape == (1, 10)


def test_llama_layer_is_causal():
    torch.manual_seed(0)
    layer = zoo.llama_decoder_layer(**TINY_LLAMA).eval()
    x = torch.randn(2, 8, 64)
    x2 = x.clone()
    x2[:, -1] = torch.randn(2, 64)
    with torch.no_grad():
        y, y2 = layer(x), layer(x2)
    torch.testing.assert_close(y[:, :-1], y2[:, :-1], rtol=0, atol=1e-6)
    assert not torch.allclose(y[:, -1], y2[:, -1])


def _export_targets(model, x) -> list[str]:
    ep = torch.export.export(model.eval(), (x,))
    with torch.no_grad():
        torch.testing.assert_close(ep.module()(x), model(x))
    return [str(n.target) for n in ep.graph.nodes if n.op == "call_function"]


@pytest.mark.parametrize("name, n_conv", [("resnet18", 20), ("mobilenet_v2", 52)])
def test_export_cnn(name, n_conv):
    torch.manual_seed(0)
    targets = _export_targets(zoo.get(name), torch.randn(1, 3, 64, 64))
    assert sum("conv" in t for t in targets) == n_conv


def test_export_llama_layer():
    torch.manual_seed(0)
    targets = _export_targets(zoo.llama_decoder_layer(**TINY_LLAMA), torch.randn(1, 8, 64))
    assert sum("softmax" in t for t in targets) == 1
    assert sum("matmul" in t or "linear" in t for t in targets) >= 2 + 7


def test_unknown_name():
    with pytest.raises(FrontendError, match="unknown model 'resnet9'.*resnet18.*llama_decoder_layer"):
        zoo.get("resnet9")
    assert issubclass(FrontendError, TlmirError)


def test_llama_bad_heads():
    with pytest.raises(DefinitionError, match="divisible"):
        zoo.llama_decoder_layer(dim=64, n_heads=5)
