"""tlmir: a pure-Python tensor compiler whose schedules are chosen by a tensor language model."""
from . import te  # noqa: F401
from .build import build  # noqa: F401
from .errors import TlmirError  # noqa: F401
from .runtime.task import Task  # noqa: F401
from .schedule import Schedule, create_schedule, lower  # noqa: F401
from .search.tune import tune  # noqa: F401
from .lm import tlm_search  # noqa: F401,E402 - registers the tlm strategies


def compile(model, example_inputs, **options):  # noqa: A001 - the torch.compile spelling
    """Compile a torch.nn.Module for this CPU: tlmir.frontend.compile (imports torch)."""
    from .frontend import compile as compile_model
    return compile_model(model, example_inputs, **options)
