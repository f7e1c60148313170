"""Malformed command lines: each exits 2 with one line `tlmir: error: ...` naming the culprit,
no traceback, and creates no file."""
import os

import pytest

from tlmir.cli import main

MM = ["--op", "matmul", "--shape", "8,8,8"]
MISSING = "no/such/file.db"

CASES = [
    (["tune", "--op", "matmul", "--trials", "0"], "--trials"),
    (["tune", "--op", "matmul", "--trials", "-5"], "--trials"),
    (["tune", "--op", "matmul", "--trials", "x"], "--trials"),
    (["tune", "--op", "matmul", "--trials", "nan"], "--trials"),
    (["tune", "--op", "matmul", "--shape", "64,a,64"], "--shape"),
    (["tune", "--op", "matmul", "--shape", "64.5"], "--shape"),
    (["tune", "--op", "matmul", "--shape", "5x5"], "--shape"),
    (["tune", "--op", "matmul", "--shape", "8,8,8,8,8,8,8"], "--shape"),
    (["tune", "--op", "matmul", "--workload", "resnet-50"], "--workload"),
    (["tune", "--workload", "resnet-50", "--trials", "3"], "--trials"),
    (["tune", "--op", "matmul", "--trials-per-task", "3"], "--trials-per-task"),
    (["tune", *MM, "--max-seconds", "-1"], "--max-seconds"),
    (["tune", "--workload", "resnet-50", "--max-seconds", "30"], "--max-seconds"),
    (["tune", "--op", "nope"], "nope"),
    (["tune"], "--op"),
    (["tune", *MM, "--strategy", "annealing"], "annealing"),
    (["tune", *MM, "--strategy", "random@world"], "random"),
    (["tune", *MM, "--cost-model", "xgb"], "--cost-model"),
    (["tune", *MM, "--seed", "-1"], "--seed"),
    (["tune", *MM, "--param", "bias"], "--param"),
    (["tune", *MM, "--search-param", "populaton=3"], "populaton"),
    (["tune", *MM, "--search-param", "population=lots"], "population"),
    (["iterate", "--out", "x", "--search-param", "world_evaluator"], "expected NAME=VALUE"),
    (["tune", *MM, "--target", "tpu"], "tpu"),
    (["tune", *MM, "--target", "cpu:neon"], "neon"),
    (["tune", *MM, "--target", "cpu -cores=x"], "-cores"),
    (["tune", "--workload", "no-such-net"], "no-such-net"),
    (["generate", *MM, "--top-p", "0"], "--top-p"),
    (["generate", *MM, "--top-p", "1.5"], "--top-p"),
    (["generate", *MM, "--temperature", "-1"], "--temperature"),
    (["generate", *MM, "-n", "0"], "-n"),
    (["generate", *MM, "--batch", "0"], "--batch"),
    (["generate", *MM, "--top-k", "-3"], "--top-k"),
    (["generate", *MM, "--unconstrained", "words"], "--unconstrained"),
    (["generate", *MM, "--model", "no-such-model"], "no-such-model"),
    (["show"], "--op"),
    (["show", "--db", MISSING], "--db"),
    (["show", *MM, "--steps", "no/such/steps.json"], "steps"),
    (["show", *MM, "--sample", "0"], "--sample"),
    (["show", *MM, "--sample", "2", "--steps", "x.json"], "--sample"),
    (["show", *MM, "--target", "cuda:sm_75"], "sm_75"),
    (["tune", *MM, "--target", "cuda:sm_75", "--dry-run"], "sm_75"),
    (["rank", "--db", MISSING], "--db"),
    (["rank", "--db", MISSING, "--top", "0"], "--top"),
    (["eval", "--budgets", "1,x"], "--budgets"),
    (["eval", "--budgets", "0"], "--budgets"),
    (["eval", "--tasks", "0"], "--tasks"),
    (["eval", "--phase", "both"], "--phase"),
    (["eval", "--split", "test"], "--split"),
    (["eval", "--network-budgets", "-1"], "--network-budgets"),
    (["iterate", "--out", "x", "--rounds", "0"], "--rounds"),
    (["iterate", "--out", "x", "--per-task", "0"], "--per-task"),
    (["iterate", "--out", "x", "--max-gflop", "-1"], "--max-gflop"),
    (["iterate", "--out", "x", "--explore", "-1"], "--explore"),
    (["iterate", "--out", "x", "--rank-per-slot", "0"], "--rank-per-slot"),
    (["iterate", "--out", "x", "--model", "no-such-model"], "no-such-model"),
    (["train", "pretrain", "--data", "x", "--out", "y", "--lr", "0"], "--lr"),
    (["train", "pretrain", "--data", "x", "--out", "y", "--lr", "nan"], "--lr"),
    (["train", "pretrain", "--data", "x", "--out", "y", "--val-fraction", "1.5"], "--val-fraction"),
    (["train", "pretrain", "--data", "x", "--out", "y", "--device", "tpu"], "--device"),
    (["train", "pretrain", "--data", "x", "--out", "y", "--config", "huge"], "huge"),
    (["train", "pretrain", "--data", "no/such/corpus", "--out", "y"], "--data"),
    (["train", "sft", "--data", "x", "--out", "y", "--epochs", "0"], "--epochs"),
    (["train", "evaluator", "--db", "x", "--out", "y", "--steps", "0"], "--steps"),
    (["sample", "--out", "x", "--per-task", "0"], "--per-task"),
    (["sample", "--out", "x", "--workers", "-2"], "--workers"),
    (["workloads", "no-such-net"], "no-such-net"),
    (["nonsense"], "nonsense"),
    ([], "cmd"),
]


@pytest.mark.parametrize("argv,culprit", CASES, ids=[" ".join(a) or "(none)" for a, _ in CASES])
def test_a_malformed_command_line_is_one_clear_line(argv, culprit, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    try:
        code = main(argv)
    except SystemExit as e:
        code = e.code
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tlmir: error:"), err
    assert culprit in lines[0], err
    assert os.listdir(tmp_path) == []  # a refused command writes nothing (no empty DB, no run dir)


def test_the_table_is_long_enough():
    assert len(CASES) >= 40


def test_every_option_has_help_text():
    import argparse

    from tlmir.cli import main as _  # noqa: F401 - the parser is built in main
    import tlmir.cli as cli
    seen = []

    class Capture(cli.Parser):
        def parse_args(self, argv=None, namespace=None):
            seen.append(self)
            raise SystemExit(0)

    orig = cli.Parser
    cli.Parser = Capture
    try:
        with pytest.raises(SystemExit):
            cli.main(["--version"])
    finally:
        cli.Parser = orig
    root = seen[0]
    parsers = [root]
    for p in parsers:
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                parsers += list(a.choices.values())
    missing = [f"{p.prog} {a.option_strings[0]}" for p in parsers for a in p._actions
               if a.option_strings and not a.help]
    assert not missing, missing
    assert len(parsers) > 10
    tune_help = next(p for p in parsers if p.prog == "tlmir tune").format_help()
    assert "random seed of the search (default: 0)" in " ".join(tune_help.split())  # a default of 0 shows too


def test_the_demo_refuses_bad_options_in_one_line(capsys):
    from tlmir import demo
    with pytest.raises(SystemExit) as e:
        demo.main(["--trials-per-task", "0"])
    assert e.value.code == 2
    assert demo.main(["--network", "no-such-net"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == ("tlmir: error: python -m tlmir.demo: argument --trials-per-task: "
                      "must be an integer >= 1, got '0'")
    assert err[1].startswith("tlmir: error: unknown network 'no-such-net'") and len(err) == 2
