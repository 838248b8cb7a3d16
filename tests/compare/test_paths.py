"""compare/paths.py: CompareRequest checks every flag and report path before any work."""

from __future__ import annotations

from pathlib import Path

import pytest

from rfteval.cli.commands.compare_reports import report_files
from rfteval.compare.gate import Gate
from rfteval.compare.paths import CompareRequest
from rfteval.errors import InputError


def request(tmp_path: Path, **kw) -> CompareRequest:
    args = dict(baseline=tmp_path, candidate=None, labels=[], dataset=None, reports=(), tie=1e-9, top=10,
                ci="t", seed=0, strict=False, by=[], errors="exclude", exclude_errors=False, score_range=None,
                gate=Gate(), metric="mean", pass_threshold=None)
    return CompareRequest(**(args | kw))


@pytest.mark.parametrize(("kw", "field"), [
    ({"ci": "z"}, "--ci"), ({"tie": -1.0}, "--tie"), ({"top": -1}, "--top"),
    ({"gate": Gate(max_drop=-0.1)}, "--max-drop"), ({"gate": Gate(mode="loose")}, "--gate"),
    ({"score_range": "1,0"}, "--score-range"), ({"labels": ["a"]}, "--label"),
    ({"reports": report_files({"junit": Path("x.xml")})}, "--junit"),
    ({"candidate": Path("c.jsonl"), "series_candidates": ["b"]}, "--candidate"),
])
def test_a_bad_flag_is_one_input_error(tmp_path, kw, field):
    with pytest.raises(InputError) as exc:
        request(tmp_path, **kw)
    assert exc.value.field == field


def test_two_labels_of_one_directory_compare_it_with_itself_and_reports_never_overwrite_an_input(tmp_path):
    (tmp_path / "base.jsonl").write_text("")
    r = request(tmp_path, labels=["base", "tuned"], score_range="0,10")
    assert r.candidate == tmp_path and not r.is_series and r.options.score_range == (0.0, 10.0)
    with pytest.raises(InputError) as exc:
        request(tmp_path, reports=report_files({"markdown": tmp_path / "base.jsonl"}))
    assert exc.value.field == "--markdown"


