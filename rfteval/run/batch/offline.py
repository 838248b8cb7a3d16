"""Offline batches: every cell's request written as Batch API input lines (for `vllm run-batch`, Ray Data or any
batch engine), and its output lines read back into the store (`rfteval run --export-requests / --import-responses`)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import IO, TYPE_CHECKING

from rfteval.data.json_types import JSONObject
from rfteval.errors import InputError
from rfteval.run.batch.lines import ENDPOINTS, BatchJob, entry_from_result, parse_result_lines, request_line, result_key

if TYPE_CHECKING:
    from rfteval.run.store import RunStore


def export_requests(path: Path, jobs: Iterable[BatchJob], store: RunStore) -> dict[str, int]:
    """Write the Batch API input lines of every cell without a stored response; one file per model when the run
    has several (a batch engine serves one model per file). Returns lines per written file."""
    from rfteval.run.store import is_reusable_response

    handles: dict[str, IO[bytes]] = {}
    counts: dict[str, int] = {}
    labels: list[str] = []
    tmp = path.with_name(path.name + ".parts")
    tmp.mkdir(parents=True, exist_ok=True)
    try:
        for key, info, body in jobs:
            if is_reusable_response(store.get_response(key)):
                continue
            if info.label not in handles:
                labels.append(info.label)
                handles[info.label] = open(tmp / f"{info.label}.jsonl", "wb")
                counts[info.label] = 0
            handles[info.label].write(request_line(key, ENDPOINTS[info.api], body).encode() + b"\n")
            counts[info.label] += 1
    finally:
        for fh in handles.values():
            fh.close()
    written: dict[str, int] = {}
    if len(labels) <= 1:
        src = tmp / f"{labels[0]}.jsonl" if labels else None
        if src is None:
            path.write_bytes(b"")
        else:
            src.replace(path)
        written[str(path)] = counts.get(labels[0], 0) if labels else 0
    else:
        for label in labels:
            dest = path.with_name(f"{path.stem}.{label}{path.suffix or '.jsonl'}")
            (tmp / f"{label}.jsonl").replace(dest)
            written[str(dest)] = counts[label]
    for leftover in tmp.iterdir():
        leftover.unlink()
    tmp.rmdir()
    return written


def read_responses(path: Path) -> list[tuple[int, JSONObject]]:
    """The Batch API output lines (OpenAI's, `vllm run-batch`'s) of --import-responses, every one checked: a bad line
    is one InputError naming the file, line and field. The run reads them before it creates its directory, so a
    malformed file leaves no run directory and no spec.resolved.toml behind."""
    if not path.is_file():
        raise InputError("no such file", path, field="--import-responses")
    return list(parse_result_lines(path.read_bytes(), path, strict=True))


def import_responses(lines: list[tuple[int, JSONObject]], jobs: Iterable[BatchJob], store: RunStore) -> dict[str, int]:
    """Store the lines read_responses checked; a line whose cell is stored already, or is no cell of this run, is
    counted and left."""
    from rfteval.run.store import is_reusable_response

    cells = {key: info for key, info, _ in jobs}
    counts = {"stored": 0, "errors": 0, "failed": 0, "already": 0, "unknown": 0}
    for _, line in lines:
        key = result_key(line)
        info = cells.get(key)
        if info is None:
            counts["unknown"] += 1
            continue
        if is_reusable_response(store.get_response(key)):
            counts["already"] += 1
            continue
        what, entry = entry_from_result(key, info, line, store.session, tier="import")
        if entry is not None:
            store.put_response(entry)
        counts["stored" if what == "stored" else "errors" if what == "error" else "failed"] += 1
    store.commit()
    return counts
