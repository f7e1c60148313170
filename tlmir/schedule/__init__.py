"""Schedules, their primitives and history, and lowering to the loop IR."""
from .lower import lower  # noqa: F401
from .schedule import Schedule, Stage, create_schedule  # noqa: F401
from .steps import Step, replay, steps_from_json, steps_to_json  # noqa: F401
