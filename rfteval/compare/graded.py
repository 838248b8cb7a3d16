"""One grader's grades for `rfteval agree`: every model's graded records of a run directory or record file, read
through the one record frame (rfteval.data.frame) with the texts and details agree shows, ready for pairing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from rfteval.data import rundir
from rfteval.data.records import details_field
from rfteval.errors import InputError

if TYPE_CHECKING:
    import pandas as pd

    from rfteval.graders.base import GraderConfig

KEY = ["model_label", "item_id", "epoch"]
NAN = float("nan")
# the record fields agree carries beside the normalised columns: the endpoint's name (for --regrade's records), the
# text shown per item, a label grader's label, and the error itself (counted by type)
CARRIED = ("model", "output_text", "grade_details", "error")


@dataclass
class GradedSide:
    """One grader's grades: model_label, item_id, epoch, score, passed (1/0/NaN), label, output_text, is_error,
    is_generation_failure and the record's error (a dict, or None). Error records stay in the frame: the error
    policy decides at pairing (`agree_frames`) whether they are left out or score 0, and they are counted by kind
    either way."""

    name: str  # "A" or "B"
    path: str
    frame: pd.DataFrame
    grader: str | None = None  # the grader file that wrote the grades, when known
    config: GraderConfig | None = None  # that file's grader, when this side was graded here (--regrade's)
    dataset: str | None = None  # the dataset a run directory names, for --regrade
    generation_failures: int = 0  # records whose model never answered: not an answer, counted
    # the grader's range: its file's score_range (as readiness and compare read it), else the range written on
    # the records (grade_details.score_range); None when neither is known
    score_range: tuple[float, float] | None = None

    def errors(self) -> SideErrors:
        """This side's error records: how many of its records, and how many of each error type."""
        from rfteval.data.records import error_type_of

        records = len(self.frame)
        kinds = self.frame["error"].map(lambda e: error_type_of(e) or "error")[self.frame["is_error"].to_numpy()]
        by_kind = {str(k): int(n) for k, n in kinds.value_counts(sort=True).items()}
        n = int(sum(by_kind.values()))
        return {"records": records, "errors": n, "share": n / records if records else 0.0, "by_kind": by_kind,
                "generation_failures": self.generation_failures}


class SideErrors(TypedDict):
    """A side's error records (grading errors, refusals, generation failures), by error type."""

    records: int
    errors: int
    share: float  # errors / records: what --max-error-rate reads
    by_kind: dict[str, int]  # error type -> records, most frequent first
    generation_failures: int  # of `errors`: records whose model never answered


def load_graded(path: str | Path, name: str) -> GradedSide:
    """Every model's graded records in a records file (JSONL or Parquet) or a run directory (all its labels)."""
    import pandas as pd

    from rfteval.compare.ranges import grader_range
    from rfteval.data.frame import read_frame
    from rfteval.data.records import frame_range

    path = Path(path)
    found = rundir.find_records(path, pick="all")
    frames = [read_frame(f, CARRIED, require_grades=False) for f in found.files]
    frame = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    source = found.directory
    dataset, grader = rundir.spec_paths(source) if (source / rundir.RESOLVED_SPEC).is_file() else (None, None)
    side = graded_side(frame, name, str(path))
    side.grader = str(grader) if grader else rundir.grader_path(source)
    side.dataset = str(dataset) if dataset else None
    found_range = grader_range(side.grader) if side.grader is not None else None
    side.score_range = (found_range[0], found_range[1]) if found_range is not None else frame_range(frame)
    return side


def graded_side(frame: pd.DataFrame, name: str, path: str) -> GradedSide:
    """Records (a record frame read with agree's fields, or `records_frame` of records in memory) normalised for
    pairing; a side with no grade at all is bad input."""
    import numpy as np
    import pandas as pd

    from rfteval.data.records import error_flags

    if frame.empty:
        raise InputError("no records", path)
    for key in ("item_id", "score"):
        if key not in frame:
            raise InputError("missing on every record; not a records file?", path, field=key)
    n = len(frame)
    error = frame["error"] if "error" in frame else pd.Series([None] * n)
    error = error.where(error.map(lambda e: isinstance(e, dict)), None)
    score = pd.to_numeric(frame["score"], errors="coerce").to_numpy(dtype=np.float64)
    is_error, failed = error_flags(frame)  # the one error rule's flags (the frame's own, when it was read)
    has_error = is_error.to_numpy(dtype=bool)
    graded = np.isfinite(score) | has_error
    if not graded.any():
        raise InputError("no grades (score is null on every record): grade the outputs first (`rfteval grade`), "
                         "or give --regrade GRADER", path, field="score")
    label_col = frame["model_label"] if "model_label" in frame else frame.get("model", pd.Series(["-"] * n))
    epoch = pd.to_numeric(frame["epoch"], errors="coerce") if "epoch" in frame else pd.Series(np.ones(n))
    passed = frame["passed"] if "passed" in frame else pd.Series([None] * n)
    details = frame["grade_details"] if "grade_details" in frame else pd.Series([None] * n)
    labels = label_col.fillna("-").astype(str)
    out = pd.DataFrame({
        "model_label": labels.to_numpy(),
        "model": (frame["model"].where(frame["model"].map(lambda m: isinstance(m, str) and bool(m)), labels)
                  if "model" in frame else labels).to_numpy(),  # the endpoint's name, for --regrade's records
        "item_id": frame["item_id"].astype(str).to_numpy(),
        "epoch": epoch.fillna(1).astype(np.int64).to_numpy(),
        "score": score,  # as recorded: the error policy scores error records at pairing (agree_frames)
        "passed": [_verdict(p) for p in passed],
        "label": [_label(d) for d in details],
        "output_text": frame["output_text"].to_numpy() if "output_text" in frame else [None] * n,
        "is_error": has_error,
        "is_generation_failure": failed.to_numpy(dtype=bool),
        "error": error.to_numpy(),
    })
    out = out[graded].drop_duplicates(subset=KEY, keep="last").reset_index(drop=True)  # a later record supersedes
    return GradedSide(name, path, out, generation_failures=int(out["is_generation_failure"].sum()))


def _verdict(passed: object) -> float:
    """A record's own pass verdict as 1.0 / 0.0 (a bool as written, or the frame's 1.0 / 0.0), NaN for none."""
    import numpy as np

    if isinstance(passed, (bool, np.bool_)):
        return float(passed)
    return float(passed) if isinstance(passed, float) and passed in (0.0, 1.0) else NAN


def _label(details: object) -> str | None:
    """A label grader's label from grade_details."""
    label = details_field(details, "label")
    return label if isinstance(label, str) else None
