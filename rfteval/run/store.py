"""The run's store: the response and grade logs, their index, and what resume may reuse.

DIR/store/responses.jsonl and DIR/store/grades.jsonl are append-only and flushed after every line: they are
the truth, and what a resumed run reads. DIR/store/index.sqlite is derived from them (a key → entry index, so
memory stays flat with dataset size) and is rebuilt or caught up from the logs whenever it lags behind them.
The result files are rebuilt from the store by rfteval.run.results.
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import os
import sqlite3
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, TypedDict, TypeVar

import msgspec

from rfteval.data.json_types import JSONField
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
    RUN_FILE,
    STORE,
    SUMMARY,
)
from rfteval.errors import InputError

if TYPE_CHECKING:
    from rfteval.data.json_types import JSONMapping, JSONObject, JSONValue
    from rfteval.graders.base import GradeResult
    from rfteval.providers.base import Generation

# Failures that are a property of the response itself: stored as final, never re-sent on resume.
FINAL_GENERATION_ERRORS = frozenset({"refusal"})
# Grading failures of the grading machinery rather than of the output: re-graded on resume.
# A truncated judge answer too: one cut off by the output limit is re-read from the judge cache at no cost, and a
# prompt past the server's context (never cached) is sent again once the server's context was raised.
TRANSIENT_GRADE_ERRORS = frozenset({"python_grader_server_error", "model_grader_server_error",
                                    "model_grader_truncated_error"})


class EntryError(msgspec.Struct):
    """The failure a stored entry records: `type` is the kind the error policy counts by."""

    type: str
    message: str = ""


class _Entry(msgspec.Struct, kw_only=True):
    """A typed line of a store log. Fields are declared in the order they are written, so `to_dict` gives the
    line exactly as the dict-based code wrote it (old run directories resume, new ones read the same)."""

    # keys written only when set: everything else is always on the line, null or not
    __optional__: ClassVar[frozenset[str]] = frozenset()

    def to_dict(self) -> JSONObject:
        """The line as it goes to disk."""
        out: JSONObject = {}
        for name in self.__struct_fields__:
            value = getattr(self, name)
            if value is None and name in self.__optional__:
                continue
            out[name] = {"type": value.type, "message": value.message} if isinstance(value, EntryError) else value
        return out


class ResponseEntry(_Entry, kw_only=True):
    """One line of responses.jsonl: what the server sent for one cell, or the error that ended it."""

    key: str = ""
    label: str = ""
    model: str = ""
    item_id: str = ""
    epoch: int = 0
    output_text: str | None = None
    output_tools: list[JSONField] | None = None  # Generation's, as the server sent them
    output_json: JSONField = None
    choices: list[JSONField] | None = None
    usage: dict[str, int | None] | None = None  # Generation's token counts
    finish_reason: str | None = None
    error: EntryError | None = None
    reasoning: str | None = None  # what the server sent apart; output_text stays the content as sent
    latency_s: float | None = None
    attempts: int = 1
    session: str = ""
    at: str = ""
    tier: str | None = None  # "flex" (and batch results) bill at batch prices

    __optional__ = frozenset({"reasoning", "tier"})

    @property
    def error_type(self) -> str | None:
        return self.error.type if self.error is not None else None


class GradeEntry(_Entry, kw_only=True):
    """One line of grades.jsonl: one grader's grade of one stored response."""

    key: str = ""
    grader: str = ""
    score: float = 0.0
    sub_scores: dict[str, float] | None = None  # GradeResult's (floats: msgspec writes them as it reads them)
    error: EntryError | None = None
    passed: bool | None = None
    stdout: str | None = None
    details: JSONField = None
    at: str = ""

    def result(self) -> GradeResult:
        """The grade as graders return it (for rfteval.graders.grading.apply_grade)."""
        from rfteval.graders.base import GradeError, GradeResult

        err, details = self.error, self.details
        return GradeResult(float(self.score), sub_scores=self.sub_scores, passed=self.passed, stdout=self.stdout,
                           details=details if isinstance(details, dict) else None,  # as written: GradeResult's
                           error=GradeError(err.type, err.message) if err else None)

    @property
    def error_type(self) -> str | None:
        return self.error.type if self.error is not None else None


def decode_response(obj: JSONMapping) -> ResponseEntry:
    """A responses.jsonl line (as json.loads read it) as its typed entry; msgspec.ValidationError when it is not one."""
    return msgspec.convert(obj, ResponseEntry)


def decode_grade(obj: JSONMapping) -> GradeEntry:
    return msgspec.convert(obj, GradeEntry)


def cell_key(identity: JSONMapping, body: JSONMapping, epoch: int) -> str:
    """The cache key of one (endpoint, request, epoch): epochs are independent samples, never each other's hit."""
    text = json.dumps({"identity": identity, "body": body, "epoch": int(epoch)}, sort_keys=True,
                      separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


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
"""
# A stored response is never replaced by a later error; an error is replaced by whatever comes next.
_PUT_RESPONSE = ("INSERT INTO responses VALUES (?, ?, ?) ON CONFLICT(key) DO UPDATE "
                 "SET ok = excluded.ok, entry = excluded.entry WHERE responses.ok = 0")
_PUT_GRADE = "INSERT OR REPLACE INTO grades VALUES (?, ?, ?)"
_E = TypeVar("_E", ResponseEntry, GradeEntry)


def _is_final(entry: ResponseEntry) -> int:
    return 1 if entry.error is None or entry.error.type in FINAL_GENERATION_ERRORS else 0


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
        for name in (RESPONSES, GRADES, INDEX, INDEX + "-wal", INDEX + "-shm", JOURNAL):
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
        for name, log in (("responses", self.responses), ("grades", self.grades)):
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
                        entry = decode_response(line) if name == "responses" else decode_grade(line)
                    except msgspec.ValidationError:
                        continue  # never produced by rfteval: skipped as iter_log skips a line that is not JSON
                    self._index(entry)
            self.db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (name, size))
        self.db.commit()

    def _index(self, entry: ResponseEntry | GradeEntry) -> None:
        if isinstance(entry, ResponseEntry):
            self.db.execute(_PUT_RESPONSE, (entry.key, _is_final(entry), _dumps(entry.to_dict())))
        else:
            self.db.execute(_PUT_GRADE, (entry.key, entry.grader, _dumps(entry.to_dict())))

    def commit(self) -> None:
        self.db.execute("INSERT OR REPLACE INTO meta VALUES ('responses', ?)", (self.responses.size(),))
        self.db.execute("INSERT OR REPLACE INTO meta VALUES ('grades', ?)", (self.grades.size(),))
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
        self.responses.sync()
        self.grades.sync()
        self.responses.close()
        self.grades.close()
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
    if (store_dir / RESPONSES).is_file():
        for line in iter_log(store_dir / RESPONSES):
            entry = _decoded(line, decode_response)
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

    def close(self) -> None:
        self.db.close()


def is_reusable_response(entry: ResponseEntry | None) -> bool:
    """A stored entry that resume keeps: a response, or a failure that re-sending cannot change."""
    return entry is not None and bool(_is_final(entry))


def is_reusable_grade(entry: GradeEntry | None) -> bool:
    """A stored grade that resume keeps: a grade, or a failure that grading again cannot change."""
    return entry is not None and (entry.error is None or entry.error.type not in TRANSIENT_GRADE_ERRORS)


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


# ---------------------------------------------------------------- entries


class CellKeys(TypedDict):
    """Who a cell's response entry is for: new_response_entry's keywords a caller builds once and passes on whole."""

    key: str
    label: str
    model: str
    item_id: str
    epoch: int
    session: str


class _EntryCommon(CellKeys):
    """What every response entry carries, answer or error."""

    latency_s: float | None
    attempts: int
    at: str
    tier: str | None


def new_response_entry(
    *, key: str, label: str, model: str, item_id: str, epoch: int, generation: Generation | None = None,
    error: tuple[str, str] | None = None, latency_s: float | None = None, attempts: int = 1, session: str = "",
) -> ResponseEntry:
    """One entry of responses.jsonl: a Generation, or the error that ended the cell."""
    common: _EntryCommon = {"key": key, "label": label, "model": model, "item_id": item_id, "epoch": int(epoch),
                            "latency_s": latency_s, "attempts": attempts, "session": session, "at": now_iso(),
                            "tier": getattr(generation, "tier", None)}
    if generation is not None:
        return ResponseEntry(
            **common, output_text=generation.output_text, output_tools=generation.output_tools or None,
            output_json=generation.output_json, choices=generation.choices, usage=generation.usage,
            finish_reason=generation.finish_reason, reasoning=generation.reasoning,
        )
    kind, message = error if error is not None else ("other", "no generation and no error was given")
    return ResponseEntry(**common, error=EntryError(kind, message))


def new_grade_entry(key: str, grader: str, result: GradeResult) -> GradeEntry:
    err = result.error
    return GradeEntry(
        key=key, grader=grader, score=float(result.score), sub_scores=result.sub_scores,
        error=EntryError(err.type, err.message) if err else None, passed=result.passed,
        stdout=result.stdout or None, details=result.details, at=now_iso(),
    )

