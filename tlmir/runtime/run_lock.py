"""One process at a time per run. Two searches resumed into the same run append to one
records database, time their kernels against each other (every timing a scheduler-tick
artefact) and each spends the whole budget; the second is refused."""
from __future__ import annotations

import fcntl
import os
from contextlib import contextmanager
from typing import Iterator

from ..errors import BusyError


@contextmanager
def run_lock(directory: str, what: str, name: str = ".lock") -> Iterator[None]:
    """Hold the lock file `name` in `directory` for the duration (released when the
    process ends, however it ends); BusyError naming the run and the holder's pid if
    another process has it."""
    os.makedirs(directory, exist_ok=True)
    fd = os.open(os.path.join(directory, name), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 32).decode(errors="replace").strip() or "?"
        os.close(fd)
        raise BusyError(f"{what} {directory}: in use by process {holder}; stop it first "
                        f"or use another directory") from None
    os.ftruncate(fd, 0)
    os.write(fd, str(os.getpid()).encode())
    try:
        yield
    finally:
        os.close(fd)
