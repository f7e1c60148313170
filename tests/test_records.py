"""The measurement records database: round trips, filtering, durability, bad files."""
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from tlmir.errors import RecordError, TlmirError
from tlmir.runtime.records import (SCHEMA_VERSION, Record, RecordDB, drop_tick_artefacts, export_jsonl,
                                   import_jsonl, tick_artefact)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KA, KB = "a" * 16, "b" * 16
HW1, HW2 = "cpu-avx512-c2-l1_48K-l2_2048K", "cpu-avx2-c8-l1_32K-l2_1024K"


def rec(task_key=KA, hw_key=HW1, i=0, seconds=None, **kw):
    return Record(task_key, f"task_{task_key[0]}", hw_key,
                  json.dumps({"steps": [["split", "i", [4, i]]]}),
                  [1e-3 * (i + 1), 2e-3 * (i + 1)] if seconds is None else seconds, **kw)


def test_record_fields_and_dict_round_trip():
    r = rec(i=2, strategy="evolution", round=3)
    assert r.ok and r.best == pytest.approx(3e-3) and r.error is None and r.id is None
    assert Record.from_dict(r.to_dict()) == r
    failed = rec(seconds=[], error="segfault in kernel", error_kind="crash")
    assert not failed.ok and failed.best is None
    assert Record.from_dict(json.loads(json.dumps(failed.to_dict()))) == failed
    # a non-string trace is serialized canonically
    assert Record(KA, "t", HW1, {"b": 1, "a": [1, 2]}, [1.0]).trace == '{"a":[1,2],"b":1}'
    with pytest.raises(RecordError, match="trace is not a JSON string"):
        Record(KA, "t", HW1, "{not json", [1.0])
    with pytest.raises(RecordError, match="needs seconds"):
        Record(KA, "t", HW1, "[]", [])
    with pytest.raises(RecordError, match="finite"):
        Record(KA, "t", HW1, "[]", [float("nan")])
    with pytest.raises(RecordError, match="missing"):
        Record.from_dict({"task_key": KA})


def test_tick_artefacts_are_timings_at_a_multiple_of_the_tick_far_above_the_best():
    """A parallel kernel timed beside another job is recorded at whole scheduler ticks (4 ms):
    such a timing, 20x the task's best or more, is left out; a slow timing off the tick, a
    fast one and the same timing on another CPU class whose best is slow are kept."""
    assert tick_artefact(8.01e-3, 10e-6) and tick_artefact(3.99e-3, 10e-6) and tick_artefact(16.1e-3, 50e-6)
    assert not tick_artefact(6.0e-3, 10e-6)           # half a tick off: a genuinely slow program
    assert not tick_artefact(8.0e-3, 1e-3)            # only 8x the best
    assert not tick_artefact(60e-3, 10e-6)            # longer than 10 ticks
    recs = [rec(KA, HW1, 0, [10e-6]), rec(KA, HW1, 1, [8.02e-3]), rec(KA, HW1, 2, [6.0e-3]),
            rec(KA, HW2, 3, [2e-3]), rec(KA, HW2, 4, [8.02e-3]), rec(KB, HW1, 5, None, error="boom")]
    kept = drop_tick_artefacts(recs)
    assert [r.seconds for r in kept] == [r.seconds for r in recs if r.seconds != [8.02e-3] or r.hw_key == HW2]


def test_round_trip_in_file(tmp_path):
    path = tmp_path / "sub" / "dir" / "records.db"      # parent dirs are created
    recs = [rec(i=i, strategy="random", round=i // 2) for i in range(5)]
    recs.append(rec(seconds=[], error="timed out after 10 s", error_kind="timeout"))
    with RecordDB(path) as db:
        ids = [db.append(r) for r in recs[:3]] + db.append_many(recs[3:])
        assert ids == sorted(ids) and len(set(ids)) == 6
        got = db.records()
    assert [g.to_dict() for g in got] == [r.to_dict() for r in recs]   # ids set on append
    with sqlite3.connect(path) as c:
        assert c.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_filtering_by_task_and_hardware():
    db = RecordDB(":memory:")
    for i in range(4):
        db.append(rec(KA, HW1, i))
        db.append(rec(KB, HW1, i, seconds=[1e-6 * (i + 1)]))     # KB is much faster
        db.append(rec(KA, HW2, i, seconds=[1e-7 * (i + 1)]))     # so is HW2
    db.append(rec(KA, HW1, seconds=[], error="wrong result", error_kind="wrong"))
    assert db.count() == 13 and db.count(KA) == 9 and db.count(hw_key=HW1) == 9
    assert db.count(KA, HW1) == 5 and db.count(KA, HW1, ok_only=True) == 4
    assert db.count("c" * 16, HW1) == 0 and db.best("c" * 16, HW1) == []
    for tk, hw in [(KA, HW1), (KB, HW1), (KA, HW2)]:
        assert all(r.task_key == tk and r.hw_key == hw for r in db.records(tk, hw))
        best = db.best(tk, hw, k=3)
        assert len(best) == 3 and all(r.task_key == tk and r.hw_key == hw and r.ok for r in best)
        assert [r.best for r in best] == sorted(r.best for r in db.records(tk, hw, ok_only=True))[:3]
    assert db.best(KA, HW1)[0].best == pytest.approx(1e-3)       # not KB's nor HW2's
    assert db.best(KA, HW1, k=100)[-1].ok                        # failed record excluded
    failed = [r for r in db.records(KA, HW1) if not r.ok]
    assert len(failed) == 1 and failed[0].error == "wrong result" and failed[0].error_kind == "wrong"
    assert [r.id for r in db.records()] == sorted(r.id for r in db.records())
    assert db.traces_seen(KA, HW1) == {r.trace for r in db.records(KA, HW1)}
    assert db.traces_seen("c" * 16, HW1) == set()
    tasks = db.tasks()
    assert [(t[0], t[2], t[3]) for t in tasks] == sorted([(KA, HW1, 5), (KA, HW2, 4), (KB, HW1, 4)])
    by_key = {(t[0], t[2]): t for t in tasks}
    assert by_key[KA, HW1][4] == pytest.approx(1e-3) and by_key[KA, HW1][1] == "task_a"


def test_real_task_and_hardware_keys():
    from tlmir import ops
    from tlmir.runtime.target import HardwareParams
    from tlmir.runtime.task import Task
    t1, t2 = Task.from_op(ops.matmul(8, 8, 8)), Task.from_op(ops.matmul(8, 8, 16))
    hw = HardwareParams()
    db = RecordDB(":memory:")
    db.append(Record(t1.key, t1.name, hw.key, "{}", [1.0]))
    db.append(Record(t2.key, t2.name, hw.key, "{}", [0.5]))
    assert [r.best for r in db.best(t1.key, hw.key, k=5)] == [1.0]


def test_persistence_across_reopen(tmp_path):
    path = str(tmp_path / "r.db")
    with RecordDB(path) as db:
        db.append_many(rec(i=i) for i in range(3))
    with RecordDB(path) as db:
        assert db.count(KA, HW1) == 3
        db.append(rec(KB, HW1, 7))
    with RecordDB(path) as db:
        assert db.count() == 4 and db.best(KB, HW1)[0].best == pytest.approx(8e-3)
        db.verify()


def test_invalid_appends_and_closed_db(tmp_path):
    db = RecordDB(tmp_path / "r.db")
    r = rec()
    r.trace = "{broken"                       # mutated after construction
    with pytest.raises(RecordError, match=str(tmp_path / "r.db").replace("\\", "\\\\")):
        db.append(r)
    with pytest.raises(RecordError):
        db.append({"task_key": KA})
    with pytest.raises(RecordError):          # all or nothing
        db.append_many([rec(), r])
    assert db.count() == 0
    db.close()
    db.close()                                # idempotent
    with pytest.raises(RecordError, match="closed"):
        db.count()


_CHILD = """
import json, sys
from tlmir.runtime.records import Record, RecordDB
db = RecordDB(sys.argv[1])
i = 0
while True:
    db.append(Record("k" * 16, "child", "hw", json.dumps({"i": i, "pad": "x" * 300}),
                     [1e-3 * (i + 1), 2e-3], strategy="sigkill", round=i))
    i += 1
    print(i, flush=True)
"""


def test_durable_under_sigkill(tmp_path):
    path = str(tmp_path / "killed.db")
    RecordDB(path).close()
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    child = subprocess.Popen([sys.executable, "-c", _CHILD, path], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=env)
    reported, seen_by_reader = 0, []
    reader = RecordDB(path)                   # a concurrent reader while the child writes
    try:
        deadline = time.monotonic() + 15
        while reported < 200 and time.monotonic() < deadline:
            line = child.stdout.readline()
            if not line:
                break
            reported = int(line)
            if reported % 40 == 0:
                seen_by_reader.append(reader.count())
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=10)
    finally:
        if child.poll() is None:
            child.kill()
        reader.close()
    assert child.returncode == -signal.SIGKILL, child.stderr.read()
    assert reported >= 200
    assert seen_by_reader == sorted(seen_by_reader) and seen_by_reader[-1] >= 200
    with RecordDB(path) as db:
        db.verify()
        recs = db.records("k" * 16, "hw")
        assert len(recs) >= reported
        for i, r in enumerate(recs):
            assert json.loads(r.trace) == {"i": i, "pad": "x" * 300}
            assert r.ok and r.round == i and r.seconds == [1e-3 * (i + 1), 2e-3]
            assert r.best == pytest.approx(min(1e-3 * (i + 1), 2e-3))


@pytest.mark.parametrize("content", [os.urandom(8192), b"hello, not a database\n" * 50,
                                     b"SQLite format 3\x00" + os.urandom(4000)])
def test_corrupt_file(tmp_path, content):
    path = tmp_path / "corrupt.db"
    path.write_bytes(content)
    with pytest.raises(RecordError, match="corrupt.db"):
        RecordDB(path)


def test_foreign_sqlite_db(tmp_path):
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as c:
        c.execute("CREATE TABLE users(name TEXT)")
    with pytest.raises(RecordError, match="other.db.*not a tlmir"):
        RecordDB(path)
    with sqlite3.connect(path) as c:          # left untouched
        assert c.execute("PRAGMA journal_mode").fetchone()[0] != "wal"


@pytest.mark.parametrize("version,why", [(SCHEMA_VERSION + 1, "newer"), (0, "older")])
def test_schema_version_mismatch(tmp_path, version, why):
    path = tmp_path / "v.db"
    with RecordDB(path) as db:
        db.append(rec())
    c = sqlite3.connect(path)
    c.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(version),))
    c.commit()
    c.close()
    with pytest.raises(RecordError, match=f"v.db.*version {version}.*{why}"):
        RecordDB(path)


def test_directory_is_not_a_db(tmp_path):
    with pytest.raises(TlmirError, match="directory"):
        RecordDB(tmp_path)


def test_jsonl_round_trip(tmp_path):
    src = RecordDB(":memory:")
    src.append_many([rec(KA, HW1, i) for i in range(3)] + [rec(KB, HW2, 1)]
                    + [rec(KA, HW1, seconds=[], error="crash", error_kind="crash")])
    out = tmp_path / "shared" / "records.jsonl"
    assert export_jsonl(src, out) == 5
    lines = out.read_text().splitlines()
    assert len(lines) == 5 and all(isinstance(json.loads(l), dict) for l in lines)
    dst = RecordDB(tmp_path / "dst.db")
    assert import_jsonl(out, dst) == 5
    strip = lambda rs: [{k: v for k, v in r.to_dict().items() if k != "id"} for r in rs]
    assert strip(dst.records()) == strip(src.records())
    assert import_jsonl(out, dst) == 0                # importing twice adds nothing
    assert import_jsonl(out, dst, dedup=False) == 5 and dst.count() == 10
    assert export_jsonl(src, tmp_path / "ka.jsonl", KA, HW1) == 4


def test_export_removes_what_a_killed_writer_left_and_spares_a_running_one(tmp_path):
    src = RecordDB(":memory:")
    src.append_many([rec(i=i) for i in range(2)])
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    out = tmp_path / "records.jsonl.xz"
    (tmp_path / f"records.jsonl.xz.tmp{dead.pid}").write_bytes(b"half")
    (tmp_path / f"records.jsonl.xz.tmp{os.getppid()}").write_bytes(b"in progress")
    (tmp_path / "records.jsonl.xz.tmpnotes").write_bytes(b"not ours")
    assert export_jsonl(src, out) == 2
    assert sorted(os.listdir(tmp_path)) == sorted(["records.jsonl.xz", f"records.jsonl.xz.tmp{os.getppid()}",
                                                   "records.jsonl.xz.tmpnotes"])


def test_jsonl_malformed_line(tmp_path):
    src = RecordDB(":memory:")
    src.append_many([rec(i=i) for i in range(3)])
    path = tmp_path / "bad.jsonl"
    export_jsonl(src, path)
    lines = path.read_text().splitlines()
    for bad in ['{"task_key": "aaaa", "trun', '[1, 2]', '{"task_key": "x"}',
                json.dumps(dict(json.loads(lines[0]), trace="{nope"))]:
        path.write_text("\n".join(lines[:2] + [bad] + lines[2:]) + "\n")
        dst = RecordDB(":memory:")
        with pytest.raises(RecordError, match=r"bad\.jsonl:3"):
            import_jsonl(path, dst)
        assert dst.count() == 0                       # nothing imported
    with pytest.raises(RecordError, match="missing.jsonl"):
        import_jsonl(tmp_path / "missing.jsonl", RecordDB(":memory:"))


def test_jsonl_xz_round_trip(tmp_path):
    src = RecordDB(str(tmp_path / "a.db"))
    src.append_many([rec(i=i) for i in range(3)])
    assert export_jsonl(src, tmp_path / "r.jsonl.xz") == 3
    with open(tmp_path / "r.jsonl.xz", "rb") as fh:
        assert fh.read(6) == b"\xfd7zXZ\x00"  # xz-compressed
    dst = RecordDB(str(tmp_path / "b.db"))
    assert import_jsonl(tmp_path / "r.jsonl.xz", dst) == 3
    assert [r.trace for r in dst.records()] == [r.trace for r in src.records()]
    (tmp_path / "bad.jsonl.xz").write_bytes(b"not xz at all")
    with pytest.raises(RecordError, match="cannot read records"):
        import_jsonl(tmp_path / "bad.jsonl.xz", dst)
