"""The run's store: the response and grade logs, their index, and what resume may reuse.

DIR/store/responses.jsonl and DIR/store/grades.jsonl are append-only and flushed after every line: they are
the truth, and what a resumed run reads. An agent run (rfteval.run.rollout) keeps two more, made when it first
writes to them: tools.jsonl (every executed tool turn: its calls, results and the state after) and rollouts.jsonl
(every finished rollout); its model turns go to responses.jsonl, each under the key of its own request.
DIR/store/index.sqlite is derived from them (a key → entry index, so
memory stays flat with dataset size) and is rebuilt or caught up from the logs whenever it lags behind them.
The result files are rebuilt from the store by rfteval.run.results.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import sqlite3
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import msgspec

from rfteval.data.outfile import write_text_atomic
from rfteval.data.records import now_iso
from rfteval.data.rundir import (
    CHUNK_DIR,
    GRADES,
    INDEX,
    JOURNAL,
    RESOLVED_SPEC,
    RESPONSES,
    RESULTS,
    ROLLOUTS,
    RUN_FILE,
    STORE,
    SUMMARY,
    TOOL_TURNS,
)
from rfteval.errors import InputError
from rfteval.run.entries import (
    FINAL_GENERATION_ERRORS,
    TRANSIENT_GRADE_ERRORS,
    CellKeys,
    EntryError,
    GradeEntry,
    ResponseEntry,
    RolloutEntry,
    ToolTurnEntry,
    cell_key,
    decode_grade,
    decode_response,
    decode_rollout,
    decode_tool_turn,
    final_flag,
    is_reusable_grade,
    is_reusable_response,
    new_grade_entry,
    new_response_entry,
    rollout_key,
    tool_turn_key,
)

if TYPE_CHECKING:
    from rfteval.data.json_types import JSONMapping, JSONValue

# The store's lines live in rfteval.run.entries; their names are the store's too (rfteval.run.store.ResponseEntry)
__all__ = [
    "FINAL_GENERATION_ERRORS", "TRANSIENT_GRADE_ERRORS", "CellKeys", "EntryError", "GradeEntry", "ResponseEntry",
    "RolloutEntry", "ToolTurnEntry", "cell_key", "decode_grade", "decode_response", "decode_rollout",
    "decode_tool_turn", "is_reusable_grade", "is_reusable_response", "new_grade_entry", "new_response_entry",
    "rollout_key", "tool_turn_key", "RunStore", "StoreReader", "StoredCells", "check_run_dir", "iter_log",
    "read_stored", "run_dir_busy",
]


def _dumps(obj: JSONMapping) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), default=str)


class _Log:
    """One append-only JSONL file; a torn last line (a kill mid-write) is cut off on open."""

    def __init__(self, path: Path):
        self.path = path
        path.touch(exist_ok=True)
        self._trim_torn_tail()
        self.fh = open(path, "a", encoding="utf-8")

    def _trim_torn_tail(self) -> None:
        size = self.path.stat().st_size
        if not size:
            return
        with open(self.path, "rb+") as fh:
            fh.seek(max(0, size - 1))
            if fh.read(1) == b"\n":
                return
            # scan back to the last newline and truncate after it
            pos = size
            chunk = 65536
            while pos > 0:
                start = max(0, pos - chunk)
                fh.seek(start)
                data = fh.read(pos - start)
                nl = data.rfind(b"\n")
                if nl >= 0:
                    fh.truncate(start + nl + 1)
                    return
                pos = start
            fh.truncate(0)

    def append(self, obj: JSONMapping) -> None:
        self.fh.write(_dumps(obj) + "\n")
        self.fh.flush()

    def size(self) -> int:
        return self.fh.tell()

    def sync(self) -> None:
        self.fh.flush()
        os.fsync(self.fh.fileno())

    def close(self) -> None:
        self.fh.close()


def iter_log(path: Path, start: int = 0) -> Iterator[JSONValue]:
    """The parsed lines of a log (a reader narrows each: a line written by hand need not be an object)."""
    with open(path, "rb") as fh:
        fh.seek(start)
        for raw in fh:
            if not raw.endswith(b"\n"):
                break
            try:
                yield json.loads(raw)
            except ValueError:
                continue  # never produced by rfteval; skip rather than lose the rest


_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, ok INTEGER NOT NULL, entry TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS grades (key TEXT NOT NULL, grader TEXT NOT NULL, entry TEXT NOT NULL,
                                   PRIMARY KEY (key, grader));
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS rollouts (key TEXT PRIMARY KEY, ok INTEGER NOT NULL, entry TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS tool_turns (key TEXT PRIMARY KEY, entry TEXT NOT NULL);
"""
# A stored response is never replaced by a later error; an error is replaced by whatever comes next.
_PUT_RESPONSE = ("INSERT INTO responses VALUES (?, ?, ?) ON CONFLICT(key) DO UPDATE "
                 "SET ok = excluded.ok, entry = excluded.entry WHERE responses.ok = 0")
_PUT_GRADE = "INSERT OR REPLACE INTO grades VALUES (?, ?, ?)"
_PUT_ROLLOUT = _PUT_RESPONSE.replace("responses", "rollouts")
_PUT_TOOL_TURN = "INSERT OR IGNORE INTO tool_turns VALUES (?, ?)"  # the turn the rollout went on from is the truth
_E = TypeVar("_E", ResponseEntry, GradeEntry, RolloutEntry, ToolTurnEntry)

def _decode_row(text: str, kind: type[_E], index: Path) -> _E:
    """An index row, decoded once into its typed entry."""
    try:
        return msgspec.convert(json.loads(text), kind)
    except (ValueError, msgspec.ValidationError) as exc:
        raise InputError(f"a corrupt store index entry ({exc}); delete the file to rebuild it", index) from None


class RunStore:
    """The store of one run directory, held by one process at a time (a lock file says which)."""

    def __init__(self, out_dir: str | Path, fresh: bool = False, commit_every: int = 256, commit_s: float = 1.0,
                 before_wipe: Callable[[Path], None] | None = None):
        """`before_wipe(run dir)` runs under the lock before --fresh removes anything, and may refuse (InputError):
        rfteval.run.batch.phase refuses while batches of the run are open at the provider."""
        self.dir = Path(out_dir)
        check_run_dir(self.dir)
        self.store_dir = self.dir / STORE
        try:
            self.store_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InputError(f"cannot make the run directory ({exc.strerror})", self.dir, field="--out") from None
        self._lock_fh = open(self.store_dir / "lock", "a+")
        try:
            fcntl.flock(self._lock_fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock_fh.close()
            raise InputError("another rfteval run is using this run directory", self.dir, field="--out") from None
        if fresh:
            if before_wipe is not None:
                try:
                    before_wipe(self.dir)
                except BaseException:
                    self._lock_fh.close()
                    raise
            self._wipe()
        self.run_id = self._run_id()
        self.session = uuid.uuid4().hex[:12]  # this invocation: a response from another one is `cached`
        self.responses = _Log(self.store_dir / RESPONSES)
        self.grades = _Log(self.store_dir / GRADES)
        # an agent run's logs: opened when there (a resumed agent run) or when first written, so a run without tools
        # writes exactly the files it always did
        self.rollouts: _Log | None = _Log(self.store_dir / ROLLOUTS) if (self.store_dir / ROLLOUTS).exists() else None
        self.tool_turns: _Log | None = (_Log(self.store_dir / TOOL_TURNS) if (self.store_dir / TOOL_TURNS).exists()
                                        else None)
        self.db = sqlite3.connect(self.store_dir / INDEX)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=OFF")  # the index is derived; the logs are the truth
        self.db.executescript(_SCHEMA)
        self._catch_up()
        self._pending = 0
        self._last_commit = time.monotonic()
        self.commit_every = commit_every
        self.commit_s = commit_s

    # ------------------------------------------------------------ lifecycle

    def _wipe(self) -> None:
        """--fresh: remove what this run directory's run wrote, and nothing else (not other runs' records)."""
        old_run = self._read_run_id()
        if (self.store_dir / CHUNK_DIR).is_dir():
            for path in (self.store_dir / CHUNK_DIR).iterdir():
                path.unlink()
        for name in (RESPONSES, GRADES, ROLLOUTS, TOOL_TURNS, INDEX, INDEX + "-wal", INDEX + "-shm", JOURNAL):
            (self.store_dir / name).unlink(missing_ok=True)
        for name in (RUN_FILE, RESULTS, SUMMARY, RESOLVED_SPEC):
            (self.dir / name).unlink(missing_ok=True)
        if old_run is not None:
            for path in self.dir.glob("*.jsonl"):
                if _records_run_id(path) == old_run:
                    path.unlink()

    def _read_run_id(self) -> str | None:
        try:
            return str(json.loads((self.dir / RUN_FILE).read_text())["run_id"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def _run_id(self) -> str:
        path = self.dir / RUN_FILE
        existing = self._read_run_id()
        if existing is not None:
            return existing
        run_id = time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:6]
        write_text_atomic(path, json.dumps({"run_id": run_id, "created_at": now_iso()}) + "\n")
        return run_id

    def _catch_up(self) -> None:
        """Index whatever the logs hold beyond what the index has seen; rebuild when the logs shrank."""
        meta = dict(self.db.execute("SELECT name, value FROM meta").fetchall())
        for name, log in self._logs():
            size = log.size()
            seen = meta.get(name, 0)
            if seen > size:  # the log was replaced: start the index over
                self.db.execute(f"DELETE FROM {name}")
                seen = 0
            if seen < size:
                for line in iter_log(log.path, seen):
                    if not isinstance(line, dict):
                        continue  # never produced by rfteval, as below
                    try:
                        entry = _DECODE[name](line)
                    except msgspec.ValidationError:
                        continue  # never produced by rfteval: skipped as iter_log skips a line that is not JSON
                    self._index(entry)
            self.db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (name, size))
        self.db.commit()

    def _logs(self) -> list[tuple[str, _Log]]:
        """The logs there are, by the name the index's meta table counts their indexed bytes under."""
        logs = [("responses", self.responses), ("grades", self.grades)]
        if self.rollouts is not None:
            logs.append(("rollouts", self.rollouts))
        if self.tool_turns is not None:
            logs.append(("tool_turns", self.tool_turns))
        return logs

    def _index(self, entry: ResponseEntry | GradeEntry | RolloutEntry | ToolTurnEntry) -> None:
        if isinstance(entry, RolloutEntry):  # first: a rollout's entry is a response entry too
            self.db.execute(_PUT_ROLLOUT, (entry.key, final_flag(entry), _dumps(entry.to_dict())))
        elif isinstance(entry, ResponseEntry):
            self.db.execute(_PUT_RESPONSE, (entry.key, final_flag(entry), _dumps(entry.to_dict())))
        elif isinstance(entry, ToolTurnEntry):
            self.db.execute(_PUT_TOOL_TURN, (entry.key, _dumps(entry.to_dict())))
        else:
            self.db.execute(_PUT_GRADE, (entry.key, entry.grader, _dumps(entry.to_dict())))

    def commit(self) -> None:
        for name, log in self._logs():
            self.db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (name, log.size()))
        self.db.commit()
        self._pending = 0
        self._last_commit = time.monotonic()

    def _maybe_commit(self) -> None:
        self._pending += 1
        if self._pending >= self.commit_every or time.monotonic() - self._last_commit > self.commit_s:
            self.commit()

    def close(self) -> None:
        if getattr(self, "db", None) is None:
            return
        self.commit()
        for _, log in self._logs():
            log.sync()
            log.close()
        self.db.close()
        self.db = None  # type: ignore[assignment]
        self._lock_fh.close()

    def __enter__(self) -> RunStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ responses and grades

    def put_response(self, entry: ResponseEntry) -> None:
        """Append (and flush) before anything else happens to it: a response is never paid for twice."""
        self.responses.append(entry.to_dict())
        self._index(entry)
        self._maybe_commit()

    def get_response(self, key: str) -> ResponseEntry | None:
        row = self.db.execute("SELECT entry FROM responses WHERE key = ?", (key,)).fetchone()
        return _decode_row(row[0], ResponseEntry, self.store_dir / INDEX) if row else None

    def put_grade(self, entry: GradeEntry) -> None:
        self.grades.append(entry.to_dict())
        self._index(entry)
        self._maybe_commit()

    def get_grade(self, key: str, grader: str) -> GradeEntry | None:
        row = self.db.execute("SELECT entry FROM grades WHERE key = ? AND grader = ?", (key, grader)).fetchone()
        return _decode_row(row[0], GradeEntry, self.store_dir / INDEX) if row else None

    def put_rollout(self, entry: RolloutEntry) -> None:
        """Append (and flush) a finished rollout, or the error that ended one."""
        if self.rollouts is None:
            self.rollouts = _Log(self.store_dir / ROLLOUTS)
        self.rollouts.append(entry.to_dict())
        self._index(entry)
        self._maybe_commit()

    def get_rollout(self, key: str) -> RolloutEntry | None:
        row = self.db.execute("SELECT entry FROM rollouts WHERE key = ?", (key,)).fetchone()
        return _decode_row(row[0], RolloutEntry, self.store_dir / INDEX) if row else None

    def put_tool_turn(self, entry: ToolTurnEntry) -> None:
        """Append (and flush) an executed tool turn before the rollout goes on from it."""
        if self.tool_turns is None:
            self.tool_turns = _Log(self.store_dir / TOOL_TURNS)
        self.tool_turns.append(entry.to_dict())
        self._index(entry)
        self._maybe_commit()

    def get_tool_turn(self, key: str) -> ToolTurnEntry | None:
        row = self.db.execute("SELECT entry FROM tool_turns WHERE key = ?", (key,)).fetchone()
        return _decode_row(row[0], ToolTurnEntry, self.store_dir / INDEX) if row else None

    def reader(self) -> StoreReader:
        """A read-only view on its own connection (for exports from another thread); commits first."""
        self.commit()
        return StoreReader(self.store_dir / INDEX)


def check_run_dir(out_dir: Path) -> None:
    """What RunStore checks of a run directory before making it, without making anything (a dry run's check too)."""
    if out_dir.exists() and not out_dir.is_dir():
        raise InputError("exists and is not a directory", out_dir, field="--out")
    for parent in out_dir.parents:
        if parent.exists() and not parent.is_dir():
            raise InputError(f"cannot make a run directory under {parent}: it is a file", out_dir, field="--out")


def run_dir_busy(out_dir: Path) -> bool:
    """Whether another process holds the run directory's lock, asked without creating the lock file."""
    lock = out_dir / STORE / "lock"
    if not lock.is_file():
        return False
    with open(lock) as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
    return False


@dataclasses.dataclass
class StoredCells:
    """What a run directory's logs hold, read without the lock or the index (a dry run writes nothing): the keys
    whose response resume keeps (True when that response is a final error, which is not graded), and the keys
    whose grade under one grades key resume keeps."""

    responses: dict[str, bool] = dataclasses.field(default_factory=dict)
    graded: set[str] = dataclasses.field(default_factory=set)


def read_stored(out_dir: Path, grader: str) -> StoredCells:
    """The logs as the index would hold them: a kept response is never replaced, a later grade replaces one."""
    out = StoredCells()
    store_dir = out_dir / STORE
    for name, decode in ((RESPONSES, decode_response), (ROLLOUTS, decode_rollout)):  # an agent run's cells: rollouts
        if not (store_dir / name).is_file():
            continue
        for line in iter_log(store_dir / name):
            entry = _decoded(line, decode)
            if entry is not None and entry.key not in out.responses and is_reusable_response(entry):
                out.responses[entry.key] = entry.error is not None
    grades: dict[str, bool] = {}
    if (store_dir / GRADES).is_file():
        for line in iter_log(store_dir / GRADES):
            grade = _decoded(line, decode_grade)
            if grade is not None and grade.grader == grader:
                grades[grade.key] = is_reusable_grade(grade)
    out.graded = {key for key, kept in grades.items() if kept}
    return out


def _decoded(line: JSONValue, decode: Callable[[JSONMapping], _E]) -> _E | None:
    if not isinstance(line, dict):
        return None  # never produced by rfteval, skipped as the index skips it
    try:
        return decode(line)
    except msgspec.ValidationError:
        return None


class StoreReader:
    def __init__(self, path: Path):
        self.path = path
        self.db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)

    def get_response(self, key: str) -> ResponseEntry | None:
        row = self.db.execute("SELECT entry FROM responses WHERE key = ?", (key,)).fetchone()
        return _decode_row(row[0], ResponseEntry, self.path) if row else None

    def get_grade(self, key: str, grader: str) -> GradeEntry | None:
        row = self.db.execute("SELECT entry FROM grades WHERE key = ? AND grader = ?", (key, grader)).fetchone()
        return _decode_row(row[0], GradeEntry, self.path) if row else None

    def get_rollout(self, key: str) -> RolloutEntry | None:
        row = self.db.execute("SELECT entry FROM rollouts WHERE key = ?", (key,)).fetchone()
        return _decode_row(row[0], RolloutEntry, self.path) if row else None

    def close(self) -> None:
        self.db.close()


_DECODE: dict[str, Callable[[JSONMapping], ResponseEntry | GradeEntry | RolloutEntry | ToolTurnEntry]] = {
    "responses": decode_response, "grades": decode_grade, "rollouts": decode_rollout, "tool_turns": decode_tool_turn}


def _records_run_id(path: Path) -> str | None:
    """The run_id of a record file's first record, or None when it is not a record file."""
    try:
        with open(path, encoding="utf-8") as fh:
            first = fh.readline()
        row = json.loads(first) if first.strip() else {}
    except (OSError, ValueError):
        return None
    if isinstance(row, dict) and "model_label" in row and "epoch" in row:
        return str(row.get("run_id"))
    return None

