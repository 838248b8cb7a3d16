"""The samples behind a comparison: one model's full records of chosen items, read from its record file on demand.

A comparison needs a few columns of every record (rfteval.compare.sides); a person looking at items needs every
field of a few records. `SampleSource` reads a record file (JSONL or Parquet) once for where each item's records
are (item_id, model_label, epoch), and the full rows of an item only when asked: a Parquet file's row groups
holding them (rfteval's results.parquet writes 2,048 rows a group), a JSONL file's lines at their byte offsets
(the file is memory-mapped, not read into memory). Searching the outputs loads their text columns once, as Arrow
strings, never as Python objects. An agent's record carries its rollout's messages as JSON text (`transcript`):
it is decoded only for the record a page shows (`transcript_messages`, `tool_result`), never for a search or a
comparison. Nothing here writes to the file it reads.
"""

from __future__ import annotations

import json
import mmap
import re
import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from rfteval.data import rundir
from rfteval.data.records import read_parquet_records
from rfteval.errors import InputError

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

    from rfteval.data.json_types import JSONObject
    from rfteval.data.records import RecordRows

TEXT_FIELDS = ("output_text", "reasoning_text", "grader_stdout")  # what a search looks through, besides the item
_ROW_GROUP_CACHE = 8
# a record line whose grade_details holds something (the key, then anything but null); a nested key of that name
# inside another field could only add an item to the "grader details" filter, never change a number
_DETAILS = re.compile(rb'"grade_details"\s*:\s*(?!null\b)\S')
# an agent run's record fields (docs: the record); a record of a run without tools has none of them
ROLLOUT_FIELDS = ("turns", "stop_reason", "tool_calls", "tool_errors", "transcript")


def decode_line(raw: bytes) -> JSONObject | None:
    """One JSONL record line; bytes that are not UTF-8 become U+FFFD (shown, never a crash). None: not an object."""
    try:
        value = json.loads(raw.decode("utf-8", errors="replace"))
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


class SampleSource:
    """One model's records in one record file: each item's row positions, its full records on demand."""

    def __init__(self, path: str | Path, label: str | None = None) -> None:
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        self.path = Path(path)
        self.label = label
        self._lock = threading.Lock()
        self._groups: OrderedDict[int, pa.Table] = OrderedDict()
        self._texts: pa.Table | None = None
        self._judged: np.ndarray | None = None
        self._mm: mmap.mmap | None = None
        self._offsets: np.ndarray | None = None
        index = self._read_index()
        rows = np.arange(index.num_rows, dtype=np.int64)
        if label is not None and "model_label" in index.column_names:
            keep = pc.equal(index.column("model_label"), label).to_numpy(zero_copy_only=False)
            keep = np.asarray(keep, dtype=bool) & ~np.asarray(pc.is_null(index.column("model_label")), dtype=bool)
            if keep.any():
                rows = rows[keep]
        ids = index.column("item_id").take(pa.array(rows)).cast(pa.string()).combine_chunks()
        encoded = pc.dictionary_encode(ids)
        codes = encoded.indices.to_numpy(zero_copy_only=False)
        order = np.argsort(codes, kind="stable")  # record order kept within an item: the later duplicate last
        self._rows = rows[order]  # file row positions, grouped by item
        bounds = np.searchsorted(codes[order], np.arange(len(encoded.dictionary) + 1))
        self._bounds = bounds
        self._code = {str(v): i for i, v in enumerate(encoded.dictionary.to_pylist())}
        epochs = index.column("epoch").take(pa.array(self._rows)) if "epoch" in index.column_names else None
        self._epochs = (pc.fill_null(pc.cast(epochs, pa.int64()), -1).to_numpy(zero_copy_only=False)
                        if epochs is not None else np.full(len(self._rows), -1))
        self._item_of_row = np.repeat(np.arange(len(bounds) - 1), np.diff(bounds))  # position -> item code
        self._truncated = np.zeros(len(self._rows), dtype=bool)
        if "truncated_in_reasoning" in index.column_names:
            cut = pc.fill_null(index.column("truncated_in_reasoning").take(pa.array(self._rows)), False)
            self._truncated = np.asarray(cut.to_numpy(zero_copy_only=False), dtype=bool)

    # ------------------------------------------------------------------ the index

    def _read_index(self) -> pa.Table:
        if self.path.suffix == ".parquet":
            import pyarrow.parquet as pq

            self._group_starts = [0]
            meta = pq.ParquetFile(self.path).metadata
            for g in range(meta.num_row_groups):
                self._group_starts.append(self._group_starts[-1] + meta.row_group(g).num_rows)
            return read_parquet_records(self.path, columns=("item_id", "model_label", "epoch", "truncated_in_reasoning"))
        return self._jsonl_index()

    def _jsonl_index(self) -> pa.Table:
        import numpy as np
        import pyarrow as pa
        import pyarrow.json as pj

        try:
            with open(self.path, "rb") as fh:
                self._mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) if self.path.stat().st_size else None
        except OSError as exc:
            raise InputError(f"cannot read ({exc.strerror})", self.path) from None
        if self._mm is None:
            raise InputError("no records", self.path)
        size, chunk = len(self._mm), 16 << 20
        ends = np.concatenate([np.flatnonzero(np.frombuffer(self._mm, np.uint8, min(chunk, size - at), at) == 10) + at
                               for at in range(0, size, chunk)])  # a chunk at a time: no file-sized temporary
        if not len(ends) or ends[-1] != size - 1:
            ends = np.append(ends, size)
        starts = np.concatenate(([0], ends[:-1] + 1))
        blank = np.array([not bytes(self._mm[s:e]).strip() for s, e in zip(starts, ends)]) \
            if (ends - starts).min(initial=1) < 3 else np.zeros(len(starts), dtype=bool)
        self._offsets = np.stack([starts[~blank], ends[~blank]], axis=1)
        schema = pa.schema([("model_label", pa.string()), ("item_id", pa.string()), ("epoch", pa.int64()),
                            ("truncated_in_reasoning", pa.bool_())])
        try:
            return pj.read_json(pa.BufferReader(pa.py_buffer(self._mm)),
                                parse_options=pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore"),
                                read_options=pj.ReadOptions(block_size=8 << 20))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            pass  # integer ids, a BOM, bytes that are not UTF-8: read the three fields line by line
        cols: dict[str, list[object]] = {"model_label": [], "item_id": [], "epoch": [], "truncated_in_reasoning": []}
        for n, (s, e) in enumerate(self._offsets.tolist(), 1):
            row = decode_line(bytes(self._mm[s:e]).lstrip(b"\xef\xbb\xbf"))
            if row is None:
                raise InputError("expected a JSON object (a record)", self.path, n)
            label, epoch = row.get("model_label"), row.get("epoch")
            cols["model_label"].append(label if isinstance(label, str) else None)
            cols["item_id"].append(str(row.get("item_id")))
            cols["epoch"].append(epoch if isinstance(epoch, int) and not isinstance(epoch, bool) else None)
            cols["truncated_in_reasoning"].append(row.get("truncated_in_reasoning") is True)
        return pa.table({"model_label": pa.array(cols["model_label"], pa.string()),
                         "item_id": pa.array(cols["item_id"], pa.string()),
                         "epoch": pa.array(cols["epoch"], pa.int64()),
                         "truncated_in_reasoning": pa.array(cols["truncated_in_reasoning"], pa.bool_())})

    # ------------------------------------------------------------------ items

    @property
    def item_ids(self) -> list[str]:
        return list(self._code)

    def _positions(self, item_id: str) -> np.ndarray:
        import numpy as np

        code = self._code.get(item_id)
        if code is None:
            return np.zeros(0, dtype=np.int64)
        return np.arange(self._bounds[code], self._bounds[code + 1])

    def records(self, item_id: str) -> list[JSONObject]:
        """The item's records, one per epoch (the later of duplicates, as compare keeps), in epoch order."""
        positions = self._positions(item_id)
        rows = self._read_rows(self._rows[positions].tolist())
        by_epoch: dict[int, JSONObject] = {}
        unnumbered: list[JSONObject] = []
        for pos, row in zip(positions.tolist(), rows):
            epoch = int(self._epochs[pos])
            if epoch < 0:
                unnumbered.append(row)
            else:
                by_epoch[epoch] = row
        return [by_epoch[e] for e in sorted(by_epoch)] + unnumbered

    def record(self, item_id: str, epoch: int) -> JSONObject | None:
        """The item's record of one epoch (the one `records` lists), None when it has none."""
        return next((r for r in self.records(item_id) if r.get("epoch") == epoch), None)

    def _read_rows(self, file_rows: list[int]) -> list[JSONObject]:
        if self._offsets is not None and self._mm is not None:
            out = []
            for r in file_rows:
                s, e = self._offsets[r].tolist()
                out.append(decode_line(bytes(self._mm[s:e]).lstrip(b"\xef\xbb\xbf")) or {})
            return out
        return [self._parquet_row(r) for r in file_rows]

    def _parquet_row(self, row: int) -> JSONObject:
        import bisect

        g = bisect.bisect_right(self._group_starts, row) - 1
        with self._lock:
            table = self._groups.get(g)
            if table is None:
                import pyarrow.parquet as pq

                table = pq.ParquetFile(self.path).read_row_group(g)
                self._groups[g] = table
                while len(self._groups) > _ROW_GROUP_CACHE:
                    self._groups.popitem(last=False)
            else:
                self._groups.move_to_end(g)
        return parquet_record(table.slice(row - self._group_starts[g], 1).to_pylist()[0])

    # ------------------------------------------------------------------ search and flags

    def _text_table(self) -> pa.Table:
        """The text columns of this model's rows (grouped by item, as self._rows), read once."""
        import pyarrow as pa

        with self._lock:
            if self._texts is not None:
                return self._texts
        if self.path.suffix == ".parquet":
            table = read_parquet_records(self.path, columns=(*TEXT_FIELDS, "grade_details"))
            table = table.take(pa.array(self._rows))
        else:
            table = self._jsonl_texts()
        with self._lock:
            self._texts = table
        return table

    def _jsonl_texts(self) -> pa.Table:
        import pyarrow as pa
        import pyarrow.json as pj

        assert self._mm is not None and self._offsets is not None
        schema = pa.schema([(name, pa.string()) for name in TEXT_FIELDS])
        try:
            table = pj.read_json(pa.BufferReader(pa.py_buffer(self._mm)),
                                 parse_options=pj.ParseOptions(explicit_schema=schema,
                                                               unexpected_field_behavior="ignore"),
                                 read_options=pj.ReadOptions(block_size=8 << 20))
            if table.num_rows == len(self._offsets):
                judged = [_DETAILS.search(self._mm, s, e) is not None for s, e in self._offsets[self._rows].tolist()]
                return table.take(pa.array(self._rows)).append_column(
                    "grade_details", pa.array(["{}" if j else None for j in judged], pa.string()))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            pass
        cols: dict[str, list[str | None]] = {name: [] for name in (*TEXT_FIELDS, "grade_details")}
        for row in self._read_rows(self._rows.tolist()):
            for name in TEXT_FIELDS:
                value = row.get(name)  # a lone surrogate (valid JSON, not Unicode) becomes "?" for searching
                cols[name].append(value.encode("utf-8", "replace").decode() if isinstance(value, str) else None)
            cols["grade_details"].append(None if row.get("grade_details") is None else "{}")
        return pa.table({k: pa.array(v, pa.string()) for k, v in cols.items()})

    def matching(self, needle: str) -> set[str]:
        """The items one of whose records holds `needle` (case-insensitive) in its output, reasoning or stdout."""
        import numpy as np
        import pyarrow.compute as pc

        table = self._text_table()
        hit = np.zeros(table.num_rows, dtype=bool)
        for name in TEXT_FIELDS:
            if name not in table.column_names:  # a file written before the field
                continue
            found = pc.match_substring(table.column(name), needle, ignore_case=True)
            hit |= np.asarray(pc.fill_null(found, False).to_numpy(zero_copy_only=False), dtype=bool)
        names = list(self._code)
        return {names[c] for c in np.unique(self._item_of_row[hit]).tolist()}

    def judged_items(self) -> set[str]:
        """The items one of whose records carries grader details (a judge's steps, a label, a multi's grades)."""
        import numpy as np
        import pyarrow.compute as pc

        table = self._text_table()
        if "grade_details" not in table.column_names:
            return set()
        valid = np.asarray(pc.is_valid(table.column("grade_details")).to_numpy(zero_copy_only=False), dtype=bool)
        details = table.column("grade_details")
        if self.path.suffix == ".parquet":  # JSON text: "null" is no details
            valid &= ~np.asarray(pc.fill_null(pc.equal(details, "null"), False).to_numpy(zero_copy_only=False),
                                 dtype=bool)
        names = list(self._code)
        return {names[c] for c in np.unique(self._item_of_row[valid]).tolist()}

    def truncated_items(self) -> set[str]:
        """The items one of whose records was cut off while still reasoning (rfteval.data.reasoning)."""
        import numpy as np

        names = list(self._code)
        return {names[c] for c in np.unique(self._item_of_row[self._truncated]).tolist()}

    def load_texts(self) -> None:
        """Read the text columns now (a viewer does it in the background after opening)."""
        self._text_table()


_LOOK_LINES = 256  # records of a JSONL file looked at for a rollout's fields


def carries_rollouts(path: str | Path) -> bool:
    """Whether a record file holds an agent run's records, said without reading the file: a run without tools
    writes no rollout field (Parquet: no such column), a run with tools writes them on its records (a failed
    rollout's record may lack them: the first records are looked at, not only the first)."""
    import pyarrow as pa

    path = Path(path)
    try:
        if path.suffix == ".parquet":
            import pyarrow.parquet as pq

            return "turns" in pq.read_schema(path).names
        with open(path, "rb") as fh:
            seen = 0
            for raw in fh:
                if not raw.strip():
                    continue
                if b'"turns"' in raw:  # the key's bytes first: a line without them is decoded for nothing
                    row = decode_line(raw.lstrip(b"\xef\xbb\xbf"))
                    if row is not None and "turns" in row:
                        return True
                seen += 1
                if seen >= _LOOK_LINES:
                    break
    except (OSError, pa.ArrowException):
        return False  # an unreadable file: the pages that read it say why
    return False


def transcript_messages(record: JSONObject) -> list[JSONObject] | None:
    """An agent record's generated messages (its `transcript`, JSON text in a line and in Parquet alike), in order;
    None for a record without one or whose transcript is not a JSON list (a message that is not an object is
    shown as an empty one: the file is hostile, the page must still open)."""
    raw = record.get("transcript")
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            return None
    if not isinstance(raw, list):
        return None
    return [m if isinstance(m, dict) else {} for m in raw]


def tool_results(messages: list[JSONObject]) -> list[JSONObject]:
    """The `tool` messages of a transcript in order: result k answers the k-th call a page numbers."""
    return [m for m in messages if m.get("role") == "tool"]


def tool_result(record: JSONObject, index: int) -> str | None:
    """The whole text of a record's `index`-th tool result (a page shows its first characters); None when the
    record has no such result."""
    messages = transcript_messages(record)
    results = tool_results(messages) if messages is not None else []
    if not 0 <= index < len(results):
        return None
    content = results[index].get("content")
    return content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)


def source_file(path: str | Path, label: str | None) -> Path:
    """The record file holding a label's records, as compare finds it (rfteval.data.rundir.find_records)."""
    return rundir.find_records(Path(path), label).files[0]


class SampleBrief(TypedDict):
    """One sample as a report lists it under its item: its score and its texts, cut to a length."""

    epoch: int | None
    score: float | None
    passed: bool | None
    error: str | None
    output_text: str
    omitted: int  # characters of output_text left out
    reasoning_text: str | None
    grader_stdout: str | None


def parquet_record(values: JSONObject) -> JSONObject:
    """A Parquet row as its record reads in a JSON line: the free-shaped fields decoded from their JSON text, the
    maps ({name: number}) from their (key, value) pairs."""
    from rfteval.data.records import JSON_TEXT_FIELDS

    for name in JSON_TEXT_FIELDS:  # free-shaped fields are JSON text in Parquet
        text = values.get(name)
        if isinstance(text, str):
            try:
                values[name] = json.loads(text)
            except ValueError:
                pass
    for name in ("sub_scores", "tool_errors"):  # a Parquet map reads back as (key, value) pairs
        if isinstance(values.get(name), list):
            values[name] = dict(values[name])  # type: ignore[arg-type]
    return values


class HeldSamples:
    """SampleSource's `records` over a file's records already read (rfteval.data.records.RecordRows): the same
    rows of the same items in the same order, without reading the file again (compare --html's baseline)."""

    def __init__(self, rows: RecordRows, label: str | None = None) -> None:
        records = rows.dicts()
        if label is not None and any(r.get("model_label") == label for r in records):
            records = [r for r in records if r.get("model_label") == label]
        self._by_item: dict[str, list[JSONObject]] = {}
        for r in records:  # file order within an item: the later of duplicates last, as SampleSource keeps them
            self._by_item.setdefault(str(r.get("item_id")), []).append(r)
        self._parquet = rows.table is not None

    def records(self, item_id: str) -> list[JSONObject]:
        """The item's records, one per epoch (the later of duplicates), in epoch order; those without one last."""
        by_epoch: dict[int, JSONObject] = {}
        unnumbered: list[JSONObject] = []
        for r in self._by_item.get(item_id, []):
            epoch = r.get("epoch")
            row = parquet_record(dict(r)) if self._parquet else r
            if isinstance(epoch, int) and not isinstance(epoch, bool) and epoch >= 0:
                by_epoch[epoch] = row
            else:
                unnumbered.append(row)
        return [by_epoch[e] for e in sorted(by_epoch)] + unnumbered


def _brief(record: JSONObject, max_chars: int) -> SampleBrief:
    def text(name: str) -> str | None:
        value = record.get(name)
        return value[:max_chars] if isinstance(value, str) else None

    out = record.get("output_text")
    full = out if isinstance(out, str) else ""
    error = record.get("error")
    epoch, score, passed = record.get("epoch"), record.get("score"), record.get("passed")
    return {"epoch": epoch if isinstance(epoch, int) else None,
            "score": float(score) if isinstance(score, (int, float)) and not isinstance(score, bool) else None,
            "passed": passed if isinstance(passed, bool) else None,
            "error": (f"{error.get('stage')}/{error.get('type')}: {error.get('message')}"
                      if isinstance(error, dict) else None),
            "output_text": full[:max_chars], "omitted": max(0, len(full) - max_chars),
            "reasoning_text": text("reasoning_text"), "grader_stdout": text("grader_stdout")}


def listed_samples(sides: list[tuple[str, str]], item_ids: list[str], max_chars: int = 4000,
                   held: Sequence[RecordRows | None] = ()) -> dict[str, list[list[SampleBrief]]]:
    """Per item, each side's samples in epoch order (the records a comparison used), for a report's drill-down.
    `sides` are (record file, label) as a CompareResult names them; `held`, per side, its file's records when they
    were already read (CompareResult.rows): taken from there, the file not read again."""
    sources: list[SampleSource | HeldSamples] = [
        HeldSamples(rows, label) if (rows := held[k] if k < len(held) else None) is not None
        else SampleSource(path, label) for k, (path, label) in enumerate(sides)]
    return {i: [[_brief(r, max_chars) for r in s.records(i)] for s in sources] for i in item_ids}
