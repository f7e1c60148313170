"""Buffer planning: kernel outputs share one arena when their lifetimes are disjoint, a
view keeps its buffer live, returned outputs are allocated per call and never
overwritten by a later call, and the compiled module still equals eager."""
import operator

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import tlmir  # noqa: E402
from tlmir import frontend  # noqa: E402
from tlmir.errors import FrontendError  # noqa: E402
from tlmir.frontend.compiled import Compiled, CompiledModel  # noqa: E402
from tlmir.frontend.memory import ALIGN, aliases_input  # noqa: E402
from tlmir.frontend.partition import Subgraph  # noqa: E402
from tlmir.schedule import create_schedule  # noqa: E402


def _close(a, b, tol=1e-5):
    assert float((a - b).abs().max()) <= tol * max(1.0, float(b.abs().max()))


def _assert_sound(plan, returned_steps=()):
    """No two arena slots live at one step share a byte; returned outputs are per call."""
    arena = [s for s in plan.slots.values() if s.offset is not None]
    for s in arena:
        assert s.offset % ALIGN == 0 and s.offset + s.nbytes <= plan.arena_bytes
    for i, a in enumerate(arena):
        for b in arena[i + 1:]:
            if a.first <= b.last and b.first <= a.last:
                assert a.offset + a.nbytes <= b.offset or b.offset + b.nbytes <= a.offset, (a, b)
    for i in returned_steps:
        assert plan.slots[i].offset is None


class Chain(nn.Module):
    """Six Linear + ReLU of one width: each output is dead once the next layer has run."""
    def __init__(self, width=64, depth=6):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))

    def forward(self, x):
        for layer in self.layers:
            x = F.relu(layer(x))
        return x


def test_a_chain_needs_two_buffers_and_its_output():
    torch.manual_seed(0)
    m, x = Chain().eval(), torch.randn(32, 64)
    cm = frontend.compile(m, (x,), strategy=None)
    plan, layer = cm.memory, 32 * 64 * 4
    assert len(plan.slots) == 6 and plan.unplanned_bytes == 6 * layer
    assert plan.arena_bytes == 2 * layer and plan.fresh_bytes == layer     # ping-pong, then the result
    assert plan.peak_bytes == 3 * layer < plan.unplanned_bytes
    _assert_sound(plan, returned_steps=[len(cm.part.steps) - 1])
    with torch.no_grad():
        _close(cm(x), m(x))
    assert "kernel outputs: 0.02 MB planned peak" in cm.report((x,), repeat=1)


class LateView(nn.Module):
    """A kernel output read through views after three other kernels ran, and an
    intermediate that is also returned (through a view)."""
    def __init__(self):
        super().__init__()
        self.a, self.b, self.c, self.d = (nn.Linear(32, 32) for _ in range(4))

    def forward(self, x):
        early = self.a(x).view(4, 2, 32)               # the view is all later steps see
        h = F.relu(self.c(F.relu(self.b(x))))
        kept = F.relu(self.d(h))
        out = kept + early.reshape(8, 32).t().t()
        return out * 2.0, kept.view(2, 4, 32)


def test_views_keep_their_buffer_live_and_returned_values_survive_the_next_call():
    torch.manual_seed(0)
    m = LateView().eval()
    x1, x2 = torch.randn(8, 32), torch.randn(8, 32)
    cm = frontend.compile(m, (x1,), strategy=None)
    kernels = [i for i, s in enumerate(cm.part.steps) if isinstance(s, Subgraph)]
    assert len(kernels) == 5                         # a, b, c, d, then (kept + early) * 2
    early, kept, last = kernels[0], kernels[3], kernels[4]
    assert cm.memory.slots[early].last == last       # read through its views after b, c and d
    _assert_sound(cm.memory, returned_steps=[kept, last])
    with torch.no_grad():
        first = cm(x1)
        saved = [t.clone() for t in first]
        second = cm(x2)
        for got, want in zip(first, m(x1)):
            _close(got, want)
        for got, want in zip(second, m(x2)):
            _close(got, want)
    for t, s in zip(first, saved):
        assert torch.equal(t, s)            # the second call wrote none of the first's results
    assert all(a.data_ptr() != b.data_ptr() for a, b in zip(first, second))


def test_a_conv_net_equals_eager_with_planned_buffers():
    torch.manual_seed(0)
    from tlmir import zoo
    m, x = zoo.resnet18().eval(), torch.randn(1, 3, 32, 32)
    cm = frontend.compile(m, (x,), strategy=None)
    _assert_sound(cm.memory)
    assert cm.memory.peak_bytes * 3 < cm.memory.unplanned_bytes
    with torch.no_grad():
        ref = m(x)
        _close(cm(x), ref, 1e-4)
        _close(cm(x), ref, 1e-4)          # the arena reused by a second call


def test_alias_rules():
    g = torch.fx.Graph()
    x = g.placeholder("x")
    aten = torch.ops.aten
    view = g.call_function(aten.transpose.int, (x, 0, 1))
    fresh = g.call_function(aten.cat.default, ([x, x],))
    unsafe = g.call_function(aten._unsafe_view.default, (x, [4]))   # a view its schema does not annotate
    clone = g.call_function(aten.clone.default, (x,))                # run as an alias
    item = g.call_function(operator.getitem, (x, 0))
    assert [aliases_input(n) for n in (view, fresh, unsafe, clone, item)] == [True, False, True, True, True]


def test_an_in_place_kernel_is_refused():
    class Add(nn.Module):
        def forward(self, a, b):
            return a + b

    a = torch.randn(4, 8)
    imported = frontend.import_model(Add(), (a, a))
    (task, _), = imported.tasks()
    kernel = tlmir.build(create_schedule(task.outputs), task.args, inplace={2: 0})
    with pytest.raises(FrontendError, match="add_4x8: an in-place kernel"):
        CompiledModel(imported.graph, imported.part, Compiled({task.key: kernel}))
