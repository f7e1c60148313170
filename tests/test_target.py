"""Targets spelled as strings: this host held to AVX2 compiles 256-bit code that runs here."""
import numpy as np
import pytest

import tlmir
from tlmir import ops, te
from tlmir.errors import BuildError
from tlmir.runtime.target import host_hardware, parse_target
from tlmir.runtime.task import Task
from tlmir.search.tune import tune

HOST = host_hardware()


def _matmul():
    A = te.placeholder((64, 48), name="A")
    B = te.placeholder((48, 96), name="B")
    k = te.reduce_axis(48, "k")
    C = te.compute((64, 96), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = tlmir.create_schedule(C)
    jo, ji = s[C].split(C.op.axis[1], factor=32)
    s[C].reorder(C.op.axis[0], jo, C.op.reduce_axis[0], ji)
    s[C].vectorize(ji)
    return s, [A, B, C]


@pytest.mark.skipif(HOST.isa != "avx512", reason="needs an AVX-512 host to hold back")
def test_an_avx2_target_compiles_256_bit_code_that_runs_here():
    s, args = _matmul()
    a, b = np.random.rand(64, 48).astype("float32"), np.random.rand(48, 96).astype("float32")
    for target, wide in (("cpu", "zmm"), ("cpu:avx512", "zmm"), ("cpu:avx2", "ymm")):
        f = tlmir.build(s, args, target=target)
        c = np.zeros((64, 96), "float32")
        f(a, b, c)
        np.testing.assert_allclose(c, a @ b, rtol=1e-4)
        assert wide in f.assembly, target
        if target == "cpu:avx2":
            assert "zmm" not in f.assembly and "{1to16}" not in f.assembly


def test_target_strings_and_their_errors():
    hw = parse_target("cpu:avx2 -cores=8 -l1=48K -l2=2M")
    assert (hw.isa, hw.vector_lanes, hw.cores, hw.l1_kb, hw.l2_kb) == ("avx2", 8, 8, 48, 2048)
    assert parse_target("cpu") == HOST
    for bad, msg in (("tpu", "unknown target"), ("cuda:sm_75", "unknown GPU architecture"),
                     ("cpu:neon", "unknown instruction set"), ("cpu -cores=0", "positive"),
                     ("cpu -threads=2", "unknown option"), ("", "must be a string")):
        with pytest.raises(BuildError, match=msg):
            parse_target(bad)
    s, args = _matmul()
    with pytest.raises(BuildError, match="unknown target 'tpu'"):
        tlmir.build(s, args, target="tpu")


@pytest.mark.skipif(HOST.isa not in ("avx512", "avx2"), reason="needs AVX2")
def test_tune_for_an_avx2_target_records_it_as_such(tmp_path):
    task = Task.from_op(ops.matmul(32, 32, 32))
    res = tune(task, "cpu:avx2", trials=3, strategy="random", db=str(tmp_path / "r.db"), progress=False)
    assert res.measurements == 3 and res.best_trace is not None
    from tlmir.runtime.records import RecordDB
    with RecordDB(str(tmp_path / "r.db")) as db:
        assert {r.hw_key.split("-")[1] for r in db.records()} == {"avx2"}
