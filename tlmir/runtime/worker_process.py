"""The measurement worker's entry point, `python -m tlmir.runtime.worker_process FD`: a
module of its own because the tlmir package imports runtime.worker, and running an
already-imported module as `__main__` is unsafe (runpy warns)."""
import sys

from tlmir.runtime.worker import main

if __name__ == "__main__":
    main(sys.argv)
