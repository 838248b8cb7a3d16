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




def _run_dir(tmp_path: Path, kind: str) -> tuple[Path, Path]:
    """A base and a tuned record file in a directory whose spec says the models were sampled at 0.7: the sampling
    check reads their answers (every epoch of an item answers "o": not sampling)."""
    from rfteval.data.records import write_parquet
    from rfteval.data.rundir import RESOLVED_SPEC
    from tests.support.record_sides import BASE, TUNED, rec

    run = tmp_path / "run"
    run.mkdir()
    (run / RESOLVED_SPEC).write_text('[sampling]\ntemperature = 0.7\n\n[models.base]\nmodel = "m"\n\n'
                                     '[models.tuned]\nmodel = "t"\n', encoding="utf-8")
    paths = []
    for label, scores in (("base", BASE), ("tuned", TUNED)):
        records = [rec(label, item, e + 1, s, grade_details={"score_range": [0, 1]}) for item, ss in scores.items()
                   for e, s in enumerate(ss)]
        records.append(rec(label, "a", 1, 1.0))  # a cell held twice: the later record wins, everywhere
        path = run / f"{label}.{kind}"
        if kind == "jsonl":
            from rfteval.data.records import write_jsonl

            write_jsonl(records, path)
        else:
            write_parquet(records, path)
        paths.append(path)
    return paths[0], paths[1]


@pytest.mark.parametrize("kind", ["jsonl", "parquet"])
def test_the_kept_baseline_records_give_what_reading_the_file_gives(tmp_path, kind):
    """compare --html reads the baseline once and keeps its records: the comparison, the sampling check, readiness
    and the listed samples taken from them are those read from the file."""
    from rfteval.baseline_readiness import baseline_readiness
    from rfteval.compare.paths import compare_paths
    from rfteval.compare.samples import listed_samples

    base, tuned = _run_dir(tmp_path, kind)
    kept = compare_paths(base, tuned, keep_baseline_rows=True)
    plain = compare_paths(base, tuned)
    assert set(kept.rows) == {"baseline"} and plain.rows == {}
    assert kept.to_json() == plain.to_json()
    assert {r: c.line for r, c in kept.not_sampling.items()} == {r: c.line for r, c in plain.not_sampling.items()}
    assert "baseline" in kept.not_sampling
    a, b = baseline_readiness(kept, None), baseline_readiness(plain, None)
    assert a is not None and b is not None and a.report is not None and b.report is not None
    assert a.report.to_dict() == b.report.to_dict()
    sides = [(str(s["path"]), str(s["label"])) for s in (kept.baseline, kept.candidate)]
    ids = kept.items["item_id"].tolist()
    assert listed_samples(sides, ids, held=(kept.rows["baseline"],)) == listed_samples(sides, ids)
