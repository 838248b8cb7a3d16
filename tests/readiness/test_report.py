"""readiness/report.py: the readiness report as strict JSON (`rfteval readiness --format json`)."""

from __future__ import annotations

import json

from rfteval.readiness.assessment import assess
from tests.support.readiness_records import records


def test_to_dict_is_strict_json():
    rep = assess(records({"a": [0, 1], "solo": [1]}), group_size=2)
    text = json.dumps(rep.to_dict(), allow_nan=False)
    back = json.loads(text)
    assert back["verdict"] == rep.verdict and back["reasons"] == [c.name for c in rep.reasons]
    assert back["items"][1]["sd"] is None
    assert back["thresholds"]["zero_signal_not_ready"] == 0.6
