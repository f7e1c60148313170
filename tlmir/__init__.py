"""tlmir: a pure-Python tensor compiler whose schedules are chosen by a tensor language model."""
from .errors import TlmirError  # noqa: F401
from . import te  # noqa: F401
