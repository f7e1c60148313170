"""Process isolation for running generated native code.

A candidate program that segfaults, aborts or hangs must cost one failed trial, never the
tuner itself, so candidates run in a persistent child process.  The child is started with
the "spawn" context: the parent may hold LLVM JIT state and libgomp thread pools, which are
not fork-safe.  Start-up (importing numpy / llvmlite) is slow, so one child serves many
calls and is only replaced after it crashed or was killed for a timeout.
"""
from __future__ import annotations

import atexit
import multiprocessing as mp
import os
import pickle
import signal
import sys
import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import wait
from typing import Any, Callable, Sequence

from ..errors import MeasureError

@dataclass
class WorkerResult:
    """Outcome of one call: kind is "ok", "error" (exception), "crash" or "timeout"."""

    ok: bool
    value: Any
    error: str | None
    kind: str

    def unwrap(self, what: str = "job") -> Any:
        """Return the value, or raise MeasureError naming `what` and how it failed."""
        if self.ok:
            return self.value
        raise MeasureError(f"{what} failed ({self.kind}): {self.error}")


def _describe_exit(code: int | None) -> str:
    """Human-readable exit status: a signal name for negative codes."""
    if code is None:
        return "worker died (exit status unknown)"
    if code < 0:
        try:
            return f"worker killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"worker killed by signal {-code}"
    return f"worker exited with code {code}"


def _child_main(conn: Any, sys_path: list[str], preload: Sequence[str]) -> None:
    """Child loop: receive (fn, args), reply ("ok", value) or ("error", message)."""
    # Ctrl-C in the terminal reaches the whole process group; only the parent handles it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.path[:] = sys_path  # so job functions from e.g. a tests/ dir unpickle here too
    for name in preload:
        __import__(name)
    conn.send(("ready", os.getpid()))
    while True:
        try:
            data = conn.recv_bytes()
        except (EOFError, OSError):
            return  # parent went away
        try:
            msg = pickle.loads(data)
            if msg is None:
                return
            fn, args = msg
            reply: tuple[str, Any] = ("ok", fn(*args))
        except BaseException as e:  # noqa: BLE001 - report everything, keep serving
            reply = ("error", f"{type(e).__name__}: {e}")
        try:
            conn.send(reply)
        except Exception as e:  # e.g. the return value cannot be pickled
            conn.send(("error", f"cannot send result back: {type(e).__name__}: {e}"))


class Worker:
    """A persistent spawn-started child process that runs picklable functions."""

    def __init__(self, preload: Sequence[str] = (), start_timeout: float = 60.0) -> None:
        """`preload`: modules the child imports at start-up, so calls don't pay for it."""
        self._ctx = mp.get_context("spawn")
        self._preload = tuple(preload)
        self._start_timeout = start_timeout
        self._owner_pid = os.getpid()
        self._lock = threading.Lock()
        self._proc: Any = None
        self._conn: Any = None
        self._ready = False
        self._closed = False
        self.restarts = 0  # how many times the child was replaced after a crash / timeout
        self._start()

    # -- process management -------------------------------------------------------------
    def _start(self) -> None:
        """Launch a child without waiting for it; the handshake happens on the next call."""
        parent_conn, child_conn = self._ctx.Pipe(duplex=True)
        proc = self._ctx.Process(
            target=_child_main,
            args=(child_conn, list(sys.path), self._preload),
            name="tlmir-worker",
            daemon=True,
        )
        proc.start()
        child_conn.close()  # so the parent sees EOF when the child dies
        self._proc, self._conn, self._ready = proc, parent_conn, False

    def _await_ready(self) -> None:
        """Wait for the child's start-up handshake; start-up failure is not a trial failure."""
        if self._ready:
            return
        ready = wait([self._conn, self._proc.sentinel], timeout=self._start_timeout)
        try:
            msg = self._conn.recv() if self._conn in ready else None
        except (EOFError, OSError):
            msg = None
        if not (isinstance(msg, tuple) and msg[:1] == ("ready",)):
            self._kill()
            code = self._proc.exitcode
            self._proc = self._conn = None
            why = _describe_exit(code) if ready else f"no handshake in {self._start_timeout}s"
            raise MeasureError(f"tlmir's measurement worker failed to start: {why}. Workers are "
                               f"spawned processes that import the main script again: a script "
                               f"that tunes or measures at import time must do so under "
                               f"`if __name__ == \"__main__\":`")
        self._ready = True

    def _kill(self) -> None:
        """SIGKILL the child (if alive) and reap it."""
        proc = self._proc
        if proc is None:
            return
        if proc.is_alive():
            proc.kill()
        proc.join(timeout=5.0)
        if self._conn is not None:
            self._conn.close()

    def _restart(self) -> None:
        self._kill()
        self.restarts += 1
        self._start()

    # -- public API ---------------------------------------------------------------------
    @property
    def pid(self) -> int | None:
        """The current child's pid (changes after a restart)."""
        return None if self._proc is None else self._proc.pid

    def run(self, fn: Callable[..., Any], *args: Any, timeout: float) -> WorkerResult:
        """Run fn(*args) in the child, waiting at most `timeout` s (start-up not included)."""
        if timeout <= 0:
            raise ValueError(f"timeout must be positive, got {timeout}")
        with self._lock:
            if self._closed:
                raise MeasureError("the measurement worker is closed")
            if self._proc is None or not self._proc.is_alive():
                self._restart()  # died while idle (killed from outside)
            self._await_ready()
            try:
                self._conn.send((fn, args))
            except (pickle.PicklingError, AttributeError, TypeError) as e:
                # nothing was written: pickling happens before the pipe write
                return WorkerResult(False, None, f"cannot send job: {type(e).__name__}: {e}",
                                    "error")
            except OSError:  # child died between calls
                return self._crashed()
            try:
                return self._await_reply(timeout)
            except BaseException:
                # e.g. KeyboardInterrupt mid-call: the reply would arrive out of step.
                self._restart()
                raise

    def _await_reply(self, timeout: float) -> WorkerResult:
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self._restart()
                return WorkerResult(False, None, f"timed out after {timeout:g}s", "timeout")
            ready = wait([self._conn, self._proc.sentinel], timeout=remaining)
            if self._conn in ready:
                try:
                    status, payload = self._conn.recv()
                except (EOFError, OSError):
                    return self._crashed()
                if status == "ok":
                    return WorkerResult(True, payload, None, "ok")
                return WorkerResult(False, None, payload, "error")
            if ready:  # only the sentinel: the child exited without replying
                return self._crashed()

    def _crashed(self) -> WorkerResult:
        self._proc.join(timeout=5.0)
        msg = _describe_exit(self._proc.exitcode)
        self._restart()  # start the replacement now so its start-up overlaps the caller
        return WorkerResult(False, None, msg, "crash")

    def close(self) -> None:
        """Ask the child to exit (kill it if it does not); idempotent."""
        if self._closed:
            return
        self._closed = True
        proc, conn = self._proc, self._conn
        self._proc = self._conn = None
        if proc is None:
            return
        if os.getpid() != self._owner_pid:  # inherited copy: the child is not ours
            conn.close()
            return
        try:
            conn.send(None)
        except Exception:
            pass
        proc.join(timeout=1.0)
        if proc.is_alive():
            proc.kill()
            proc.join(timeout=5.0)
        conn.close()

    def __enter__(self) -> "Worker":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: modules may already be torn down
            pass


_shared: Worker | None = None
_shared_pid: int | None = None
_shared_lock = threading.Lock()


def run_isolated(fn: Callable[..., Any], *args: Any, timeout: float = 10.0) -> WorkerResult:
    """Run fn(*args) in this process's shared Worker (created on first use)."""
    global _shared, _shared_pid
    with _shared_lock:
        if _shared is None or _shared_pid != os.getpid():
            _shared, _shared_pid = Worker(), os.getpid()
        worker = _shared
    return worker.run(fn, *args, timeout=timeout)


def _close_shared() -> None:
    if _shared is not None and _shared_pid == os.getpid():
        _shared.close()


atexit.register(_close_shared)
