"""What the episode trainers' adapters share (tinker-cookbook, OpenPipe ART): one grade as the numeric metrics those
trainers log beside the reward, and a trajectory's metadata as JSON data.

These trainers hand over a whole message, not text (tinker-cookbook's renderers parse a thinking model's reply into
`thinking` and `text` content parts; a server's reasoning parser sends `reasoning_content`): its sample is core's
`sample_from_message`, the one every adapter builds, never the text a trainer's helper would have flattened."""

from __future__ import annotations

from collections.abc import Mapping

from rfteval.graders.base import GradeResult
from rfteval.reward.items import plain_data

ERROR_METRIC = "rfteval/grading_error"  # 1 for a completion whose grading failed (its reward is the error rule's)
SUB_PREFIX = "rfteval/"  # a multi grader's sub-scores, each under its own name


def result_metrics(result: GradeResult) -> dict[str, float]:
    """What the trainer logs beside the reward: whether grading failed, and each sub-score (multi graders)."""
    out = {ERROR_METRIC: 1.0 if result.error is not None else 0.0}
    for name, value in (result.sub_scores or {}).items():
        out[f"{SUB_PREFIX}{name}"] = float(value)
    return out


def plain_metadata(metadata: Mapping[str, object]) -> dict[str, object]:
    """A trainer's metadata values as JSON data (numpy and Arrow values turned back exactly)."""
    return {str(k): plain_data(v) for k, v in metadata.items()}
