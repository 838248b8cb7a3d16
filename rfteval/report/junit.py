"""A comparison as JUnit XML, so CI systems list each item as a test.

Suite `rfteval.compare.items`: one test case per paired item, failed when it dropped by more than
--max-item-drop, an *error* (not a failure) when the candidate's records for it errored; items on one
side only are skipped. Suite `rfteval.compare.gate`: one test case per active gate check.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rfteval.report.terminal import fmt, fmt_ci

if TYPE_CHECKING:
    from rfteval.compare import CompareResult

ITEMS_SUITE = "rfteval.compare.items"
GATE_SUITE = "rfteval.compare.gate"


def _xml_text(value: object) -> str:
    """XML 1.0 cannot carry most control characters: replace them so any error message serialises."""
    return "".join(ch if ch in "\t\n\r" or ord(ch) >= 0x20 else "\ufffd" for ch in str(value))


def _suite(parent: ET.Element, name: str, cases: list[ET.Element], timestamp: str | None) -> ET.Element:
    suite = ET.SubElement(parent, "testsuite", {
        "name": name, "tests": str(len(cases)),
        "failures": str(sum(1 for c in cases if c.find("failure") is not None)),
        "errors": str(sum(1 for c in cases if c.find("error") is not None)),
        "skipped": str(sum(1 for c in cases if c.find("skipped") is not None)), "time": "0",
    })
    if timestamp:
        suite.set("timestamp", timestamp)
    return suite


def _case(name: str, classname: str) -> ET.Element:
    return ET.Element("testcase", {"name": _xml_text(name), "classname": classname, "time": "0"})


def item_cases(result: CompareResult, max_item_drop: float | None) -> list[ET.Element]:
    from rfteval.compare import GATE_EPS

    cases = []
    b, c = result.baseline["label"], result.candidate["label"]
    for r in result.items.itertuples(index=False):
        case = _case(str(r.item_id), ITEMS_SUITE)
        if r.candidate_errors:
            ET.SubElement(case, "error", {
                "message": _xml_text(f"{r.candidate_errors} of {r.candidate_n} {c} record(s) errored: "
                                     f"{r.candidate_error}")[:1000],
                "type": _xml_text(str(r.candidate_error).split(":")[0]),
            }).text = _xml_text(r.candidate_error)
        elif max_item_drop is not None and r.delta < -max_item_drop - GATE_EPS:
            ET.SubElement(case, "failure", {
                "message": f"dropped by {-r.delta:.3f} (more than --max-item-drop {max_item_drop:g})",
                "type": "item-drop",
            }).text = f"{b} {fmt(r.baseline)} -> {c} {fmt(r.candidate)}"
        out = (f"{b}: {fmt(r.baseline)} over {r.baseline_n} epoch(s), {r.baseline_errors} error(s)\n"
               f"{c}: {fmt(r.candidate)} over {r.candidate_n} epoch(s), {r.candidate_errors} error(s)\n"
               f"delta: {fmt(r.delta, sign=True)} {fmt_ci((r.delta_lo, r.delta_hi))}")
        ET.SubElement(case, "system-out").text = _xml_text(out)
        cases.append(case)
    for role, ids in (("baseline", result.unpaired["baseline_only"]), ("candidate", result.unpaired["candidate_only"])):
        for item_id in ids:
            case = _case(item_id, ITEMS_SUITE)
            ET.SubElement(case, "skipped", {"message": f"only in the {role}'s records: not compared"})
            cases.append(case)
    return cases


def gate_cases(result: CompareResult) -> list[ET.Element]:
    cases = []
    for check in result.gate.get("checks", []):
        case = _case(check["name"], GATE_SUITE)
        if not check["passed"]:
            ET.SubElement(case, "failure", {"message": _xml_text(check["detail"]), "type": "gate"})
        ET.SubElement(case, "system-out").text = _xml_text(check["detail"])
        cases.append(case)
    return cases


def render_junit(result: CompareResult, max_item_drop: float | None = None, timestamp: str | None = None) -> bytes:
    """The JUnit document; `max_item_drop` defaults to the gate's."""
    if max_item_drop is None:
        max_item_drop = result.options.gate.max_item_drop
    root = ET.Element("testsuites", {"name": f"rfteval compare {result.baseline['label']} -> "
                                             f"{result.candidate['label']}"})
    suites: list[tuple[str, list[ET.Element], dict[str, Any]]] = [
        (ITEMS_SUITE, item_cases(result, max_item_drop), {
            "baseline.label": result.baseline["label"], "candidate.label": result.candidate["label"],
            "baseline.mean": result.baseline["mean"], "candidate.mean": result.candidate["mean"],
            "delta.mean": result.delta["mean"], "delta.ci95": fmt_ci(result.delta["ci95"], 4),
            "delta.p_value": result.delta["p_value"],
        }),
    ]
    gate = gate_cases(result)
    if gate:
        suites.append((GATE_SUITE, gate, {}))
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for name, cases, props in suites:
        suite = _suite(root, name, cases, timestamp)
        if props:
            pe = ET.SubElement(suite, "properties")
            for key, value in props.items():
                ET.SubElement(pe, "property", {"name": key, "value": _xml_text(value)})
        suite.extend(cases)
        for key in totals:
            totals[key] += int(suite.get(key, "0"))
    for key, value in totals.items():
        root.set(key, str(value))
    root.set("time", "0")
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True)


def write_junit(result: CompareResult, path: str | Path, max_item_drop: float | None = None) -> None:
    """Atomic: the file is whole or absent."""
    from datetime import datetime, timezone

    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    tmp.write_bytes(render_junit(result, max_item_drop, timestamp=stamp))
    tmp.replace(path)
