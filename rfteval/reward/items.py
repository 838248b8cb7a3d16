"""The item a completion is graded against, found again exactly whatever the trainer's loader did to the row: the
items= lines by id (ItemTable), the original line an `rfteval export-dataset` row carries (decode_exported, the META
column), else the row's values as JSON data, what a loader changed turned back where exact and warned about once per
column where not (plain_data, Coercions).
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import threading
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from rfteval.data.json_types import JSONObject, JSONValue
from rfteval.errors import InputError

# The logger every reward warns on, once per kind of trouble (a column a loader changed, a grading error type)
log = logging.getLogger("rfteval.reward")

# The column `rfteval export-dataset` adds: JSON text saying which fields it stored as JSON text (because the
# trainer's loader would have changed them) and which it added (the id of a line that had none), so the adapter
# rebuilds the original line exactly.
META = "rfteval"


class Coercions:
    """What a loader did to the columns that cannot be undone exactly, noted once per (column, kind) so the
    warning names the column and says to pass items= (never silent, never a flood)."""

    def __init__(self, owner: str):
        self.owner = owner
        self._seen: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    def note(self, column: str, kind: str) -> None:
        with self._lock:
            if (column, kind) in self._seen:
                return
            self._seen.add((column, kind))
        why = {"timestamp": "holds a timestamp the loader made from a date-like string (Arrow's JSON reader does); "
                            "it is given to the grader as ISO text, which may not be the line's own text",
               "null": "holds null, which a loader writes for a key the line did not have (Arrow pads struct "
                       "keys and columns other rows have); the grader may see a key the line never had",
               "text": "holds a value JSON has no form for (bytes, a decimal, a duration: never read from a JSON "
                       "line); it is given to the grader as its text (str)"}[kind]
        log.warning("%s: column %r %s. Pass items=ITEMS.jsonl (or export the dataset with `rfteval export-dataset`) "
                    "so the item is the original line (logged once per column)", self.owner, column, why)


def plain_data(value: object, column: str | None = None, notes: Coercions | None = None) -> JSONValue:
    """Column values as JSON data: numpy arrays and scalars, Arrow scalars (what parquet- and Arrow-backed
    datasets hand over, verl's and TRL's among them) become lists and numbers, exactly. What cannot be undone
    exactly (a timestamp made from a string, null padding, a value of no JSON kind given as its text) is noted on
    `notes` under `column`."""
    if value is None:
        if notes is not None and column is not None:
            notes.note(column, "null")
        return None
    if isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, Mapping):
        return {k: plain_data(v, column, notes) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain_data(v, column, notes) for v in value]
    if isinstance(value, (_dt.datetime, _dt.date, _dt.time)):
        if notes is not None and column is not None:
            notes.note(column, "timestamp")
        if isinstance(value, _dt.datetime) and value.tzinfo is None and value.time() == _dt.time():
            return value.date().isoformat()  # "2025-03-14" came in as midnight of that day: the likeliest text
        return value.isoformat()
    as_py = getattr(value, "as_py", None)  # Arrow scalars
    if callable(as_py):
        return plain_data(as_py(), column, notes)
    tolist = getattr(value, "tolist", None)  # numpy arrays and scalars, torch tensors
    if callable(tolist):
        return plain_data(tolist(), column, notes)
    # No JSON line holds such a value (an item read as `rfteval grade` reads it never does), so no score depends
    # on it staying an object; as text the item stays JSON, which every grader and the python sandbox take.
    if notes is not None and column is not None:
        notes.note(column, "text")
    return str(value)


def decode_exported(row: Mapping[str, object], prompt: object = None) -> JSONObject | None:
    """The original line of a row written by `rfteval export-dataset` (it has the META column), else None: the
    line's own keys in its order, those stored as JSON text parsed back, the one the prompt column holds taken from
    `prompt` (TRL hands the prompt over apart from the columns); keys a reader padded, the id export-dataset added
    and keys a trainer added are left out."""
    meta = row.get(META)
    if not isinstance(meta, str):
        return None
    try:
        info = json.loads(meta)
    except ValueError:
        return None
    if not isinstance(info, dict) or not isinstance(info.get("fields"), list):
        return None
    as_json = set(info.get("json", ()))
    out: JSONObject = {}
    for key in info["fields"]:
        if key == info.get("prompt"):
            out[key] = plain_data(prompt)
        elif key in as_json:
            text = row[key]
            if not isinstance(text, (str, bytes, bytearray)):  # what json.loads refuses, refused as it would
                raise TypeError(f"column {key!r} should hold JSON text (rfteval export-dataset wrote it so), not "
                                f"{type(text).__name__}")
            out[key] = json.loads(text)
        else:
            out[key] = plain_data(row.get(key))
    return out


def _row_ids(rows: Iterable[JSONObject], id_field: str) -> Iterable[tuple[str, JSONObject]]:
    """(id, row) as rfteval reads a dataset: the id field, else the line's content hash (identical lines numbered
    in order: abc123, abc123-2, ...), so the id `export-dataset` added is the one `rfteval grade` uses."""
    from rfteval.data.dataset import content_id

    repeats: dict[str, int] = {}
    for row in rows:
        if row.get(id_field) is not None:
            yield str(row[id_field]), dict(row)
            continue
        rid = content_id(dict(row))
        count = repeats[rid] = repeats.get(rid, 0) + 1
        yield (rid if count == 1 else f"{rid}-{count}"), dict(row)


class ItemTable:
    """The original lines by id (items=), read once per process."""

    def __init__(self, items: str | Sequence[JSONObject], id_field: str):
        from rfteval.data.dataset import iter_jsonl

        self.source = items if isinstance(items, str) else "items="
        if isinstance(items, str):
            rows: list[JSONObject] = []
            for lineno, row in iter_jsonl(Path(items)):
                if isinstance(row, InputError):
                    raise row
                if not isinstance(row, dict):
                    raise InputError(f"expected a JSON object, got {type(row).__name__}", items, lineno)
                rows.append(row)
        else:
            rows = [dict(r) for r in items]
        self.by_id = dict(_row_ids(rows, id_field))
        self.id_field = id_field

    def get(self, rid: object) -> JSONObject:
        key = str(plain_data(rid))
        try:
            return self.by_id[key]
        except KeyError:
            raise InputError(f"no line with {self.id_field} {key!r} in {self.source}: the trainer's dataset is not "
                             "the one items= names", field=self.id_field) from None
