"""A comparison as JUnit XML, so CI systems list each item as a test.

Suite `rfteval.compare.items`: one test case per paired item, failed when it dropped by more than
--max-item-drop, an *error* (not a failure) when the candidate's records for it errored; items on one
side only are skipped. Suite `rfteval.compare.gate`: one test case per active gate check.
"""

from __future__ import annotations

import re
from datetime import UTC
from pathlib import Path
from typing import TYPE_CHECKING
from xml.sax.saxutils import escape, quoteattr

from rfteval.data.outfile import write_bytes_atomic
from rfteval.report.agent_render import agent_properties
from rfteval.report.format import fmt_ci

if TYPE_CHECKING:
    import pandas as pd

    from rfteval.compare.result import CompareResult

ITEMS_SUITE = "rfteval.compare.items"
GATE_SUITE = "rfteval.compare.gate"


_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _xml_text(value: object) -> str:
    """XML 1.0 cannot carry most control characters: replace them so any error message serialises."""
    return _CONTROL.sub("\ufffd", str(value))


_SPECIAL = re.compile('[<>&"\'\x00-\x1f\ufffe\uffff]')


def _attr(value: object) -> str:
    s = str(value)
    return f'"{s}"' if not _SPECIAL.search(s) else quoteattr(_xml_text(s), {"\n": "&#10;", "\r": "&#13;", "\t": "&#9;"})


def _text(value: object) -> str:
    s = str(value)
    return s if not _SPECIAL.search(s.replace("\n", "")) else escape(_xml_text(s))


class _Case:
    """One <testcase>, kept as text: ElementTree costs seconds on 10^5 items; this is a fraction of that."""

    __slots__ = ("xml", "outcome")

    def __init__(self, name: str, classname: str, outcome: str = "", body: str = "", out: str = ""):
        """`out` is XML text already (the caller escapes what it interpolates)."""
        inner = body + (f"<system-out>{out}</system-out>" if out else "")
        self.outcome = outcome  # "", "failure", "error" or "skipped"
        self.xml = (f'    <testcase name={_attr(name)} classname="{classname}" time="0">{inner}</testcase>\n'
                    if inner else f'    <testcase name={_attr(name)} classname="{classname}" time="0"/>\n')


def _formatted(values: pd.Series, sign: bool = False) -> list[str]:
    """A numeric column as text, vectorised-ish (fmt() per value costs seconds at 10^5 items)."""
    spec = "{:+.3f}" if sign else "{:.3f}"
    return [spec.format(v) if v == v and abs(v) != float("inf") else "n/a" for v in values.tolist()]


def item_cases(result: CompareResult, max_item_drop: float | None) -> list[_Case]:
    """One case per item; only the items the gate flagged fail (a drop past X that is significant after Holm)."""
    cases = []
    if max_item_drop is None:
        flagged: set[str] = set()
    elif max_item_drop == result.options.gate.max_item_drop:
        flagged = set(result.gate.get("flagged_items", []))
    else:  # another threshold than the gate's: the same test, at that threshold
        from rfteval.compare.gate import Gate, item_drop_check

        flagged = set(item_drop_check(result, Gate(max_item_drop=max_item_drop))["flagged"])
    b, c = _text(result.baseline["label"]), _text(result.candidate["label"])
    it = result.items
    cols = zip(it["item_id"].tolist(), it["delta"].tolist(), _formatted(it["baseline"]), _formatted(it["candidate"]),
               _formatted(it["delta"], True), _formatted(it["delta_lo"], True), _formatted(it["delta_hi"], True),
               it["baseline_n"].tolist(), it["candidate_n"].tolist(), it["baseline_errors"].tolist(),
               it["candidate_errors"].tolist(), it["candidate_error"].tolist())
    for item_id, delta, fb, fc, fd, flo, fhi, nb, nc, eb, ec, first_error in cols:
        outcome, body = "", ""
        if ec:
            outcome = "error"
            msg = f"{ec} of {nc} {result.candidate['label']} record(s) errored: {first_error}"[:1000]
            body = (f"<error message={_attr(msg)} type={_attr(str(first_error).split(':')[0])}>"
                    f"{_text(first_error)}</error>")
        elif item_id in flagged:
            outcome = "failure"
            msg = f"dropped by {-delta:.3f} (more than --max-item-drop {max_item_drop:g}, significant after Holm)"
            body = f'<failure message={_attr(msg)} type="item-drop">{b} {fb} -&gt; {c} {fc}</failure>'
        interval = f"[{flo}, {fhi}]" if flo != "n/a" and fhi != "n/a" else "n/a"
        out = (f"{b}: {fb} over {nb} epoch(s), {eb} error(s)\n{c}: {fc} over {nc} epoch(s), {ec} error(s)\n"
               f"delta: {fd} {interval}")
        cases.append(_Case(str(item_id), ITEMS_SUITE, outcome, body, out))
    for role, ids in (("baseline", result.unpaired["baseline_only"]), ("candidate", result.unpaired["candidate_only"])):
        for item_id in ids:
            body = f'<skipped message="only in the {role}&apos;s records: not compared"/>'
            cases.append(_Case(item_id, ITEMS_SUITE, "skipped", body))
    return cases


def gate_cases(result: CompareResult) -> list[_Case]:
    cases = []
    for check in result.gate.get("checks", []):
        failed = not check["passed"]
        body = f'<failure message={_attr(check["detail"])} type="gate"/>' if failed else ""
        cases.append(_Case(check["name"], GATE_SUITE, "failure" if failed else "", body, _text(check["detail"])))
    return cases


def render_junit(result: CompareResult, max_item_drop: float | None = None, timestamp: str | None = None) -> bytes:
    """The JUnit document; `max_item_drop` defaults to the gate's."""
    if max_item_drop is None:
        max_item_drop = result.options.gate.max_item_drop
    props = {
        "baseline.label": result.baseline["label"], "candidate.label": result.candidate["label"],
        "baseline.mean": result.baseline["mean"], "candidate.mean": result.candidate["mean"],
        "delta.mean": result.delta["mean"], "delta.ci95": fmt_ci(result.delta["ci95"], 4),
        "delta.p_value": result.delta["p_value"], **agent_properties(result),
    }
    suites: list[tuple[str, list[_Case], dict[str, object]]] = [(ITEMS_SUITE, item_cases(result, max_item_drop), props)]
    gate = gate_cases(result)
    if gate:
        suites.append((GATE_SUITE, gate, {}))
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    parts: list[str] = []
    stamp = f" timestamp={_attr(timestamp)}" if timestamp else ""
    for name, cases, suite_props in suites:
        counts = {"tests": len(cases), "failures": sum(c.outcome == "failure" for c in cases),
                  "errors": sum(c.outcome == "error" for c in cases),
                  "skipped": sum(c.outcome == "skipped" for c in cases)}
        for key in totals:
            totals[key] += counts[key]
        attrs = " ".join(f'{k}="{v}"' for k, v in counts.items())
        parts.append(f'  <testsuite name="{name}" {attrs} time="0"{stamp}>\n')
        if suite_props:
            parts.append("    <properties>\n")
            parts += [f"      <property name={_attr(k)} value={_attr(v)}/>\n" for k, v in suite_props.items()]
            parts.append("    </properties>\n")
        parts += [c.xml for c in cases]
        parts.append("  </testsuite>\n")
    title = f"rfteval compare {result.baseline['label']} -> {result.candidate['label']}"
    head = " ".join(f'{k}="{v}"' for k, v in totals.items())
    doc = (f"<?xml version='1.0' encoding='utf-8'?>\n<testsuites name={_attr(title)} {head} time=\"0\">\n"
           + "".join(parts) + "</testsuites>\n")
    return doc.encode("utf-8")


def write_junit(result: CompareResult, path: str | Path, max_item_drop: float | None = None) -> None:
    """Atomic: the file is whole or absent."""
    from datetime import datetime

    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S")
    write_bytes_atomic(path, render_junit(result, max_item_drop, timestamp=stamp))
