"""Suite-wide settings."""
import pytest

from tlmir.ops import baselines

_BASELINES_ISOLATED = baselines.baselines_isolated


def _one_child_one_try(ops, threads, repeat=10, tries=1, processes=1, spread=False):
    return _BASELINES_ISOLATED(ops, threads, repeat, tries, processes, spread)


@pytest.fixture(autouse=True)
def one_child_for_pytorch_baselines(monkeypatch):
    """Reports (eval, network, `tlmir tune`) time PyTorch in one child process, one try,
    unless a test asks for more: the tests check what the reports hold, the benchmarks how
    fast PyTorch is (two children, three tries each, by default)."""
    monkeypatch.setattr(baselines, "baselines_isolated", _one_child_one_try)
