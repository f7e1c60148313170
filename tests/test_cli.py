"""The command line: `tlmir show`, `tlmir tune`."""
import json

from tlmir.cli import main


def test_show_prints_te_lowered_and_llvm(capsys, tmp_path):
    steps = tmp_path / "s.json"
    steps.write_text(json.dumps([
        {"prim": "split", "stage": "C", "args": {"axis": "j", "factor": 8}},
        {"prim": "reorder", "stage": "C", "args": {"axes": ["k", "j.inner"]}},
        {"prim": "vectorize", "stage": "C", "args": {"axis": "j.inner"}}]))
    assert main(["show", "--op", "matmul", "--shape", "16,16,16", "--steps", str(steps),
                 "--llvm", "--asm"]) == 0
    out = capsys.readouterr().out
    assert "C[i, j] = sum(A[i, k] * B[k, j], axis=[k])" in out
    assert "s['C'].split('j', factor=8)" in out
    assert "for j.inner in range(8):  # vectorized" in out
    assert "define" in out and "<8 x float>" in out


def test_show_reports_bad_input(capsys, tmp_path):
    assert main(["show", "--op", "nope"]) == 2
    assert "unknown op 'nope'" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert main(["show", "--op", "matmul", "--shape", "4,4,4", "--steps", str(bad)]) == 2
    assert "unreadable schedule history" in capsys.readouterr().err
    assert main(["show", "--op", "matmul", "--shape", "4,4,4", "--steps", str(tmp_path / "missing")]) == 2
    assert "cannot read schedule steps file" in capsys.readouterr().err


def test_show_db_says_when_a_database_has_no_records(capsys, tmp_path):
    from tlmir.runtime.records import RecordDB
    db = str(tmp_path / "empty.db")
    RecordDB(db).close()
    assert main(["show", "--db", db]) == 0
    assert capsys.readouterr().out == f"{db}: no records yet\n"


def test_tune_with_the_shipped_tlm_prints_json(capsys):
    assert main(["tune", "--op", "dense", "--shape", "16,32,64", "--param", "bias=true", "--strategy", "tlm",
                 "--trials", "3", "--search-param", "tlm_rank_min_pool=0", "--search-param", "tlm_rank_per_slot=8",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["measurements"] == 3 and out["gflops"] > 0 and out["trace"]
    assert out["torch_seconds"] > 0
    assert out["onednn_seconds"] > 0  # PyTorch's oneDNN linear, beside its default (MKL) path
    assert out["torch_seconds"] <= out["torch_median_seconds"] <= out["torch_slowest_seconds"]
    assert out["default_seconds"] > 0 and isinstance(out["trace"], dict)  # the untuned schedule, timed too


def test_tune_rejects_an_unknown_strategy(capsys):
    assert main(["tune", "--op", "matmul", "--shape", "8,8,8", "--strategy", "annealing",
                 "--trials", "1"]) == 2
    assert "unknown strategy 'annealing'" in capsys.readouterr().err


def test_show_best_prints_the_program_the_cpu_backend_compiles(capsys, tmp_path):
    """A dense program with a packed weight: `show --best` prints its lowered loop IR, then
    the compiled version with the prefetch of the next panel (codegen_cpu.prefetch)."""
    from tlmir import ops
    from tlmir.runtime.records import Record, RecordDB
    from tlmir.runtime.task import Task
    from test_prefetch import DENSE_BEST
    task = Task.from_op(ops.dense(128, 3072, 768, bias=True, act="gelu"))
    db = str(tmp_path / "dense.db")
    with RecordDB(db) as rdb:
        rdb.append(Record(task.key, task.name, "some-cpu", DENSE_BEST.to_json(), seconds=[0.004]))
    assert main(["show", "--db", db, "--best", "--op", "dense", "--shape", "128,3072,768",
                 "--param", "bias=true", "--param", "act=gelu"]) == 0
    out = capsys.readouterr().out
    lowered, compiled = out.split("# lowered\n")[1].split("# compiled by the CPU backend")
    assert "W.pack" in lowered and "prefetch(W[" not in lowered
    assert "prefetch(W[" in compiled


def test_shape_of_an_elementwise_op_is_its_tensor_shape():
    """`--op add_relu --shape 1,1024,14,14` is ResNet's residual add, not four parameters."""
    import argparse

    from tlmir.argtypes import op_from_args
    op = op_from_args(argparse.Namespace(op="add_relu", shape="1,64,7,7", param=None))
    assert op.params["shape"] == (1, 64, 7, 7)
    assert op_from_args(argparse.Namespace(op="matmul", shape="8,16,32", param=None)).params == \
        {"M": 8, "N": 16, "K": 32}
