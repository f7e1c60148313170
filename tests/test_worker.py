"""Process isolation: crashes, aborts and hangs in a job cost one result, not the caller."""
import os
import signal
import time

import numpy as np
import pytest

import worker_jobs as jobs
from tlmir.errors import MeasureError
from tlmir.runtime.worker import Worker, WorkerResult, run_isolated

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def worker():
    with Worker(preload=["numpy"]) as w:
        yield w


def test_value_round_trip(worker):
    r = worker.run(jobs.add, 2, 3, timeout=10)
    assert r == WorkerResult(True, 5, None, "ok")
    assert r.unwrap() == 5


def test_exception_keeps_worker(worker):
    pid = worker.run(jobs.getpid, timeout=10).value
    r = worker.run(jobs.fail, "boom", timeout=10)
    assert (r.ok, r.kind) == (False, "error")
    assert "ValueError" in r.error and "boom" in r.error
    with pytest.raises(MeasureError, match="boom"):
        r.unwrap("candidate 7")
    assert worker.run(jobs.getpid, timeout=10).value == pid  # same child, still alive
    assert worker.run(jobs.add, 1, 1, timeout=10).value == 2


def test_segfault_is_crash_and_worker_recovers(worker):
    pid = worker.run(jobs.getpid, timeout=10).value
    r = worker.run(jobs.segfault, timeout=10)
    assert r.kind == "crash" and not r.ok
    assert "SIGSEGV" in r.error
    assert worker.run(jobs.add, 1, 2, timeout=10).value == 3
    assert worker.run(jobs.getpid, timeout=10).value != pid


def test_abort_is_crash(worker):
    r = worker.run(jobs.abort, timeout=10)
    assert r.kind == "crash" and "SIGABRT" in r.error
    assert worker.run(jobs.add, 1, 2, timeout=10).ok


def test_os_exit_is_crash(worker):
    r = worker.run(jobs.hard_exit, 3, timeout=10)
    assert r.kind == "crash" and "code 3" in r.error
    assert worker.run(jobs.add, 1, 2, timeout=10).ok


def test_timeout_kills_and_restarts(worker):
    worker.run(jobs.add, 0, 0, timeout=10)  # make sure start-up is not timed below
    t0 = time.monotonic()
    r = worker.run(jobs.sleep, 60, timeout=1)
    assert r.kind == "timeout" and not r.ok
    assert time.monotonic() - t0 < 3
    assert worker.run(jobs.sleep, 0, timeout=10).value == 0


def test_numpy_round_trip(worker):
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    r = worker.run(jobs.double_array, x, timeout=10)
    y, dt = r.value
    assert dt == "<f4" and y.dtype == np.float32
    np.testing.assert_array_equal(y, x * 2)


def test_unpicklable_job_and_result(worker):
    r = worker.run(lambda: 1, timeout=10)
    assert r.kind == "error"
    r = worker.run(jobs.unpicklable_result, timeout=10)
    assert r.kind == "error" and "cannot send result" in r.error
    assert worker.run(jobs.add, 1, 2, timeout=10).value == 3


def test_closed_worker_refuses():
    w = Worker()
    w.close()
    w.close()  # idempotent
    with pytest.raises(MeasureError, match="worker is closed"):
        w.run(jobs.add, 1, 2, timeout=10)


def test_a_script_without_a_main_guard_tunes_and_so_does_python_c(tmp_path):
    """Workers are fresh interpreters: they never import the caller's script again."""
    import subprocess
    import sys
    code = ("from tlmir import ops, tune\nfrom tlmir.runtime.task import Task\n"
            "r = tune(Task.from_op(ops.matmul(8, 8, 8)), trials=2, strategy='random', progress=False)\n"
            "print('measured', r.measurements)\n")
    script = tmp_path / "unguarded.py"
    script.write_text(code)
    env = {**os.environ, "PYTHONPATH": ROOT}
    for argv in ([sys.executable, str(script)], [sys.executable, "-c", code]):
        out = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
        assert out.returncode == 0 and "measured 2" in out.stdout, out.stderr
        assert "Traceback" not in out.stderr and "Warning" not in out.stderr, out.stderr


def test_a_killed_parent_leaves_no_worker_and_no_traceback(tmp_path):
    import subprocess
    import sys
    code = ("import sys, time\nfrom tlmir.runtime.worker import Worker\nimport worker_jobs as jobs\n"
            "w = Worker()\nprint(w.run(jobs.getpid, timeout=60).value, flush=True)\n"
            "w.run(jobs.sleep, 60, timeout=120)\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.path.dirname(__file__)])}
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    child = int(proc.stdout.readline())
    time.sleep(0.5)  # the worker is now inside its 60 s job
    proc.kill()
    proc.wait()
    deadline = time.time() + 10
    while time.time() < deadline and jobs.alive(child):
        time.sleep(0.2)
    assert not jobs.alive(child)
    assert "Traceback" not in proc.stderr.read()


def test_run_isolated_shared_worker():
    a = run_isolated(jobs.getpid)
    assert a.ok
    assert run_isolated(jobs.getpid).value == a.value  # reused
    assert run_isolated(jobs.segfault).kind == "crash"
    assert run_isolated(jobs.add, 2, 2, timeout=5).value == 4


def test_child_ignores_sigint(worker):
    pid = worker.run(jobs.getpid, timeout=10).value
    os.kill(pid, signal.SIGINT)
    time.sleep(0.2)
    assert worker.run(jobs.getpid, timeout=10).value == pid
