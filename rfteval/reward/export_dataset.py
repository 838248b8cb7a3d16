"""`rfteval export-dataset`: RFT JSONL in each trainer's own dataset shape, loss-free through the trainer's loader.

A trainer reads its dataset through Arrow (TRL and verifiers: `datasets.load_dataset("json")`; verl: parquet;
OpenRLHF: JSONL), and Arrow changes values: date-like strings become timestamps, keys other rows have are filled
with null, numbers are widened to one type per column. So each field is tried through the same reader first; a
field that does not come back exactly is written as JSON text instead, and each row's META column names the line's
own keys in order and which are JSON text (a line without an id gets one, rfteval's content hash, which is not one
of its keys). The reward adapters read META and rebuild the original line exactly, so training rewards equal
`rfteval grade`'s scores."""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from rfteval.data.dataset import iter_items
from rfteval.data.json_types import JSONMapping, JSONObject, JSONValue
from rfteval.reward.targets import RowParts, dataset_shape

# OpenAI's `developer` role is unknown to most open models' chat templates (SmolLM2's renders it as a turn of its own
# and adds its default system prompt before it; verifiers' message types have no such role): written as `system`
# in the prompt a trainer renders, unless kept. The item keeps the original role (the grader sees the line).
DEVELOPER_ROLES = ("system", "keep")
_ABSENT: Final = object()
# A row as a reader gives it back: JSON, except where the reader changed a value (a timestamp from a date string).
ReadBack = list[dict[str, object]]


@dataclass(frozen=True)
class ExportedDataset:
    path: Path
    rows: int
    as_json: tuple[str, ...]  # the fields written as JSON text, because the loader would have changed them
    added_id: bool


def _canonical(value: object) -> str:
    """Exact comparison: 1 and 1.0 differ, key order counts, a datetime is not its string."""
    return "<absent>" if value is _ABSENT else json.dumps(value, ensure_ascii=False, default=repr)


def _jsonl_bytes(rows: Sequence[JSONMapping]) -> bytes:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode("utf-8")


def _through_json(rows: Sequence[JSONMapping]) -> ReadBack | None:
    """The rows as Arrow's JSON reader gives them back (what datasets.load_dataset("json") uses); None when it
    refuses them (a column of mixed types)."""
    import pyarrow as pa
    import pyarrow.json as paj

    try:
        return paj.read_json(io.BytesIO(_jsonl_bytes(rows))).to_pylist()
    except (pa.ArrowException, OverflowError, TypeError, ValueError):  # a value Arrow cannot hold as it is
        return None


def _through_parquet(rows: Sequence[JSONMapping]) -> ReadBack | None:
    """The rows as a parquet file gives them back (verl's RLHFDataset reads parquet); None when Arrow refuses."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        buf = io.BytesIO()
        pq.write_table(pa.Table.from_pylist(list(rows)), buf)
        return pq.read_table(io.BytesIO(buf.getvalue())).to_pylist()
    except (pa.ArrowException, OverflowError, TypeError, ValueError):  # a value Arrow cannot hold as it is
        return None


def _changed_fields(lines: Sequence[JSONMapping], through: Callable[[Sequence[JSONMapping]], ReadBack | None]
                    ) -> set[str]:
    """The fields that do not come back exactly when each is read alone through the trainer's reader."""
    names: list[str] = []
    for line in lines:
        names.extend(k for k in line if k not in names)
    changed = set()
    for name in names:
        col = [{name: line[name]} if name in line else {} for line in lines]
        back = through(col)
        if back is None or any(_canonical(line.get(name, _ABSENT)) != _canonical(b.get(name, _ABSENT))
                               for line, b in zip(lines, back)):
            changed.add(name)
    return changed


def _encode(line: JSONObject, names: Sequence[str], as_json: set[str]) -> JSONObject:
    """The line's fields, in one order for every row, those in as_json as JSON text (null: the line lacked it)."""
    out: JSONObject = {}
    for name in names:
        if name in as_json:
            out[name] = json.dumps(line[name], ensure_ascii=False) if name in line else None
        else:
            out[name] = line.get(name)
    return out


def prompt_messages(messages: JSONValue, developer_role: str = "system") -> JSONValue:
    """The messages as the trainer's chat template gets them: a `developer` turn as `system` (developer_role
    "system"), or as they are ("keep")."""
    if developer_role not in DEVELOPER_ROLES:
        raise ValueError(f"developer_role must be 'system' or 'keep', not {developer_role!r}")
    if developer_role == "keep" or not isinstance(messages, list):
        return messages
    return [{**m, "role": "system"} if isinstance(m, dict) and m.get("role") == "developer" else m for m in messages]


def build_rows(lines: Sequence[JSONObject], ids: Sequence[str], target: str, *, data_source: str,
               reference_field: str = "reference_answer",
               developer_role: str = "system") -> tuple[list[JSONObject], set[str], bool]:
    """The trainer's rows for the lines, the fields written as JSON text, and whether the id was added."""
    shape = dataset_shape(target)
    added = any("id" not in line for line in lines)
    full = [{**line, "id": line.get("id", rid)} if added else dict(line) for line, rid in zip(lines, ids)]
    prompts = [prompt_messages(line["messages"], developer_role) for line in lines]
    if shape.text_row is not None:  # the line as JSON text: nothing for a reader to change
        return [shape.text_row(prompt, line, rid) for line, rid, prompt in zip(lines, ids, prompts)], set(), added
    assert shape.row is not None
    through = _through_parquet if shape.parquet else _through_json
    names: list[str] = []
    for line in full:
        names.extend(k for k in line if k not in names)
    if shape.prompt_column:
        # The prompt column is the messages the trainer generates from; it hands them to the reward apart from the
        # columns, so the item's messages come from it when it reads back exactly and is the line's own (no role
        # renamed), else from a column of their own.
        renamed = any(p != line["messages"] for p, line in zip(prompts, lines))
        names = [n for n in names if n != "messages" or renamed or n in _changed_fields(full, through)]
    as_json = _changed_fields([{k: v for k, v in line.items() if k in names} for line in full], through)
    prompt_field = "messages" if shape.prompt_column and "messages" not in names else None
    for _ in range(2):
        rows = [shape.row(RowParts(prompt, line, _encode(line, names, as_json),
                                   _meta(original, as_json, prompt_field), data_source, reference_field))
                for line, original, prompt in zip(full, lines, prompts)]
        back = through(rows)
        if back is not None and all(_canonical(r) == _canonical(b) for r, b in zip(rows, back)):
            return rows, as_json, added
        as_json = set(names) - {"id"}  # fields exact alone but not together: keep them all as text
    raise RuntimeError("the rows do not read back exactly even with every field as JSON text")


def _meta(line: JSONMapping, as_json: set[str], prompt_field: str | None) -> str:
    """The META column of one row: the line's own keys in its order (so a key the reader padded, or the id added,
    is left out, and the order is the line's), which are JSON text, and which one the prompt column holds."""
    meta: dict[str, list[str] | str] = {"fields": list(line), "json": sorted(as_json & set(line))}
    if prompt_field:
        meta["prompt"] = prompt_field
    return json.dumps(meta, ensure_ascii=False)


def export_dataset(items: str | Path, target: str, out_dir: str | Path, *, data_source: str | None = None,
                   reference_field: str = "reference_answer", developer_role: str = "system") -> ExportedDataset:
    """Write the dataset for `target` into out_dir (its shape's file) and say what was written."""
    from rfteval.data.outfile import write_output

    items = Path(items)
    read = list(iter_items(items))
    lines = [it.data for it in read]
    ids = [it.id for it in read]
    if data_source is None:
        data_source = f"rfteval/{items.parent.name if items.stem == 'items' else items.stem}"
    rows, as_json, added = build_rows(lines, ids, target, data_source=data_source, reference_field=reference_field,
                                      developer_role=developer_role)
    shape = dataset_shape(target)
    path = Path(out_dir) / shape.file

    def write(tmp: Path) -> None:
        if shape.parquet:
            import pyarrow as pa
            import pyarrow.parquet as pq

            pq.write_table(pa.Table.from_pylist(rows), tmp)
        else:
            tmp.write_bytes(_jsonl_bytes(rows))

    write_output(path, write, [items], flag="--out")
    return ExportedDataset(path, len(rows), tuple(sorted(as_json)), added)
