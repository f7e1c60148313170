"""Runtime support: running generated native code safely (see tlmir.runtime.worker)."""
