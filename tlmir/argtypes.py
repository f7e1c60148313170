"""The command line's parser, option value types and the `--op/--shape/--param` options
every op-taking command shares: a malformed or conflicting option is one line,
`tlmir: error: <command>: <what>`, exit status 2, never a traceback."""
from __future__ import annotations

import argparse
import ast
import inspect
import sys

from .errors import ArgumentError, TlmirError


class _DefaultsHelp(argparse.HelpFormatter):
    """Each option's help ends with its default, where it has one."""

    def _get_help_string(self, action) -> str:
        text = action.help or ""
        if action.option_strings and not any(action.default is v for v in (None, False, argparse.SUPPRESS)) \
                and "%(default)" not in text:
            text += " (default: %(default)s)"
        return text


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors and the default of every option in its help."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", _DefaultsHelp)
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        where = self.prog.removeprefix("tlmir").strip()  # "tune", "train pretrain", "python -m tlmir.demo"
        sys.stderr.write(f"tlmir: error: {where + ': ' if where else ''}{message}\n")
        sys.exit(2)


def _number(kind, text: str, test, what: str):
    try:
        v = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}") from None
    if v != v or not test(v):  # NaN fails every test
        raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}")
    return v


def positive_int(text: str) -> int:
    return _number(int, text, lambda v: v >= 1, "an integer >= 1")


def nonneg_int(text: str) -> int:
    return _number(int, text, lambda v: v >= 0, "an integer >= 0")


def positive_float(text: str) -> float:
    return _number(float, text, lambda v: 0 < v < float("inf"), "a number > 0")


def nonneg_float(text: str) -> float:
    return _number(float, text, lambda v: 0 <= v < float("inf"), "a number >= 0")


def probability(text: str) -> float:
    return _number(float, text, lambda v: 0 < v <= 1, "a number in (0, 1]")


def fraction(text: str) -> float:
    return _number(float, text, lambda v: 0 < v < 1, "a number in (0, 1)")


def int_list(text: str) -> list[int]:
    """'1,10,32': positive integers, comma-separated."""
    try:
        vals = [int(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be comma-separated integers >= 1, got {text!r}") from None
    if not vals or min(vals) < 1:
        raise argparse.ArgumentTypeError(f"must be comma-separated integers >= 1, got {text!r}")
    return vals


def ratio_list(text: str) -> list[float]:
    """'1.1,1.5,3': ascending ratios >= 1, comma-separated."""
    try:
        vals = [float(v) for v in text.split(",")]
    except ValueError:
        vals = []
    if not vals or min(vals) < 1 or vals != sorted(vals) or any(v != v or v == float("inf") for v in vals):
        raise argparse.ArgumentTypeError(f"must be ascending comma-separated ratios >= 1, got {text!r}")
    return vals


def stale_rule(text: str) -> tuple[str, float]:
    """'REGEX@2026-11-25T08:04Z': records of tasks whose name matches REGEX, measured before
    that time (ISO 8601; no zone: UTC), as (pattern, Unix seconds)."""
    import datetime
    import re
    pattern, sep, when = text.rpartition("@")
    try:
        re.compile(pattern)
        t = datetime.datetime.fromisoformat(when.replace("Z", "+00:00"))
    except (re.error, ValueError):
        sep = ""
    if not sep or not pattern:
        raise argparse.ArgumentTypeError(f"must be REGEX@ISO-TIME (e.g. '_s2_@2026-11-25T08:04Z'), got {text!r}")
    if t.tzinfo is None:
        t = t.replace(tzinfo=datetime.timezone.utc)
    return pattern, t.timestamp()


def op_args(p) -> None:
    p.add_argument("--op", help="op name from tlmir.ops (e.g. matmul)")
    p.add_argument("--shape", help="comma-separated positional shape parameters, e.g. 1024,1024,1024 "
                   "(an element-wise op's tensor shape, e.g. 1,1024,14,14)")
    p.add_argument("--param", action="append", help="extra op parameter NAME=VALUE (repeatable)")


def op_from_args(args):
    from . import ops
    if not args.op:
        raise TlmirError("give an op with --op (see tlmir.ops)")
    if args.op not in ops.OPS:
        raise TlmirError(f"unknown op {args.op!r}; known ops: {', '.join(sorted(ops.OPS))}")
    params: dict = {}
    if args.shape:
        names = [p.name for p in inspect.signature(ops.OPS[args.op]).parameters.values()]
        try:
            vals = [int(v) for v in args.shape.split(",")]
        except ValueError:
            raise ArgumentError(f"--shape {args.shape!r}: give comma-separated integers, e.g. 64,64,64") from None
        if names[:1] == ["shape"]:  # element-wise ops: the values are the tensor's shape
            params["shape"] = tuple(vals)
        elif len(vals) > len(names):
            raise TlmirError(f"--shape gives {len(vals)} values but {args.op} takes {names}")
        else:
            params.update(zip(names, vals))
    for kv in args.param or []:
        k, eq, v = kv.partition("=")
        if not eq or not k:
            raise ArgumentError(f"--param {kv!r}: give NAME=VALUE, e.g. bias=true")
        try:
            params[k] = ast.literal_eval(v)
        except (ValueError, SyntaxError):
            params[k] = v
    return ops.make(args.op, **params)
