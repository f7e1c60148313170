"""Job functions for tests/test_worker.py: module-level so the spawn child can import them;
and `alive`, for the tests that check no child outlives its parent."""
import ctypes
import os
import time


def add(a, b):
    return a + b


def fail(msg):
    raise ValueError(msg)


def segfault():
    return ctypes.string_at(0)


def abort():
    os.abort()


def hard_exit(code):
    os._exit(code)


def sleep(seconds):
    time.sleep(seconds)
    return seconds


def double_array(x):
    return x * 2, x.dtype.str


def getpid():
    return os.getpid()


def unpicklable_result():
    return lambda: None


def alive(pid: int) -> bool:
    """Whether process `pid` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split()[2] != "Z"
    except OSError:
        return False
