"""Milo: turn a family message into calendar items. Four sub-scores, combined by the multi grader.

Written for rfteval as an illustration. scripts/sync_graders.py embeds this file once per sub-grader
of graders/milo.json, each time with a `grade` that returns one of the four functions below.

An extracted item matches a reference event when the dates are equal and the titles are alike
(rapidfuzz token_set_ratio >= TITLE_MATCH after default processing); matching is one-to-one, best
title first, so a second copy of an event matches nothing.
"""

import re

from rapidfuzz import fuzz, utils

TITLE_MATCH = 60.0
TYPES = ("school", "medical", "sports", "arts", "social", "work", "household", "travel", "other")
_TIME = re.compile(r"^\s*(\d{1,2})(?::(\d{2}))?\s*([ap]\.?m\.?)?\s*$", re.IGNORECASE)


def norm_time(value):
    """Times such as "16:30", "4:30 pm" or "4pm" as "16:30"; None when missing or unreadable."""
    m = _TIME.match(value) if isinstance(value, str) else None
    if not m:
        return None
    hour, minute, half = int(m.group(1)), int(m.group(2) or 0), (m.group(3) or "").lower()
    if half.startswith("p") and hour < 12:
        hour += 12
    if half.startswith("a") and hour == 12:
        hour = 0
    return f"{hour:02d}:{minute:02d}" if hour < 24 and minute < 60 else None


def norm_event(value):
    """An extracted item in comparable form; anything that is not an object becomes an empty item."""
    if not isinstance(value, dict):
        value = {}

    def text(key):
        return value[key].strip() if isinstance(value.get(key), str) else ""

    return {
        "title": text("title"), "date": text("date"), "start": norm_time(value.get("start_time")),
        "type": text("type").lower(), "conflict": value.get("conflict") is True,
    }


def events(items):
    return [norm_event(e) for e in items] if isinstance(items, list) else []


def reference(item):
    ref = item["reference_answer"]
    if not isinstance(ref, dict) or not isinstance(ref.get("events"), list):
        raise ValueError("item reference_answer.events must be a list of calendar items")
    return events(ref["events"])


def extracted(sample):
    parsed = isinstance(sample.get("output_json"), dict)
    return events(sample["output_json"].get("events") if parsed else None)


def match(ref, pred):
    """One-to-one (ref index, pred index) pairs: same date, alike titles, best title (then time) first."""
    candidates = []
    for i, r in enumerate(ref):
        for j, p in enumerate(pred):
            if not p["title"] or p["date"] != r["date"]:
                continue
            sim = fuzz.token_set_ratio(r["title"], p["title"], processor=utils.default_process)
            if sim >= TITLE_MATCH:
                candidates.append((-sim, r["start"] != p["start"], i, j))
    pairs, used_ref, used_pred = [], set(), set()
    for _, _, i, j in sorted(candidates):
        if i not in used_ref and j not in used_pred:
            pairs.append((i, j))
            used_ref.add(i)
            used_pred.add(j)
    return pairs


def _parts(sample, item):
    ref, pred = reference(item), extracted(sample)
    return ref, pred, match(ref, pred)


def completeness(sample, item):
    """Recall of reference events: 1 per event found with its start time, 0.5 when the time is wrong."""
    ref, pred, pairs = _parts(sample, item)
    if not ref:
        return 1.0
    return sum(1.0 if ref[i]["start"] == pred[j]["start"] else 0.5 for i, j in pairs) / len(ref)


def classification(sample, item):
    """Share of matched events with the right type; nothing matched scores 0 (unless nothing was due)."""
    ref, pred, pairs = _parts(sample, item)
    if not pairs:
        return 0.0 if ref else 1.0
    return sum(ref[i]["type"] == pred[j]["type"] for i, j in pairs) / len(pairs)


def duplicates(sample, item):
    """Share of extracted items that stand for a distinct reference event: duplicates (and inventions) lower it.
    An empty answer earns nothing here when events were due (else "no duplicates" would reward saying nothing)."""
    ref, pred, pairs = _parts(sample, item)
    if not pred:
        return 0.0 if ref else 1.0
    return len(pairs) / len(pred)


def conflicts(sample, item):
    """F1 of the conflict flags: a flag counts when it sits on a matched event the reference flags too."""
    ref, pred, pairs = _parts(sample, item)
    flagged = sum(e["conflict"] for e in ref) + sum(e["conflict"] for e in pred)
    if flagged == 0:  # nothing to flag: credit only an answer that found something (or when nothing was due)
        return 1.0 if pairs or not ref else 0.0
    both = sum(ref[i]["conflict"] and pred[j]["conflict"] for i, j in pairs)
    return 2 * both / flagged
