"""The `tlmir` command line: `tlmir show` prints an op's definition, loop program and code."""
from __future__ import annotations

import argparse
import ast
import inspect
import sys

from .errors import TlmirError


def _op_from_args(args):
    from . import ops
    if args.op not in ops.OPS:
        raise TlmirError(f"unknown op {args.op!r}; known ops: {', '.join(sorted(ops.OPS))}")
    params: dict = {}
    if args.shape:
        names = [p.name for p in inspect.signature(ops.OPS[args.op]).parameters.values()]
        vals = [int(v) for v in args.shape.split(",")]
        if len(vals) > len(names):
            raise TlmirError(f"--shape gives {len(vals)} values but {args.op} takes {names}")
        params.update(zip(names, vals))
    for kv in args.param or []:
        k, _, v = kv.partition("=")
        try:
            params[k] = ast.literal_eval(v)
        except (ValueError, SyntaxError):
            params[k] = v
    return ops.make(args.op, **params)


def cmd_show(args) -> None:
    from .ir.printer import te_str
    from .schedule import create_schedule, lower, replay, steps_from_json
    op = _op_from_args(args)
    s = create_schedule(op.outputs)
    if args.steps:
        try:
            text = open(args.steps).read()
        except OSError as e:
            raise TlmirError(f"cannot read schedule steps file {args.steps!r}: {e}") from None
        replay(s, steps_from_json(text))
    print(f"# {op!r}\n# te\n{te_str(op.outputs)}\n")
    if s.history:
        print("# schedule\n" + "\n".join(str(st) for st in s.history) + "\n")
    func = lower(s, op.args, op.name)
    print(f"# lowered\n{func}\n")
    if args.llvm or args.asm:
        from .codegen_cpu import compile_func
        k = compile_func(func)
        if args.llvm:
            print(f"# LLVM IR (optimised)\n{k.llvm_ir}")
        if args.asm:
            print(f"# assembly\n{k.assembly}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="tlmir", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    sh = sub.add_parser("show", help="print an op's te definition, lowered loop IR, LLVM IR / assembly")
    sh.add_argument("--op", required=True, help="op name from tlmir.ops (e.g. matmul)")
    sh.add_argument("--shape", help="comma-separated positional shape parameters, e.g. 1024,1024,1024")
    sh.add_argument("--param", action="append", help="extra op parameter NAME=VALUE (repeatable)")
    sh.add_argument("--steps", help="JSON file of recorded schedule steps to replay")
    sh.add_argument("--llvm", action="store_true", help="also print the optimised LLVM IR")
    sh.add_argument("--asm", action="store_true", help="also print the assembly")
    sh.set_defaults(fn=cmd_show)
    args = p.parse_args(argv)
    try:
        args.fn(args)
    except TlmirError as e:
        print(f"tlmir: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
