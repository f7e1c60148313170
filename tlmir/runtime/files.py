"""Files replaced atomically: a reader (or a run resumed after a kill) sees the old file or
the new one, never half of one.

Torch-free, so the search, the records and the evaluation write their state the same way
the language-model checkpoints do without importing the model code.
"""
from __future__ import annotations

import os
import tempfile
from typing import Callable


def fsync_dir(directory: str) -> None:
    """Make a rename inside `directory` durable (best effort: some filesystems refuse)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write(path: str, write: Callable[[str], None]) -> None:
    """Call write(tmp_path) for a temporary file next to `path`, fsync it, rename it over `path`."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix="." + os.path.basename(path) + ".", suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    fsync_dir(directory)


def atomic_write_text(path: str, text: str) -> None:
    def write(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
    atomic_write(path, write)
