"""What the viewer's tests share: the demo runs made with `rfteval run` (as scripts/demo.sh makes them), record
files holding hostile content, and the viewer served on 127.0.0.1 in a thread.

A plain module beside fake_openai.py, like cli_run_files.py.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

from tests.support import REPO
from tests.support.cli_run_files import RFTEVAL

ROOT = REPO
CHIP = ROOT / "datasets" / "chipstack"
ACC = ROOT / "datasets" / "accordance"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def run(args: list[str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*RFTEVAL, *args], capture_output=True, text=True, cwd=ROOT, timeout=timeout)


def chipstack_run(out: Path) -> Path:
    """The demo's ChipStack run: the bundled replay recordings, 3 epochs, the python grader (scripts/demo.sh)."""
    done = run(["run", "--dataset", str(CHIP / "items.jsonl"), "--grader", str(ROOT / "graders/chipstack.json"),
                "--model", f"base=replay:{CHIP / 'recordings/base.jsonl'}",
                "--model", f"tuned=replay:{CHIP / 'recordings/tuned.jsonl'}", "--epochs", "3", "--out", str(out)])
    assert done.returncode == 0, done.stderr[-3000:]
    return out


def accordance_run(out: Path) -> Path:
    """The demo's Accordance run: a score_model judge (scripts/local_judge.py, a scripted stand-in on 127.0.0.1)
    grading the bundled recordings, so each record's grade_details holds the judge's steps."""
    judge = subprocess.Popen([sys.executable, str(ROOT / "scripts/local_judge.py"), "--port", "0"],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert judge.stdout is not None
        url = judge.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:"), url
        done = run(["run", "--dataset", str(ACC / "items.jsonl"), "--grader", str(ROOT / "graders/accordance.json"),
                    "--model", f"base=replay:{ACC / 'recordings/base.jsonl'}",
                    "--model", f"tuned=replay:{ACC / 'recordings/tuned.jsonl'}", "--epochs", "3",
                    "--judge-base-url", url, "--judge-model", "local-scripted-judge", "--out", str(out),
                    "--no-readiness"])
        assert done.returncode == 0, done.stderr[-3000:]
    finally:
        judge.terminate()
        judge.wait(timeout=30)
    return out


XSS_SCRIPT = "<script>window.__xss = 'script'</script>"
XSS_IMG = '<img src=x onerror="window.__xss = \'img\'">'
XSS_LINK = "[click me](javascript:window.__xss='link') <a href=\"javascript:window.__xss='a'\">click</a>"
RLO = "user\u202etxt.exe"  # a right-to-left override: shown as a mark, it cannot reorder what follows
LONE_SURROGATE = "bad \udcff unicode"  # valid JSON (an escape), not valid Unicode: what a broken decoder leaves
BIG = 5 * 1024 * 1024


def _record(label: str, item_id: str, epoch: int, score: float, output: str, **extra: object) -> dict[str, object]:
    return {"run_id": "hostile", "model_label": label, "model": label, "item_id": item_id, "epoch": epoch,
            "output_text": output, "output_json": None, "score": score, "sub_scores": None, "error": None,
            "usage": {"input_tokens": 10, "output_tokens": 20, "reasoning_tokens": None}, "latency_s": 0.5,
            "cached": False, "finished_at": "2026-12-04T00:00:00Z", **extra}


def hostile_records(tmp: Path) -> tuple[Path, Path, Path]:
    """Two record files and a dataset whose outputs, prompts, references, item ids, grader stdout and judge
    steps hold every hostile case of issue 29: <script>, <img onerror>, javascript: links, a 5 MB output, text
    that is not valid Unicode, and right-to-left overrides."""
    items = {
        "xss-script": (XSS_SCRIPT, {"grader_stdout": XSS_IMG}),
        "xss-img": (XSS_IMG, {"reasoning_text": XSS_SCRIPT}),
        "xss-link": (XSS_LINK, {"grade_details": {"steps": [{"description": XSS_IMG, "conclusion": XSS_LINK}],
                                                  "result": XSS_SCRIPT}}),
        "<img src=x onerror=window.__xss='id'>": ("an id that is HTML", {}),
        RLO: ("text with an override: \u202eevil\u202c done", {}),
        "surrogate": (LONE_SURROGATE, {"grader_stdout": LONE_SURROGATE}),
        "big": ("A" * BIG + " the end", {}),
    }
    dataset = tmp / "items.jsonl"
    with open(dataset, "w", encoding="utf-8") as fh:
        for item_id in items:
            fh.write(json.dumps({"id": item_id, "messages": [{"role": "user", "content": f"prompt {XSS_SCRIPT}"}],
                                 "reference_answer": XSS_IMG}) + "\n")
    paths = []
    for label, base_score in (("base", 0.8), ("tuned", 0.2)):
        path = tmp / f"{label}.jsonl"
        with open(path, "w", encoding="utf-8") as fh:
            for k, (item_id, (output, extra)) in enumerate(items.items()):
                for epoch in (1, 2, 3):
                    score = base_score if k % 2 else 1 - base_score
                    fh.write(json.dumps(_record(label, item_id, epoch, score, output, **extra)) + "\n")
        paths.append(path)
    return paths[0], paths[1], dataset


GRADING_ERRORS = 20  # on B's side of graders_with_errors


def graders_with_errors(tmp: Path, verdict: bool = True) -> tuple[Path, Path]:
    """Two graders' records of the same samples (base and tuned, 24 items, 2 epochs, each with a pass verdict at
    0.5, or none when not `verdict`: a grader with no pass_threshold), B agreeing with A up to a small upward bias,
    and GRADING_ERRORS of B's records grading errors (issue 36: the Agree page showed them only as a smaller sample
    count)."""
    import random

    rng = random.Random(1)
    rows_a, rows_b = [], []
    for label in ("base", "tuned"):
        for i in range(24):
            for epoch in (1, 2):
                a = round(rng.random(), 2) if label == "base" else min(1.0, round(rng.random() + 0.1, 2))
                b = min(1.0, max(0.0, a + rng.choice([0, 0, 0.1, -0.1, 0.5])))
                common = {"model_label": label, "item_id": f"q{i}", "epoch": epoch,
                          "output_text": f"answer {label} {i}", "error": None}
                rows_a.append({**common, "score": a, "passed": a >= 0.5, "grade_details": {"steps": ["old judge"]}})
                row_b = {**common, "score": b, "passed": b >= 0.5, "grade_details": {"steps": ["new judge"]}}
                if label == "tuned" and i < GRADING_ERRORS // 2:
                    row_b.update(score=0.0, passed=False,
                                 error={"stage": "grade", "type": "judge_error", "message": "the judge timed out"})
                if not verdict:
                    rows_a[-1].pop("passed")
                    row_b.pop("passed")
                rows_b.append(row_b)
    paths = tmp / "grader_a.jsonl", tmp / "grader_b.jsonl"
    for path, rows in zip(paths, (rows_a, rows_b)):
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return paths


def not_significant(tmp: Path) -> tuple[Path, Path]:
    """base and tuned record files (12 items, 2 epochs) where tuned's mean is higher but the paired test shows no
    difference: a delta above 0 that is not a win."""
    paths = []
    for label, shift in (("base", [0.0] * 12), ("tuned", [0.2, -0.1, 0.1, -0.2, 0.1, 0.0, 0.2, -0.1, 0.0, 0.1, -0.1, 0.1])):
        path = tmp / f"{label}.jsonl"
        with open(path, "w", encoding="utf-8") as fh:
            for i in range(12):
                for epoch in (1, 2):
                    score = round(min(1.0, max(0.0, 0.3 + 0.04 * i + shift[i])), 4)
                    fh.write(json.dumps(_record(label, f"i{i}", epoch, score, f"{label} answer {i}")) + "\n")
        paths.append(path)
    return paths[0], paths[1]


@contextlib.contextmanager
def served(data: object) -> Iterator[str]:
    """The viewer over `data` (a ViewData) on a free 127.0.0.1 port in a thread; yields its base URL."""
    import time

    import uvicorn

    from rfteval.view import server

    sock = server.bind("127.0.0.1", 0)
    url = server.url_of(sock)
    srv = uvicorn.Server(uvicorn.Config(server.make_app(data), log_level="warning", lifespan="off"))  # type: ignore[arg-type]
    thread = threading.Thread(target=srv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    for _ in range(200):
        if srv.started:
            break
        time.sleep(0.05)
    try:
        yield url
    finally:
        srv.should_exit = True
        thread.join(timeout=30)
        sock.close()


# ------------------------------------------------------------------ agent runs (issue 37): records with rollouts

PWNED_SCRIPT = "<script>window.__pwned = 'script'</script>"
PWNED_IMG = '<img src=x onerror="window.__pwned = \'img\'">'
PWNED_LINK = "[open](javascript:window.__pwned='link') <a href=\"javascript:window.__pwned='a'\">a</a>"
LONG_RESULT = "".join(f"line {k:05d} of the fetched page: the quick brown fox jumps over the lazy dog\n"
                      for k in range(320)) + "END OF THE FETCHED PAGE"  # > 20 KB: cut on the page
LONG_LINE = "A" * 30_000 + PWNED_SCRIPT + " the end of a very long line"  # one line, its hostile end past the cut
ERROR_RESULT = "error: ValueError: top_k must be positive, got -1"
BAD_ARGUMENTS = '{"query": "capital of", "top_k": '  # the model's broken JSON, as it sent it
AGENT_TOOLS = [{"type": "function", "function": {"name": name, "description": f"{name} the web",
                                                  "parameters": {"type": "object", "properties": {
                                                      "query": {"type": "string"}, "url": {"type": "string"},
                                                      "top_k": {"type": "integer"}}}}}
               for name in ("search", "fetch")]
Call = tuple[str, object, str | None]  # a tool's name, its arguments (JSON text, or a value to write as JSON), its result
Turn = tuple[str | None, list[Call]]  # an assistant message's text and its calls


def _rollout(turns: list[Turn], *, stop: str | None = None, unasked: str | None = None,
             errors: dict[str, int] | None = None) -> dict[str, object]:
    """A record's agent fields (agents-contract.md) from a scripted rollout: the transcript in OpenAI's chat shape,
    the counts, the stop reason (no_tool_calls unless said), the tool errors by type (each "error: <Type>:"
    result, unless given)."""
    import re

    messages: list[dict[str, object]] = []
    calls = 0
    counted: dict[str, int] = {}
    for n, (text, listed) in enumerate(turns, 1):
        message: dict[str, object] = {"role": "assistant", "content": text}
        ids = [f"call_{n}_{k}" for k in range(len(listed))]
        if listed:
            message["tool_calls"] = [{"id": i, "type": "function", "function": {
                "name": name, "arguments": args if isinstance(args, str) else json.dumps(args)}}
                for i, (name, args, _) in zip(ids, listed)]
        messages.append(message)
        for i, (_, _, result) in zip(ids, listed):
            calls += 1
            if result is not None:
                messages.append({"role": "tool", "tool_call_id": i, "content": result})
                kind = re.match(r"error: (\w+):", result)
                if kind:
                    counted[kind.group(1)] = counted.get(kind.group(1), 0) + 1
        if unasked is not None and n == 1:
            messages.append({"role": "tool", "tool_call_id": "call_nobody_made", "content": unasked})
    return {"turns": len(turns), "stop_reason": stop or "no_tool_calls", "tool_calls": calls,
            "tool_errors": errors if errors is not None else counted, "transcript": json.dumps(messages)}


def _agent_items() -> dict[str, dict[str, list[tuple[float, list[Turn], dict[str, object]]]]]:
    """Per item, per label, per epoch: (score, turns, the rollout's other fields)."""
    search: Call = ("search", {"query": "capital of France", "top_k": 3}, "1. Paris is the capital of France.")
    fetch: Call = ("fetch", {"url": "https://example.org/paris"}, LONG_RESULT)
    hostile: list[Turn] = [(PWNED_SCRIPT + " let me look " + RLO, [(PWNED_IMG, {"url": "javascript:window.__pwned='args'",
                                                                    "note": PWNED_LINK}, PWNED_IMG + " " + PWNED_LINK)]),
               (None, [("fetch", {"url": "https://example.org/" + "x" * 300}, LONG_LINE)])]
    loop: list[Turn] = [(f"try {k}", [("search", {"query": f"attempt {k}"}, f"nothing on attempt {k}")]) for k in range(1, 8)]
    loop.append(("one more", [("search", {"query": "attempt 8"}, None)]))  # stopped at the limit: never ran
    return {
        "search": {"base": [(1.0, [("I'll look that up.", [search]), (None, [fetch]), ("Paris.", [])], {})] * 2,
                   "tuned": [(1.0, [(None, [search]), ("Paris.", [])], {})] * 2},
        "errors": {"base": [(0.0, [(None, [("search", BAD_ARGUMENTS, "error: BadArguments: the arguments are not a "
                                                                    "JSON object")]),
                                   (None, [("search", {"query": "capital of France", "top_k": -1}, ERROR_RESULT)]),
                                   ("I could not find it.", [])], {})] * 2,
                   "tuned": [(1.0, [(None, [search]), ("Paris.", [])], {})] * 2},
        "hostile": {"base": [(0.5, [*hostile, (PWNED_SCRIPT, [])], {"unasked": PWNED_IMG})] * 2,
                    "tuned": [(0.0, [*hostile, (None, [search]), (PWNED_LINK, [])], {})] * 2},
        "loop": {"base": [(1.0, [("Paris.", [])], {})] * 2,
                 "tuned": [(0.0, loop, {"stop": "max_turns"})] * 2},
        "quick": {"base": [(0.0, [("Lyon?", [])], {})] * 2,
                  "tuned": [(1.0, [("Paris.", [])], {}), (1.0, [(None, [search]), ("Paris.", [])], {})]},
    }


def agent_rows() -> list[dict[str, object]]:
    """Both models' agent records (5 items x 2 epochs x 2 labels), as `rfteval run --tools` writes them."""
    rows = []
    for item_id, labels in _agent_items().items():
        for label, epochs in labels.items():
            for epoch, (score, turns, extra) in enumerate(epochs, 1):
                final = turns[-1][0]  # the final turn's text: output_text
                output_tools = [{"name": n, "arguments": a if isinstance(a, str) else json.dumps(a)}
                                for n, a, _ in turns[-1][1]] or None
                rows.append(_record(label, item_id, epoch, score, final or "", output_tools=output_tools,
                                    **_rollout(turns, **extra)))  # type: ignore[arg-type]
    return rows


def agent_records(tmp: Path) -> tuple[Path, Path, Path, Path]:
    """The agent records as two JSONL files (base, tuned), one Parquet file holding both (the columns the record's
    Parquet schema gives the agent fields: turns and tool_calls int64, stop_reason and transcript text, tool_errors
    a map), and the dataset declaring the tools."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from rfteval.data.records import JSON_TEXT_FIELDS, arrow_schema

    rows = agent_rows()
    paths = []
    for label in ("base", "tuned"):
        path = tmp / f"{label}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows if r["model_label"] == label), encoding="utf-8")
        paths.append(path)
    schema = arrow_schema()
    extra = [("turns", pa.int64()), ("stop_reason", pa.string()), ("tool_calls", pa.int64()),
             ("tool_errors", pa.map_(pa.string(), pa.int64())), ("transcript", pa.string())]
    schema = pa.schema([*schema, *(pa.field(n, t) for n, t in extra if n not in schema.names)])
    table = pa.Table.from_pylist([{**r, **{n: None if r.get(n) is None else json.dumps(r[n]) for n in JSON_TEXT_FIELDS},
                                   "tool_errors": list(r["tool_errors"].items())}  # type: ignore[attr-defined]
                                  for r in rows], schema=schema)
    parquet = tmp / "agent.parquet"
    pq.write_table(table, parquet, row_group_size=4)
    dataset = tmp / "items.jsonl"
    dataset.write_text("".join(json.dumps({"id": i, "messages": [{"role": "user", "content": "What is the capital "
                                                                  "of France?"}], "tools": AGENT_TOOLS,
                                           "reference_answer": "Paris"}) + "\n" for i in _agent_items()),
                       encoding="utf-8")
    return paths[0], paths[1], parquet, dataset
