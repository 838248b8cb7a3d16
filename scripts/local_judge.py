"""A scripted local judge for the demo: it answers model-grader requests on an OpenAI-compatible server.

IT IS NOT A MODEL. It is a scripted stand-in so that `make demo` and the tests run offline and free; every answer
it gives says so in its explanation. It answers score_model, label_model and group_judge requests (recognised by
the structured-output schema they carry) deterministically, from a transparent heuristic: rubric-keyword coverage.

The heuristic, in full:
- The judged text is the last <answer>/<response>/<output>/<sample> tag of the last user message, else the text
  after its last line ending in ':' that names an answer/response/output/analysis/submission, else that message.
- Rubric points are the bullet lines ("- ", "* ", "1. ") of every other part of the prompt. A point's weight is
  its "(N pts)" / "N points" when given, else 1.
- A point is scored 1, 0.5 or 0 by the share of its terms found in the judged text (>= 60% → 1, >= 30% → 0.5).
  Its terms are its quoted phrases, [bracketed ids] and numbers when it has any, else its content words (4+
  letters, not stop words, compared by their first six letters). A number is found whole ("$1,020,000" is one
  number and its "$" is ignored; "5" is not found in "2025", but "two" is found for "2"; "45-day" is 45), and
  "Form 8949/Schedule D" is two terms. "under N words" points check the word count; points starting with
  "never" / "do not" / "don't" are met when their terms are absent.
- With no bullet points at all, the score is the share of the prompt's content words found in the judged text.
- score_model: result = coverage × the top of the range named in the prompt ("from 0 to N"; default 1).
  label_model: the labels (the schema's enum) are read as ordered best first; coverage c picks label
  round((1 − c) × (number of labels − 1)). group_judge: for each sample, 0.8 × coverage of the instruction points
  in the <context>'s system/developer messages + 0.2 × the share of its content words found in the context
  (grounding); scores are then divided by the group's best, so the best sample scores 1.
  A sample that is an agent's <trajectory> (group_judge renders one for a rollout) is read whole: 0.55 × coverage
  of the instruction points by its <final_answer> + 0.25 × the share of the final answer's content words found in
  its own <tool_result>s (grounded in what it retrieved, not in the prompt) + 0.2 × the share of its [cited ids]
  that those results show (0.5 when it cites none); a trajectory with no final answer scores 0. Then divided by
  the group's best, as above.

It is a responder of the tests' OpenAI-compatible server (tests/support/fake_openai.py), which speaks the wire
format. Run: `python scripts/local_judge.py --port 0` prints its base_url (http://127.0.0.1:PORT/v1) on the first
line and serves until killed. 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

# The server is the tests' OpenAI-compatible server: this checkout's tests/ first, ahead of any installed `tests`.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.support.fake_openai import FakeOpenAI, Reply, Request, count_tokens, serve_until_stopped  # noqa: E402

MODEL_NAME = "local-scripted-judge"
STAND_IN = "scripted stand-in, not a model"

STOP = frozenset(
    "a an and are as at be been but by can could did do does doing done each either else for from has have having "
    "her here hers him his how i if in into is it its just may me might more most must my no nor not of off on "
    "once only or other our ours out over own same shall she should so some such than that the their theirs them "
    "then there these they this those through to too under until up upon us very was we were what when where "
    "which while who whom why will with would you your yours also any answer answers".split()
)
_WORD = re.compile(r"[A-Za-z][A-Za-z'-]{3,}")
_BULLET = re.compile(r"^\s*(?:[-*\u2022]|\d{1,2}[.)])\s+(.+?)\s*$", re.M)
_WEIGHT = re.compile(r"\(?\b(\d+(?:\.\d+)?)\s*(?:pts?|points?)\b\)?", re.I)
_QUOTED = re.compile(r"\"([^\"]{2,120})\"|\u201c([^\u201d]{2,120})\u201d")
_BRACKET = re.compile(r"\[([A-Za-z0-9][A-Za-z0-9 _.-]{0,40})\]")
_TOKEN = re.compile(r"[^\s,;:()\"\[\]/]+")
_UNIT = re.compile(r"^(\d[\d.,]*)-[A-Za-z]+$")  # "45-day" is the number 45
_NUMBER_WORDS = dict(enumerate("zero one two three four five six seven eight nine ten eleven twelve".split()))
_AMOUNT = re.compile(r"\$?\d{1,3}(?:,\d{3})+(?:\.\d+)?")  # 1,020,000 is one number, not "1", "020", "000"
_LIMIT = re.compile(r"\b(?:under|at most|no more than|fewer than|less than)\s+(\d+)\s+words\b", re.I)
_NEGATIVE = re.compile(r"^\s*(?:never|do not|don't|avoid)\b", re.I)
_TAG = re.compile(r"<(answer|response|output|sample)\b[^>]*>(.*?)</\1>", re.S | re.I)
_MARKER = re.compile(
    r"^[^\n]*\b(?:answer|response|output|analysis|submission|completion)\b[^\n:]*:[ \t]*$", re.I | re.M
)
_MARKER_INLINE = re.compile(r"\b(?:model answer|answer|response|output)\s*:\s*", re.I)
_RANGE = re.compile(r"\b(?:from|between)\s+0(?:\.0+)?\s+(?:to|and)\s+(\d+(?:\.\d+)?)", re.I)


# ---- the heuristic (pure) ----------------------------------------------------------------------------------------


def stems(text: str) -> set[str]:
    return {w.lower()[:6] for w in _WORD.findall(text) if w.lower() not in STOP}


def point_terms(point: str) -> tuple[list[str], bool]:
    """(terms, exact): quoted phrases / [ids] / numbers matched as text, else content-word stems."""
    body = _WEIGHT.sub(" ", point)
    exact = [a or b for a, b in _QUOTED.findall(body)]
    exact += [f"[{x}]" for x in _BRACKET.findall(body)]
    rest = _QUOTED.sub(" ", _BRACKET.sub(" ", body))
    exact += [m.group().lstrip("$") for m in _AMOUNT.finditer(rest)]
    rest = _AMOUNT.sub(" ", rest)
    tokens = (_UNIT.sub(r"\1", t.rstrip(".!?").lstrip("$")) for t in _TOKEN.findall(rest))
    exact += [t for t in tokens if t and any(c.isdigit() for c in t)]
    if exact:
        return list(dict.fromkeys(exact)), True
    return sorted(stems(_NEGATIVE.sub(" ", body))), False


def _contains(text: str, term: str) -> bool:
    """`term` in `text`, not inside a longer word or number: "5" is not found in "2025", "$15" is not "$150"."""
    before = r"(?<![\w.,])" if term[:1].isalnum() else ""
    after = r"(?![\w]|[.,]\d)" if term[-1:].isalnum() else ""
    return re.search(before + re.escape(term) + after, text) is not None


def score_point(point: str, judged: str) -> tuple[float, str]:
    """A rubric point's score (1, 0.5, 0) against the judged text, and why."""
    limit = _LIMIT.search(point)
    if limit:
        n = len(judged.split())
        ok = n <= int(limit.group(1))
        return (1.0 if ok else 0.0), f"{n} words ({'within' if ok else 'over'} the {limit.group(1)}-word limit)"
    terms, exact = point_terms(point)
    if not terms:
        return 1.0, "no checkable terms"
    if exact:
        low = judged.lower()
        found = [t for t in terms if _contains(low, t.lower())
                 or (t.isdigit() and int(t) in _NUMBER_WORDS and _contains(low, _NUMBER_WORDS[int(t)]))]
    else:
        have = stems(judged)
        found = [t for t in terms if t in have]
    share = len(found) / len(terms)
    if _NEGATIVE.match(point):
        ok = share < 0.3
        verdict = "respected" if ok else "broken"
        return (1.0 if ok else 0.0), f"prohibition {verdict} ({len(found)}/{len(terms)} terms present)"
    score = 1.0 if share >= 0.6 else 0.5 if share >= 0.3 else 0.0
    return score, f"{len(found)}/{len(terms)} terms found" + (f": {', '.join(found[:6])}" if found else "")


def rubric_points(text: str) -> list[tuple[str, float]]:
    out = []
    for m in _BULLET.finditer(text):
        point = m.group(1)
        w = _WEIGHT.search(point)
        out.append((point, float(w.group(1)) if w else 1.0))
    return out


def coverage(points: list[tuple[str, float]], judged: str, fallback_text: str) -> tuple[float, list[dict[str, str]]]:
    """Weighted rubric coverage in 0..1, and one step per point ({description, conclusion}; `missed` when < 1)."""
    if not points:
        want = stems(fallback_text)
        if not want:
            return 0.0, [{"description": f"{STAND_IN}: nothing to check against", "conclusion": "score 0"}]
        found = want & stems(judged)
        share = len(found) / len(want)
        return share, [{"description": f"{STAND_IN}: no rubric bullets; overlap with the prompt's content words",
                        "conclusion": f"{len(found)}/{len(want)} content words found"}]
    steps = []
    total = sum(w for _, w in points) or 1.0
    got = 0.0
    for point, weight in points:
        s, why = score_point(point, judged)
        got += s * weight
        step = {"description": point[:200], "conclusion": f"{s * weight:g}/{weight:g} pts ({why})"}
        if s < 1:
            step["missed"] = "yes"
        steps.append(step)
    return got / total, steps


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def split_judged(messages: list[dict[str, Any]]) -> tuple[str, str]:
    """(judged text, everything else in the prompt)."""
    users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
    if not users:
        return "", "\n".join(_text(m.get("content")) for m in messages)
    last = _text(messages[users[-1]].get("content"))
    rest = [_text(m.get("content")) for i, m in enumerate(messages) if i != users[-1]]
    tags = list(_TAG.finditer(last))
    markers = list(_MARKER.finditer(last)) or list(_MARKER_INLINE.finditer(last))
    if tags:
        m = tags[-1]
        judged, before = m.group(2), last[: m.start()] + last[m.end():]
    elif markers:
        m = markers[-1]
        judged, before = last[m.end():], last[: m.start()]
    else:
        judged, before = last, ""
    return judged.strip(), "\n".join([*rest, before])


def top_of_range(prompt: str) -> float:
    m = _RANGE.search(prompt)
    return float(m.group(1)) if m else 1.0


def answer_score(messages: list[dict[str, Any]]) -> dict[str, Any]:
    judged, rest = split_judged(messages)
    cov, steps = coverage(rubric_points(rest), judged, rest)
    for step in steps:
        step.pop("missed", None)
    top = top_of_range(rest)
    steps.append({"description": f"{STAND_IN}: rubric-keyword coverage",
                  "conclusion": f"coverage {cov:.3f} × {top:g}"})
    return {"steps": steps, "result": round(cov * top, 4)}


def answer_label(messages: list[dict[str, Any]], labels: list[str]) -> dict[str, Any]:
    judged, rest = split_judged(messages)
    cov, steps = coverage(rubric_points(rest), judged, rest)
    for step in steps:
        step.pop("missed", None)
    index = round((1 - cov) * (len(labels) - 1)) if labels else 0
    label = labels[index] if labels else ""
    steps.append({"description": f"{STAND_IN}: labels read as ordered best first",
                  "conclusion": f"coverage {cov:.3f} picks {label!r}"})
    return {"steps": steps, "label": label}


_CONTEXT = re.compile(r"<context>(.*?)</context>", re.S)
_MESSAGE = re.compile(r'<message role="([^"]*)">\n?(.*?)\n?</message>', re.S)
_SAMPLE = re.compile(r'<sample id="([^"]+)">\n?(.*?)\n?</sample>', re.S)


_FINAL = re.compile(r"<final_answer>\n?(.*?)\n?</final_answer>", re.S)
_RESULT = re.compile(r"<tool_result\b[^>]*>(.*?)</tool_result>", re.S)


def trajectory_score(points: list[tuple[str, float]], text: str, instructions: str) -> tuple[float, str]:
    """(raw score, why) of an agent's rendered trajectory: its final answer's coverage, grounded in its own tool
    results, its citations backed by them."""
    final = _FINAL.search(text)
    results = "\n".join(_RESULT.findall(text))
    calls, failed = text.count("<tool_call "), text.count(' error="')
    path = f"{calls} tool calls ({failed} failed)"
    if final is None:
        return 0.0, f"{STAND_IN}: trajectory with {path} and no final answer"
    answer = final.group(1)
    cov, steps = coverage(points, answer, instructions)
    missed = [s["description"][:60] for s in steps if s.pop("missed", None)]
    words = stems(answer)
    grounded = len(words & stems(results)) / len(words) if words else 0.0
    cited = list(dict.fromkeys(_BRACKET.findall(answer)))
    backed = [c for c in cited if c in results]
    cites = len(backed) / len(cited) if cited else 0.5
    why = (f"{STAND_IN}: trajectory with {path}; final answer met {len(points) - len(missed)}/{len(points)} "
           f"instruction points (coverage {cov:.2f}), grounded in its tool results {grounded:.2f}, "
           f"{len(backed)}/{len(cited)} citations shown by them"
           + (f"; missed: {'; '.join(missed[:3])}" if missed else ""))
    return 0.55 * cov + 0.25 * grounded + 0.2 * cites, why


def answer_group(messages: list[dict[str, Any]]) -> dict[str, Any]:
    user = "\n".join(_text(m.get("content")) for m in messages if m.get("role") == "user")
    ctx = _CONTEXT.search(user)
    context = ctx.group(1) if ctx else ""
    parts = _MESSAGE.findall(context)
    instructions = "\n".join(t for role, t in parts if role in ("system", "developer"))
    points = rubric_points(instructions)
    context_stems = stems(context)
    raw: list[tuple[str, float, str]] = []
    for sid, text in _SAMPLE.findall(user):
        if text.lstrip().startswith("<trajectory"):
            raw.append((sid, *trajectory_score(points, text, instructions)))
            continue
        cov, steps = coverage(points, text, instructions)
        words = stems(text)
        grounded = len(words & context_stems) / len(words) if words else 0.0
        missed = [s["description"][:60] for s in steps if s.pop("missed", None)]
        met = len(points) - len(missed)
        why = (f"{STAND_IN}: met {met}/{len(points)} instruction points (coverage {cov:.2f}), grounding {grounded:.2f}"
               + (f"; missed: {'; '.join(missed[:3])}" if missed else "; all instruction points met"))
        raw.append((sid, 0.8 * cov + 0.2 * grounded, why))
    best = max((r for _, r, _ in raw), default=0.0)
    scores = [{"id": sid, "explanation": why + f"; relative to the group's best ({best:.2f})",
               "score": round(r / best, 4) if best > 0 else 0.5} for sid, r, why in raw]
    return {"scores": scores}


def schema_of(body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    rf = body.get("response_format") or {}
    if isinstance(rf, dict) and isinstance(rf.get("json_schema"), dict):
        return str(rf["json_schema"].get("name", "")), rf["json_schema"].get("schema") or {}
    fmt = (body.get("text") or {}).get("format") if isinstance(body.get("text"), dict) else None
    if isinstance(fmt, dict):
        return str(fmt.get("name", "")), fmt.get("schema") or {}
    return "", {}


def request_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    if "messages" in body:
        return [m for m in body["messages"] if isinstance(m, dict)]
    inp = body.get("input")
    if isinstance(inp, str):
        return [{"role": "user", "content": inp}]
    return [m for m in inp or [] if isinstance(m, dict) and "role" in m]


def answer(body: dict[str, Any]) -> dict[str, Any]:
    """The JSON answer to one judge request (the kind is read from its structured-output schema)."""
    name, schema = schema_of(body)
    props = schema.get("properties") or {}
    messages = request_messages(body)
    if name == "group_judge_scores" or "scores" in props:
        return answer_group(messages)
    if name == "label_model_result" or "label" in props:
        labels = list((props.get("label") or {}).get("enum") or [])
        return answer_label(messages, labels)
    return answer_score(messages)


# ---- the responder: this judge as the test server's answer to each request ------------------------------------


def responder(request: Request) -> Reply:
    """The JSON answer of `answer` as the reply's text; usage counted over the prompt's text and the answer."""
    text = json.dumps(answer(request.body), ensure_ascii=False)
    prompt = "\n".join(_text(m.get("content")) for m in request_messages(request.body))
    return Reply(text=text, usage={"input_tokens": count_tokens(prompt), "output_tokens": count_tokens(text),
                                   "reasoning_tokens": 0})


def judge_server() -> FakeOpenAI:
    """The one OpenAI-compatible test server (tests/support/fake_openai.py) answering with `responder`: any model
    name is answered, GET /v1/models lists MODEL_NAME, and no request is kept (it may serve for long)."""
    server = FakeOpenAI(responder)
    server.listed = [MODEL_NAME]
    server.keep_requests = False
    return server


def serve(port: int = 0) -> FakeOpenAI:
    """Start the judge in a daemon thread on 127.0.0.1; `.base_url` is its URL, `.stop()` ends it."""
    return judge_server().start(port)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=f"A local judge for the demo ({STAND_IN}); 127.0.0.1 only.")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    return serve_until_stopped(judge_server(), args.port)


if __name__ == "__main__":
    sys.exit(main())
