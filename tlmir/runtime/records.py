"""The measurement records database: one SQLite file (WAL mode) per tuning log.

Every measured candidate becomes a `Record`: which computation (`task_key`), on which
hardware (`hw_key`), what schedule (`trace`, a JSON string this module never interprets),
and what happened (per-repeat `seconds`, or an `error`). Queries filter by both keys when
given, so records of one task or machine never leak into another's.

Durability: each `append` is its own transaction, committed before it returns, with
`synchronous=FULL` (the WAL is fsynced at every commit: about 0.2 ms on a local disk,
nothing next to a tuner's 1-10 measurements a second). A tuner killed at any point
(SIGKILL included) loses at most the record it was writing. One writer process and any
number of concurrent readers are safe (WAL readers never block the writer).

`export_jsonl` / `import_jsonl` move records between databases as JSON lines.
"""
from __future__ import annotations

import contextlib
import json
import lzma
import math
import os
import sqlite3
import statistics
import threading
import time
from dataclasses import dataclass, field, fields
from typing import Iterable, Iterator, Sequence

from ..errors import RecordError

SCHEMA_VERSION = 1
FORMAT_NAME = "tlmir-records"

_COLUMNS = ("id", "task_key", "task_name", "hw_key", "trace", "seconds", "best", "error",
            "error_kind", "strategy", "round", "timestamp")
_SELECT = f"SELECT {', '.join(_COLUMNS)} FROM records"

_SCHEMA = """
CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE records (
    id         INTEGER PRIMARY KEY,
    task_key   TEXT NOT NULL,
    task_name  TEXT NOT NULL,
    hw_key     TEXT NOT NULL,
    trace      TEXT NOT NULL,
    seconds    TEXT NOT NULL,
    best       REAL,
    error      TEXT,
    error_kind TEXT,
    strategy   TEXT NOT NULL,
    round      INTEGER NOT NULL,
    timestamp  REAL NOT NULL
);
CREATE INDEX records_task_hw ON records(task_key, hw_key);
CREATE INDEX records_task_hw_best ON records(task_key, hw_key, best);
"""


def _is_str(x) -> bool:
    return isinstance(x, str)


@dataclass
class Record:
    """One measured candidate. `best` is min(seconds) unless given; a failed record has an
    `error`, `best` None and (usually) no seconds. `trace` is a JSON string; a non-string
    trace is serialized canonically (sorted keys, compact) so equal traces compare equal."""
    task_key: str
    task_name: str
    hw_key: str
    trace: str
    seconds: list = field(default_factory=list)
    best: float | None = None
    error: str | None = None
    error_kind: str | None = None
    strategy: str = ""
    round: int = 0
    timestamp: float | None = None
    id: int | None = None

    def __post_init__(self):
        who = f"record for task {self.task_name!r}"
        for name in ("task_key", "task_name", "hw_key"):
            if not _is_str(getattr(self, name)) or not getattr(self, name):
                raise RecordError(f"{who}: {name} must be a non-empty string, "
                                  f"got {getattr(self, name)!r}")
        if not _is_str(self.trace):
            try:
                self.trace = json.dumps(self.trace, sort_keys=True, separators=(",", ":"),
                                        allow_nan=False)
            except (TypeError, ValueError) as e:
                raise RecordError(f"{who}: trace is not JSON-serializable: {e}") from None
        else:
            try:
                json.loads(self.trace)
            except ValueError as e:
                raise RecordError(f"{who}: trace is not a JSON string ({e}): "
                                  f"{self.trace[:80]!r}") from None
        try:
            secs = [float(s) for s in self.seconds]
        except (TypeError, ValueError):
            raise RecordError(f"{who}: seconds must be a list of numbers, "
                              f"got {self.seconds!r}") from None
        if any(not math.isfinite(s) or s < 0 for s in secs):
            raise RecordError(f"{who}: seconds must be finite and >= 0, got {secs}")
        self.seconds = secs
        for name in ("error", "error_kind"):
            v = getattr(self, name)
            if v is not None and not _is_str(v):
                raise RecordError(f"{who}: {name} must be a string or None, got {v!r}")
        if self.error is None and self.error_kind is not None:
            raise RecordError(f"{who}: error_kind {self.error_kind!r} given without an error")
        if self.error is not None:
            self.best = None
        elif self.best is None:
            if not secs:
                raise RecordError(f"{who}: a successful record needs seconds "
                                  f"(give an error for a failed one)")
            self.best = min(secs)
        else:
            try:
                self.best = float(self.best)
            except (TypeError, ValueError):
                raise RecordError(f"{who}: best must be a number, got {self.best!r}") from None
            if not math.isfinite(self.best) or self.best < 0:
                raise RecordError(f"{who}: best must be finite and >= 0, got {self.best}")
        if not _is_str(self.strategy):
            raise RecordError(f"{who}: strategy must be a string, got {self.strategy!r}")
        if isinstance(self.round, bool) or not isinstance(self.round, int):
            if isinstance(self.round, float) and self.round.is_integer():
                self.round = int(self.round)
            else:
                raise RecordError(f"{who}: round must be an int, got {self.round!r}")
        if self.timestamp is None:
            self.timestamp = time.time()
        else:
            try:
                self.timestamp = float(self.timestamp)
            except (TypeError, ValueError):
                raise RecordError(f"{who}: timestamp must be a number, "
                                  f"got {self.timestamp!r}") from None
        if self.id is not None and (isinstance(self.id, bool) or not isinstance(self.id, int)):
            raise RecordError(f"{who}: id must be an int or None, got {self.id!r}")

    @property
    def ok(self) -> bool:
        return self.error is None and self.best is not None

    def to_dict(self) -> dict:
        return {f.name: (list(getattr(self, f.name)) if f.name == "seconds" else getattr(self, f.name))
                for f in fields(self)}

    @classmethod
    def from_dict(cls, d: dict) -> "Record":
        """Inverse of `to_dict`. Unknown keys are ignored (records from a newer tlmir)."""
        if not isinstance(d, dict):
            raise RecordError(f"a record must be a JSON object, got {type(d).__name__}")
        missing = [k for k in ("task_key", "task_name", "hw_key", "trace") if k not in d]
        if missing:
            raise RecordError(f"record is missing {missing}")
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


CONFIRM = "confirm"  # strategy of the re-measurements with which tune chooses its best program


def confirmed_times(records: list[Record]) -> dict[str, list[float]]:
    """trace -> its re-measured times, from the confirmation records that follow the last
    search record (empty when the records end in search measurements: a search that went on
    after a confirmation may have found something faster). Re-timings that are scheduler-tick
    artefacts against the fastest search record (`tick_artefact`: another job ran beside the
    confirmation) are left out, and a trace with none left with them."""
    out: dict[str, list[float]] = {}
    for r in records:
        if r.strategy != CONFIRM:
            out = {}
        elif r.ok:
            out.setdefault(r.trace, []).append(r.best)
    searched = [r.best for r in records if r.ok and r.strategy != CONFIRM]
    if not searched:
        return out
    fastest = min(searched)
    clean = {t: [s for s in times if not tick_artefact(s, fastest)] for t, times in out.items()}
    return {t: times for t, times in clean.items() if times}


def confirmed_best(records: list[Record]) -> tuple[str, float] | None:
    """(trace, median seconds) of the program whose re-measurements have the lowest median,
    when a confirmation ends one task's `records`; None when none does."""
    confirmed = confirmed_times(records)
    if not confirmed:
        return None
    return min(((t, statistics.median(v)) for t, v in confirmed.items()), key=lambda x: x[1])


def fastest_record(records: list[Record]) -> tuple[str, float] | None:
    """(trace, seconds) of the fastest verified search record (confirmations aside)."""
    ok = [r for r in records if r.ok and r.strategy != CONFIRM]
    if not ok:
        return None
    r = min(ok, key=lambda r: r.best)
    return r.trace, r.best


def best_of(records: list[Record]) -> tuple[str, float] | None:
    """(trace, seconds) of the best program in one task's `records` (insertion order): the
    confirmed best when a confirmation ends them, else the fastest record."""
    return confirmed_best(records) or fastest_record(records)


TICK_SECONDS = 4e-3  # the scheduler tick of the Linux VMs the archived records were measured on


def tick_artefact(seconds: float, task_best: float, tick: float = TICK_SECONDS, factor: float = 20.0,
                  width: float = 1 / 16) -> bool:
    """Is `seconds` (a task whose best is `task_best`) a scheduler-tick artefact? A parallel
    kernel timed while another process, niced or not, ran on its second core waits whole
    ticks at its barriers: it is recorded at a multiple of the tick however fast it is. A
    timing `factor` x slower than the best, 1-10 ticks long and within `width` of a
    multiple counts (a genuinely slow program lands there 2 x `width` of the time)."""
    if not 0.95 * tick <= seconds <= 10 * tick or seconds < factor * task_best:
        return False
    phase = (seconds / tick) % 1.0
    return phase < width or phase > 1 - width


def task_bests(records: Iterable[Record]) -> dict[tuple[str, str], float]:
    """(task key, hardware key) -> the fastest verified record's seconds."""
    best: dict[tuple[str, str], float] = {}
    for r in records:
        if r.ok:
            best[(r.task_key, r.hw_key)] = min(r.best, best.get((r.task_key, r.hw_key), r.best))
    return best


def drop_tick_artefacts(records: Sequence[Record], **kw) -> list[Record]:
    """The records but the tick artefacts (`tick_artefact`, against the best record of the
    same task and CPU class)."""
    best = task_bests(records)
    return [r for r in records if not (r.ok and tick_artefact(r.best, best[(r.task_key, r.hw_key)], **kw))]


class RecordDB:
    """`RecordDB(path)`: open or create a records database (":memory:" for a throwaway one).

    Thread-safe within a process; one writer process plus concurrent readers across
    processes. Every failure surfaces as `RecordError` naming the file.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        memory = self.path == ":memory:" or self.path == ""
        if not memory:
            if os.path.isdir(self.path):
                raise RecordError(f"{self.path}: is a directory, not a records database")
            parent = os.path.dirname(os.path.abspath(self.path))
            try:
                os.makedirs(parent, exist_ok=True)
            except OSError as e:
                raise RecordError(f"{self.path}: cannot create directory {parent}: {e}") from None
        try:
            conn = sqlite3.connect(self.path, timeout=30.0, isolation_level=None,
                                   check_same_thread=False)
        except sqlite3.Error as e:
            raise RecordError(f"{self.path}: cannot open records database: {e}") from None
        try:
            self._open(conn, memory)
        except BaseException:
            conn.close()
            raise
        self._conn = conn

    # ---------------------------------------------------------------- opening
    def _open(self, conn: sqlite3.Connection, memory: bool) -> None:
        try:
            conn.execute("PRAGMA busy_timeout=30000")
            if not self._check_existing(conn):
                # journal_mode cannot change inside a transaction: set it first
                if not memory:
                    self._set_wal(conn)
                conn.execute("BEGIN IMMEDIATE")
                try:
                    if not self._check_existing(conn):   # another process may have won
                        for stmt in _SCHEMA.split(";"):
                            if stmt.strip():
                                conn.execute(stmt)
                        conn.executemany("INSERT INTO meta(key, value) VALUES (?, ?)",
                                         [("format", FORMAT_NAME),
                                          ("schema_version", str(SCHEMA_VERSION)),
                                          ("created", repr(time.time()))])
                    conn.execute("COMMIT")
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
            elif not memory:
                self._set_wal(conn)
            conn.execute("PRAGMA synchronous=FULL")
        except sqlite3.Error as e:
            raise RecordError(f"{self.path}: not a readable tlmir records database: {e}") from None

    def _set_wal(self, conn: sqlite3.Connection) -> None:
        mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise RecordError(f"{self.path}: cannot switch the database to WAL mode "
                              f"(journal_mode is {mode})")

    def _check_existing(self, conn: sqlite3.Connection) -> bool:
        """True when the file already holds a tlmir DB of our version; False when empty;
        RecordError when it is something else."""
        tables = {r[0] for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type='table'")}
        if not tables:
            return False
        if "meta" not in tables:
            raise RecordError(f"{self.path}: is an SQLite database but not a tlmir records "
                              f"database (tables: {sorted(tables)})")
        try:
            meta = dict(conn.execute("SELECT key, value FROM meta"))
        except sqlite3.Error as e:
            raise RecordError(f"{self.path}: unreadable meta table: {e}") from None
        if meta.get("format") != FORMAT_NAME:
            raise RecordError(f"{self.path}: not a tlmir records database "
                              f"(format {meta.get('format')!r})")
        try:
            version = int(meta.get("schema_version", ""))
        except ValueError:
            raise RecordError(f"{self.path}: bad schema version "
                              f"{meta.get('schema_version')!r}") from None
        if version > SCHEMA_VERSION:
            raise RecordError(f"{self.path}: records schema version {version} was written by "
                              f"a newer tlmir; this one reads version {SCHEMA_VERSION}")
        if version != SCHEMA_VERSION:
            raise RecordError(f"{self.path}: records schema version {version} is older than "
                              f"{SCHEMA_VERSION} and cannot be read")
        if "records" not in tables:
            raise RecordError(f"{self.path}: tlmir records database without a records table")
        return True

    # ---------------------------------------------------------------- plumbing
    @contextlib.contextmanager
    def _db(self, what: str) -> Iterator[sqlite3.Connection]:
        with self._lock:
            if self._conn is None:
                raise RecordError(f"{self.path}: records database is closed ({what})")
            try:
                yield self._conn
            except sqlite3.Error as e:
                raise RecordError(f"{self.path}: {what} failed: {e}") from None

    def _row(self, row) -> Record:
        d = dict(zip(_COLUMNS, row))
        try:
            d["seconds"] = json.loads(d["seconds"])
            return Record(**d)
        except (ValueError, TypeError, RecordError) as e:
            raise RecordError(f"{self.path}: record id {d.get('id')} is corrupt: {e}") from None

    @staticmethod
    def _where(task_key, hw_key, extra: list[str] | None = None):
        conds, args = list(extra or []), []
        if task_key is not None:
            conds.append("task_key = ?")
            args.append(task_key)
        if hw_key is not None:
            conds.append("hw_key = ?")
            args.append(hw_key)
        return (" WHERE " + " AND ".join(conds)) if conds else "", args

    @staticmethod
    def _values(rec: Record) -> tuple:
        return (rec.task_key, rec.task_name, rec.hw_key, rec.trace,
                json.dumps(rec.seconds, allow_nan=False), rec.best, rec.error, rec.error_kind,
                rec.strategy, rec.round, rec.timestamp)

    _INSERT = ("INSERT INTO records(task_key, task_name, hw_key, trace, seconds, best, error, "
               "error_kind, strategy, round, timestamp) VALUES (?,?,?,?,?,?,?,?,?,?,?)")

    # ---------------------------------------------------------------- writing
    def append(self, rec: Record) -> int:
        """Store one record, committed (durably) before returning; returns its id."""
        return self.append_many([rec])[0]

    def append_many(self, recs: Iterable[Record]) -> list[int]:
        """Store records in one transaction (all or none); returns their ids."""
        recs = list(recs)
        values = []
        for r in recs:
            if not isinstance(r, Record):
                raise RecordError(f"{self.path}: can only append Record objects, "
                                  f"got {type(r).__name__}")
            try:    # re-validate: a record may have been mutated since it was built
                values.append(self._values(Record(**r.to_dict())))
            except RecordError as e:
                raise RecordError(f"{self.path}: refusing to append an invalid record: {e}") from None
        ids = []
        with self._db("append") as c:
            c.execute("BEGIN IMMEDIATE")
            try:
                for v in values:
                    ids.append(c.execute(self._INSERT, v).lastrowid)
                c.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    c.execute("ROLLBACK")
                raise
        for r, i in zip(recs, ids):
            r.id = i
        return ids

    # ---------------------------------------------------------------- reading
    def records(self, task_key: str | None = None, hw_key: str | None = None,
                ok_only: bool = False) -> list[Record]:
        """Records in insertion order, filtered by whichever keys are given."""
        where, args = self._where(task_key, hw_key, ["best IS NOT NULL"] if ok_only else None)
        with self._db("reading records") as c:
            rows = c.execute(f"{_SELECT}{where} ORDER BY id", args).fetchall()
        return [self._row(r) for r in rows]

    def best(self, task_key: str, hw_key: str, k: int = 1) -> list[Record]:
        """The k fastest successful records of one task on one machine, fastest first."""
        if task_key is None or hw_key is None:
            raise RecordError(f"{self.path}: best() needs both a task key and a hardware key")
        with self._db("reading best records") as c:
            rows = c.execute(f"{_SELECT} WHERE task_key = ? AND hw_key = ? AND best IS NOT NULL "
                             f"ORDER BY best, id LIMIT ?", (task_key, hw_key, int(k))).fetchall()
        return [self._row(r) for r in rows]

    def count(self, task_key: str | None = None, hw_key: str | None = None,
              ok_only: bool = False) -> int:
        where, args = self._where(task_key, hw_key, ["best IS NOT NULL"] if ok_only else None)
        with self._db("counting records") as c:
            return c.execute(f"SELECT COUNT(*) FROM records{where}", args).fetchone()[0]

    def traces_seen(self, task_key: str, hw_key: str) -> set[str]:
        """Every trace already measured (failed ones included) for one task on one machine."""
        with self._db("reading traces") as c:
            return {r[0] for r in c.execute(
                "SELECT trace FROM records WHERE task_key = ? AND hw_key = ?", (task_key, hw_key))}

    def tasks(self) -> list[tuple[str, str, str, int, float | None]]:
        """(task_key, task_name, hw_key, n records, best seconds or None) per task and machine;
        task_name is the most recently recorded name."""
        with self._db("listing tasks") as c:
            return [tuple(r) for r in c.execute(
                "SELECT g.task_key, r.task_name, g.hw_key, g.n, g.best FROM "
                "(SELECT task_key, hw_key, COUNT(*) AS n, MIN(best) AS best, MAX(id) AS last "
                " FROM records GROUP BY task_key, hw_key) g JOIN records r ON r.id = g.last "
                "ORDER BY g.task_key, g.hw_key")]

    def verify(self) -> None:
        """Run SQLite's integrity check and decode every record; RecordError if anything is off."""
        with self._db("integrity check") as c:
            res = [r[0] for r in c.execute("PRAGMA integrity_check")]
        if res != ["ok"]:
            raise RecordError(f"{self.path}: integrity check failed: {'; '.join(res[:5])}")
        self.records()

    # ---------------------------------------------------------------- lifetime
    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                try:
                    self._conn.close()
                except sqlite3.Error as e:
                    raise RecordError(f"{self.path}: closing failed: {e}") from None
                finally:
                    self._conn = None

    def __enter__(self) -> "RecordDB":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        with contextlib.suppress(Exception):
            self.close()

    def __len__(self) -> int:
        return self.count()

    def __repr__(self) -> str:
        state = "closed" if self._conn is None else f"{self.count()} records"
        return f"RecordDB({self.path!r}, {state})"


# -------------------------------------------------------------------- JSON lines
def _open_text(name: str, path: str, mode: str):
    """A text file at `path`, xz-compressed when `name` ends in `.xz`."""
    if name.endswith(".xz"):
        return lzma.open(path, mode + "t", encoding="utf-8", **({"preset": 6} if mode == "w" else {}))
    return open(path, mode, encoding="utf-8")


def export_jsonl(db: RecordDB, path: str | os.PathLike, task_key: str | None = None,
                 hw_key: str | None = None) -> int:
    """Write records (optionally of one task / machine) as JSON lines (xz-compressed when
    the path ends in `.xz`); returns how many. The file is replaced atomically."""
    path = os.fspath(path)
    recs = db.records(task_key, hw_key)
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        parent = os.path.dirname(os.path.abspath(path))
        os.makedirs(parent, exist_ok=True)
        with _open_text(path, tmp, "w") as f:
            for r in recs:
                d = r.to_dict()
                d.pop("id")
                f.write(json.dumps(d, allow_nan=False) + "\n")
        os.replace(tmp, path)
    except OSError as e:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise RecordError(f"{path}: cannot write records: {e}") from None
    _remove_stale_temporaries(path)
    return len(recs)


def _remove_stale_temporaries(path: str) -> None:
    """Delete `path.tmp<pid>` files of writers that no longer run: a process killed while
    exporting leaves its half-written copy beside an archive kept in the repository."""
    parent, name = os.path.split(os.path.abspath(path))
    for entry in os.listdir(parent):
        pid = entry[len(name) + 4:]
        if not (entry.startswith(name + ".tmp") and pid.isdigit()):
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            with contextlib.suppress(OSError):
                os.remove(os.path.join(parent, entry))
        except OSError:
            pass  # alive under another user


def import_jsonl(path: str | os.PathLike, db: RecordDB, dedup: bool = True) -> int:
    """Add the records of a JSON-lines file (`.xz` read compressed) to `db` in one transaction; returns how many were
    added. With `dedup`, a record identical in task, machine, trace and timestamp to one
    already there (e.g. the same file imported twice) is skipped. Blank lines are allowed;
    a malformed line imports nothing and raises RecordError naming the file and line."""
    path = os.fspath(path)
    recs = []
    try:
        with _open_text(path, path, "r") as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    d = json.loads(line)
                    if isinstance(d, dict):
                        d.pop("id", None)
                    recs.append(Record.from_dict(d))
                except (ValueError, RecordError) as e:
                    raise RecordError(f"{path}:{lineno}: malformed record: {e}") from None
    except (OSError, EOFError, lzma.LZMAError) as e:
        raise RecordError(f"{path}: cannot read records: {e}") from None
    except UnicodeDecodeError as e:
        raise RecordError(f"{path}: not a UTF-8 text file: {e}") from None
    if dedup:
        seen: dict[tuple[str, str], set] = {}
        fresh = []
        for r in recs:
            key = (r.task_key, r.hw_key)
            if key not in seen:
                seen[key] = {(x.trace, x.timestamp) for x in db.records(*key)}
            if (r.trace, r.timestamp) not in seen[key]:
                seen[key].add((r.trace, r.timestamp))
                fresh.append(r)
        recs = fresh
    db.append_many(recs)
    return len(recs)


def read_records(paths: Sequence[str]) -> list[Record]:
    """The records of record databases (`.db`) and JSON-lines exports (`.jsonl`, `.jsonl.xz`)."""
    import tempfile
    recs: list[Record] = []
    for path in paths:
        if not os.path.exists(path):
            raise RecordError(f"records file {path} does not exist")
        if str(path).endswith((".jsonl", ".jsonl.xz")):
            with tempfile.TemporaryDirectory() as d, RecordDB(os.path.join(d, "r.db")) as db:
                import_jsonl(path, db)
                recs += db.records()
        else:
            with RecordDB(path) as db:
                recs += db.records()
    return recs
