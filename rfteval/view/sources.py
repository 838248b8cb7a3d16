"""The viewer's sources: every model in the paths given to `rfteval view` (a run directory's labels, a record file's
model labels), each with the file compare reads it from and its samples' index, built once on first use."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rfteval.compare.samples import SampleSource, carries_rollouts, source_file
from rfteval.data import rundir
from rfteval.data.frame import read_labels
from rfteval.errors import InputError


@dataclass
class Source:
    """One model's records: its label on the pages, the file compare reads them from, and the PATH given."""

    label: str
    path: Path  # what compare is given (a run directory or a record file)
    model_label: str | None  # the label compare filters on (--label)
    file: Path
    run_dir: Path | None
    given: Path | None = None  # the PATH on the command line (a run directory read through its results.parquet)

    _made: SampleSource | None = None
    _agent: bool | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def agent(self) -> bool:
        """Whether the records are an agent run's (carry rollouts): looked up once, without reading the records."""
        with self._lock:
            if self._agent is None:
                self._agent = carries_rollouts(self.file)
            return self._agent

    @property
    def samples(self) -> SampleSource:
        """The records' index, built once on first use (the viewer's warm-up thread, or the first page asking)."""
        with self._lock:
            if self._made is None:
                self._made = SampleSource(self.file, self.model_label)
            return self._made


def find_sources(paths: Sequence[Path]) -> list[Source]:
    """Every model in the paths: a run directory's labels (spec order), a record file's model labels."""
    out: list[Source] = []
    for path in paths:
        path = Path(path)
        if not path.exists():
            raise InputError("no such file or directory", path)
        if path.is_dir():
            labels = rundir.run_labels(path)
            parquet = path / rundir.RESULTS
            if not labels and parquet.is_file():
                labels = read_labels(parquet)
            if not labels:
                raise InputError("no record files (*.jsonl or results.parquet) in this directory", path)
            files = {label: source_file(path, label) for label in labels}
            if parquet.is_file() and all(f == parquet or (f.stat().st_mtime_ns <= parquet.stat().st_mtime_ns and
                                                          label in read_labels(parquet)) for label, f in files.items()):
                # `rfteval run` writes DIR/<label>.jsonl and results.parquet from the same store, in that order: the
                # same records, and compare reads a few Parquet columns about 3x faster than it parses the JSONL
                # (bench/README.md); a JSONL file newer than the Parquet (edited by hand) is read instead
                files = dict.fromkeys(labels, parquet)
            out += [Source(label, files[label] if files[label] == parquet else path, label, files[label], path, path)
                    for label in labels]
        else:
            labels = read_labels(path) or [path.stem]
            for label in labels:
                out.append(Source(label, path, label, path, path.parent if (path.parent / rundir.RESOLVED_SPEC)
                                  .is_file() else None))
    seen: dict[str, int] = {}
    for s in out:  # the same label from two runs: name each by its directory too
        seen[s.label] = seen.get(s.label, 0) + 1
    for s in out:
        if seen[s.label] > 1:
            s.label = f"{(s.run_dir or s.path.parent).name}/{s.label}"
    if len({s.label for s in out}) < len(out):
        raise InputError("two record sources have the same label and directory; give each once", out[0].path)
    return out
