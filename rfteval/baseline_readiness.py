"""A comparison's baseline assessed for RFT readiness: the readiness section of `compare --html` and the readiness
brief on the viewer's Runs page.

Its own module above both compare and readiness, which are peers and import neither each other: it takes a
comparison's result (compare) and assesses that result's baseline records (readiness).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rfteval.errors import InputError

if TYPE_CHECKING:
    from rfteval.compare.result import CompareResult
    from rfteval.readiness.report import ReadinessReport


READINESS_MAX_RECORDS = 50_000


@dataclass(frozen=True)
class BaselineReadiness:
    """The baseline's RFT readiness for the HTML report: a report, or why there is none (`skipped` / `failed`)."""

    label: str
    report: ReadinessReport | None = None
    skipped_records: int | None = None  # more records than READINESS_MAX_RECORDS: not re-read here
    path: str | None = None
    failed: str | None = None


def baseline_readiness(result: CompareResult, dataset: Path | None) -> BaselineReadiness | None:
    """The baseline's readiness when its records have 2+ epochs per item; None when they have fewer. An optional
    section: an InputError is kept as the reason, and the comparison stands without it."""
    from rfteval.data.records import read_records
    from rfteval.readiness.assessment import assess

    side = result.baseline
    label = str(side["label"])
    if side["records"] > READINESS_MAX_RECORDS:  # re-reading every output costs more than the whole compare
        return BaselineReadiness(label, skipped_records=int(side["records"]), path=str(side["path"]))
    try:
        held = result.rows.get("baseline")  # compare --html kept the records it read: not read again
        df = held.frame() if held is not None else read_records(side["path"])
        if "model_label" in df and df["model_label"].nunique() > 1:
            df = df[df["model_label"] == side["label"]]
        # compare's own check of the baseline's epochs (rfteval.data.sampling_check), not a second read
        flat = result.not_sampling.get("baseline")
        report = assess(df, dataset=dataset, not_sampling=flat)
    except InputError as exc:
        return BaselineReadiness(label, failed=str(exc))
    if report.samples_min < 2:
        return None
    return BaselineReadiness(label, report=report)
