"""Process isolation for running generated native code.

A candidate program that segfaults, aborts or hangs must cost one failed trial, never the
tuner itself, so candidates run in a persistent child process.  The child is a fresh
interpreter (`python -m tlmir.runtime.worker_process FD`), as TVM's popen
workers are: not a fork (the parent may hold LLVM JIT state and libgomp thread pools,
which are not fork-safe) and not multiprocessing's spawn, which imports the caller's
`__main__` again, so a plain script, a notebook or `python -c` can tune without a main
guard.  Parent and child talk over a socket pair with multiprocessing's Connection
framing.  Start-up (importing numpy / llvmlite) is slow, so one child serves many calls
and is only replaced after it crashed or was killed for a timeout.  A child whose parent
died (even by SIGKILL) exits within a second, quietly.
"""
from __future__ import annotations

import atexit
import concurrent.futures
import os
import pickle
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
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
    """Child loop: receive (fn, args), reply ("ok", value) or ("error", message); return
    quietly when the parent goes away."""
    # Ctrl-C in the terminal reaches the whole process group; only the parent handles it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.path[:] = sys_path  # so job functions from e.g. a tests/ dir unpickle here too
    for name in preload:
        __import__(name)
    try:
        conn.send(("ready", os.getpid()))
        while True:
            data = conn.recv_bytes()
            try:
                msg = pickle.loads(data)
                if msg is None:
                    return
                fn, args = msg
                reply: tuple[str, Any] = ("ok", fn(*args))
            except BaseException as e:  # noqa: BLE001 - report everything, keep serving
                reply = ("error", f"{type(e).__name__}: {e}")
            try:
                payload = pickle.dumps(reply)
            except Exception as e:  # e.g. the return value cannot be pickled
                payload = pickle.dumps(("error", f"cannot send result back: {type(e).__name__}: {e}"))
            conn.send_bytes(payload)
    except (EOFError, OSError):
        return  # the parent went away (closed the socket, or was killed)


def _exit_with_parent() -> None:
    """A daemon thread that ends this process once its parent is gone (reparented), so a
    tuner killed by SIGKILL leaves no worker behind, even one stuck in a hung kernel."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(0)
    threading.Thread(target=watch, daemon=True, name="tlmir-worker-watchdog").start()


def main(argv: Sequence[str]) -> None:
    """The worker process (worker_process.py), FD its end of the socket
    pair; the first message is (sys.path, modules to preload)."""
    _exit_with_parent()
    conn = Connection(int(argv[1]))
    try:
        sys_path, preload = conn.recv()
    except (EOFError, OSError):
        return
    _child_main(conn, sys_path, preload)


class Worker:
    """A persistent child interpreter that runs picklable functions."""

    def __init__(self, preload: Sequence[str] = (), start_timeout: float = 60.0) -> None:
        """`preload`: modules the child imports at start-up, so calls don't pay for it."""
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
        mine, theirs = socket.socketpair()
        package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
        with theirs:
            proc = subprocess.Popen([sys.executable, "-m", "tlmir.runtime.worker_process", str(theirs.fileno())],
                                    pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, env=env)
        conn = Connection(mine.detach())  # the child's end is closed here: EOF when it dies
        conn.send((list(sys.path), self._preload))
        self._proc, self._conn, self._ready = proc, conn, False

    def _await_ready(self) -> None:
        """Wait for the child's start-up handshake; start-up failure is not a trial failure."""
        if self._ready:
            return
        ready = wait([self._conn], timeout=self._start_timeout)
        try:
            msg = self._conn.recv() if ready else None
        except (EOFError, OSError):
            msg = None
        if not (isinstance(msg, tuple) and msg[:1] == ("ready",)):
            self._kill()
            code = self._proc.returncode
            self._proc = self._conn = None
            why = _describe_exit(code) if ready else f"no handshake in {self._start_timeout}s"
            raise MeasureError(f"tlmir's measurement worker ({sys.executable} -m tlmir.runtime.worker_process) "
                               f"failed to start: {why}")
        self._ready = True

    def _kill(self) -> None:
        """SIGKILL the child (if alive) and reap it."""
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.kill()
        _reap(proc)
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
            if self._proc is None or self._proc.poll() is not None:
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
            if wait([self._conn], timeout=remaining):
                try:
                    status, payload = self._conn.recv()
                except (EOFError, OSError):  # the child exited without replying
                    return self._crashed()
                if status == "ok":
                    return WorkerResult(True, payload, None, "ok")
                return WorkerResult(False, None, payload, "error")

    def _crashed(self) -> WorkerResult:
        _reap(self._proc)
        msg = _describe_exit(self._proc.returncode)
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
        try:
            proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            proc.kill()
            _reap(proc)
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


class WorkerPool(concurrent.futures.Executor):
    """`n` Workers that run independent jobs at once, as an Executor: each job goes to an
    idle worker, and its exception, crash or timeout (`timeout` seconds) is its future's
    MeasureError. Fresh interpreters as a Worker's are, so, unlike multiprocessing's
    pools, a caller's unguarded script is not imported again in each of them."""

    def __init__(self, n: int, preload: Sequence[str] = (), timeout: float = 600.0) -> None:
        self.timeout = timeout
        self._workers = [Worker(preload) for _ in range(n)]
        self._idle: queue.SimpleQueue = queue.SimpleQueue()
        for w in self._workers:
            self._idle.put(w)
        self._threads = concurrent.futures.ThreadPoolExecutor(n, thread_name_prefix="tlmir-pool")

    @property
    def pids(self) -> list[int]:
        return [w.pid for w in self._workers if w.pid is not None]

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future:
        if kwargs:
            raise TypeError("WorkerPool jobs take positional arguments only")
        return self._threads.submit(self._run, fn, args)

    def _run(self, fn: Callable[..., Any], args: tuple) -> Any:
        worker = self._idle.get()
        try:
            return worker.run(fn, *args, timeout=self.timeout).unwrap(getattr(fn, "__name__", "job"))
        finally:
            self._idle.put(worker)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self._threads.shutdown(wait=wait, cancel_futures=cancel_futures)
        for w in self._workers:
            w.close()


def _reap(proc: subprocess.Popen) -> None:
    """Wait (briefly) for a child that exited or was killed, so it leaves no zombie."""
    try:
        proc.wait(timeout=5.0)
    except subprocess.TimeoutExpired:
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
