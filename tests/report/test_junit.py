"""rfteval.report.junit: one test case per item, parsed back with a JUnit parser."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from rfteval.compare.gate import Gate
from rfteval.compare.paths import compare_paths
from rfteval.compare.result import CompareOptions
from rfteval.report.junit import GATE_SUITE, ITEMS_SUITE, render_junit, write_junit
from tests.support.optional import require
from tests.support.record_sides import write_side as record_side

ERR = {"stage": "grade", "type": "python_error", "message": "ZeroDivisionError: \x01 bad <char> & more"}


def write_side(path: Path, label: str, scores: dict[str, list[float | None]], errors: set[tuple[str, int]] = frozenset()):
    return record_side(path, label, scores, errors=errors, error=ERR)


@pytest.fixture
def junit_file(tmp_path):
    # 8 epochs a side: enough for one item's collapse to be significant after Holm (1 + 8 + 8 epochs cannot fail)
    ones = [1.0] * 8
    b = write_side(tmp_path / "b.jsonl", "base", {"keep": ones, "drop": ones, "small": ones, "err": ones,
                                                  "gone": ones})
    t = write_side(tmp_path / "t.jsonl", "tuned", {"keep": ones, "drop": [0.0] * 8, "small": ones[:7] + [0.8],
                                                   "err": ones[:7] + [None], "new": ones}, errors={("err", 7)})
    result = compare_paths(b, t, options=CompareOptions(gate=Gate(max_item_drop=0.5, fail_under=0.5)))
    out = tmp_path / "junit.xml"
    write_junit(result, out)
    return out, result


def test_parsed_with_junitparser(junit_file):
    junitparser = require("junitparser", "setup")  # the dev extra
    path, result = junit_file
    xml = junitparser.JUnitXml.fromfile(str(path))
    suites = {s.name: s for s in xml}
    assert set(suites) == {ITEMS_SUITE, GATE_SUITE}
    items = suites[ITEMS_SUITE]
    outcome = {}
    for case in items:
        kinds = [type(r).__name__ for r in case.result]
        outcome[case.name] = kinds[0] if kinds else "passed"
    assert outcome == {"keep": "passed", "small": "passed", "drop": "Failure", "err": "Error",
                       "gone": "Skipped", "new": "Skipped"}
    assert (items.tests, items.failures, items.errors, items.skipped) == (6, 1, 1, 2)
    err_case = next(c for c in items if c.name == "err")
    assert "1 of 8 tuned record(s) errored" in err_case.result[0].message
    assert err_case.result[0].type == "grade/python_error"
    drop_case = next(c for c in items if c.name == "drop")
    assert "dropped by 1.000" in drop_case.result[0].message and "significant after Holm" in drop_case.result[0].message
    gate = suites[GATE_SUITE]
    gate_outcome = {c.name: bool(c.result) for c in gate}
    assert gate_outcome == {"fail-under": False, "max-item-drop": True, "error-rate": False}  # True: has a failure


def test_structure_with_elementtree(junit_file):
    path, result = junit_file
    root = ET.parse(path).getroot()
    assert root.tag == "testsuites"
    assert (root.get("tests"), root.get("failures"), root.get("errors"), root.get("skipped")) == ("9", "2", "1", "2")
    for suite in root.findall("testsuite"):
        assert {"name", "tests", "failures", "errors", "skipped", "time", "timestamp"} <= set(suite.attrib)
        cases = suite.findall("testcase")
        assert int(suite.get("tests")) == len(cases)
        assert int(suite.get("failures")) == sum(c.find("failure") is not None for c in cases)
        for case in cases:
            assert {"name", "classname", "time"} <= set(case.attrib)
            assert len([c for c in case if c.tag in ("failure", "error", "skipped")]) <= 1
    props = {p.get("name"): p.get("value") for p in root.find("testsuite").find("properties")}
    assert float(props["delta.mean"]) == pytest.approx(result.delta["mean"])
    # the control character in the error message was replaced, so the file is well-formed XML
    assert "\ufffd" in root.find(".//error").get("message")


def test_no_failures_without_max_item_drop(tmp_path):
    b = write_side(tmp_path / "b.jsonl", "b", {"x": [1.0] * 10, "y": [1.0] * 10})
    t = write_side(tmp_path / "t.jsonl", "t", {"x": [0.0] * 10, "y": [1.0] * 10})
    root = ET.fromstring(render_junit(compare_paths(b, t)))
    assert root.get("failures") == "0" and root.get("tests") == "2"
    assert [s.get("name") for s in root.findall("testsuite")] == [ITEMS_SUITE]  # no gate flags, no gate suite
    root = ET.fromstring(render_junit(compare_paths(b, t), max_item_drop=0.5))
    assert root.get("failures") == "1"


def test_special_characters_round_trip(tmp_path):
    b = write_side(tmp_path / "b.jsonl", "base<&>", {'q"1\'<&>': [1.0] * 10, "plain": [1.0] * 10})
    t = write_side(tmp_path / "t.jsonl", "tuned & co", {'q"1\'<&>': [0.0] * 10, "plain": [1.0] * 10})
    root = ET.fromstring(render_junit(compare_paths(b, t), max_item_drop=0.5))
    names = [c.get("name") for c in root.iter("testcase")]
    assert names == ['q"1\'<&>', "plain"]
    failure = root.find(".//failure")
    assert failure.text == "base<&> 1.000 -> tuned & co 0.000"
    assert root.find(".//system-out").text.startswith("base<&>: 1.000 over 10 epoch(s)")
    assert root.get("name") == "rfteval compare base<&> -> tuned & co"
