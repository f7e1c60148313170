"""A run serves one process at a time: a second search into it is refused, and a killed
holder leaves it free."""
import os
import signal
import subprocess
import sys

import pytest

from tlmir import ops
from tlmir.errors import BusyError, TlmirError
from tlmir.runtime.run_lock import run_lock
from tlmir.runtime.task import Task


def test_a_held_directory_is_refused_with_its_holder_and_free_again_after(tmp_path):
    with run_lock(str(tmp_path), "evaluation"):
        with pytest.raises(BusyError, match=rf"evaluation {tmp_path}: in use by process {os.getpid()}"):
            with run_lock(str(tmp_path), "evaluation"):
                pass
    with run_lock(str(tmp_path), "evaluation"):  # released on leaving
        pass
    assert issubclass(BusyError, TlmirError)


def test_a_killed_holder_leaves_the_directory_free(tmp_path):
    code = ("import sys, time; from tlmir.runtime.run_lock import run_lock\n"
            "with run_lock(sys.argv[1], 'iterate run'):\n    print('held', flush=True); time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    with pytest.raises(BusyError, match=f"in use by process {proc.pid}"):
        with run_lock(str(tmp_path), "iterate run"):
            pass
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    with run_lock(str(tmp_path), "iterate run"):
        pass


def test_evaluation_and_iterate_refuse_a_directory_in_use(tmp_path):
    from tlmir.evaluate import Evaluation, frameworks
    from tlmir.lm.iterate import IterateConfig, Iteration
    tasks = [Task.from_op(ops.softmax(8, 64))]
    out = str(tmp_path / "eval")
    with run_lock(out, "evaluation run random.db in", "random.db.lock"):
        with pytest.raises(BusyError, match=f"evaluation run random.db in {out}: in use"):
            Evaluation(out, tasks, frameworks([], "random:2"), log=None).search()
        run = str(tmp_path / "run")
        with run_lock(run, "iterate run"):
            with pytest.raises(BusyError, match="iterate run"):
                Iteration(run, "base", tasks, IterateConfig(rounds=1, per_task=2, batches=1), log=None).run()
    assert not os.path.exists(os.path.join(out, "random.db"))  # nothing was measured
