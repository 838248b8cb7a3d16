"""`rfteval compare` end to end: output formats, exit codes of the gate, bad input, --help."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rfteval.cli.app import app
from rfteval.data.records import make_record, write_jsonl
from tests.support.record_sides import write_side as record_side

runner = CliRunner()
BASE = {"a": [0, 0, 1], "b": [1, 1, 1], "c": [0, 0, 0], "d": [1, 0, 1]}
TUNED = {"a": [1, 1, 1], "b": [1, 1, 0], "c": [0, 1, 0], "d": [1, 1, 1]}


def write_side(path: Path, label: str, scores: dict[str, list[float]]) -> Path:
    return record_side(path, label, scores, sub=lambda s: {"acc": s, "fmt": 1.0})


@pytest.fixture
def pair(tmp_path):
    return (str(write_side(tmp_path / "base.jsonl", "base", BASE)),
            str(write_side(tmp_path / "tuned.jsonl", "tuned", TUNED)))


def run(*args: str):
    return runner.invoke(app, ["compare", *args])


def test_table_output(pair):
    res = run(*pair, "--top", "2")
    assert res.exit_code == 0, res.output
    out = res.stdout
    assert "base -> tuned" in out
    assert "overall" in out and "hardest" in out and "sub:acc" in out and "sub:fmt" in out
    assert "0.500" in out and "0.750" in out and "+0.250" in out and "3/0/1" in out
    assert "per item, lowest delta first (2 of 4)" in out
    assert "gate" not in out.lower()


@pytest.mark.slow
def test_json_exact_shape(pair):
    res = run(*pair, "--format", "json")
    assert res.exit_code == 0
    j = json.loads(res.stdout)
    side_keys = {"label", "mean", "ci95", "items", "records", "errors"}
    assert side_keys <= set(j["baseline"]) and side_keys <= set(j["candidate"])
    assert j["baseline"]["label"] == "base" and j["baseline"]["mean"] == pytest.approx(0.5)
    assert (j["candidate"]["items"], j["candidate"]["records"], j["candidate"]["errors"]) == (4, 12, 0)
    assert {"mean", "ci95", "p_value", "mde", "wins", "ties", "losses"} <= set(j["delta"])
    assert j["delta"]["mean"] == pytest.approx(0.25) and (j["delta"]["wins"], j["delta"]["losses"]) == (3, 1)
    assert j["delta"]["p_value"] == pytest.approx(0.5)  # exact: |sum d| >= 1 for 8 of 16 sign patterns
    assert [i["item_id"] for i in j["items"]] == ["b", "c", "d", "a"]
    first = j["items"][0]
    assert first["baseline"] == pytest.approx(1.0) and first["candidate"] == pytest.approx(2 / 3)
    assert first["delta"] == pytest.approx(-1 / 3)
    assert set(j["slices"]) == {"hardest"} and set(j["sub_scores"]) == {"acc", "fmt"}
    assert j["gate"] == {"passed": True, "failures": [], "checks": [], "warnings": [], "mode": "evidence",
                         "flagged_items": []}


def test_p_value_is_the_share_of_sign_patterns_as_extreme_as_the_observed():
    """The 0.5 test_json_exact_shape expects, derived here from BASE and TUNED: the per-item mean deltas, and every one
    of the 2**4 sign patterns; rfteval's exact sign-flip test gives the same share."""
    from itertools import product

    from rfteval.stats import sign_flip_p_value

    d = [sum(TUNED[i]) / len(TUNED[i]) - sum(BASE[i]) / len(BASE[i]) for i in BASE]
    assert d == pytest.approx([2 / 3, -1 / 3, 1 / 3, 1 / 3])  # a, b, c, d
    # sum = 1: |Σ s·d| >= 1 when a's sign agrees with 3 or 2 of the other three's: 2 · (1 + 3) patterns of 16
    hits = sum(abs(sum(s * x for s, x in zip(signs, d))) >= abs(sum(d)) - 1e-9 for signs in product((1, -1), repeat=4))
    assert hits == 8
    p, method = sign_flip_p_value(d)
    assert (p, method) == (pytest.approx(hits / 16), "exact")


@pytest.fixture
def regression(tmp_path):
    """12 items x 8 epochs: q0 collapses, every other item loses 2 of 8 epochs."""
    base = {f"q{i}": [1.0] * 8 for i in range(12)}
    tuned = {f"q{i}": [1.0] * 6 + [0.0, 0.0] for i in range(12)} | {"q0": [0.0] * 8}
    return (str(write_side(tmp_path / "rb.jsonl", "base", base)),
            str(write_side(tmp_path / "rt.jsonl", "tuned", tuned)))


@pytest.mark.parametrize("flags, code, failure", [
    (["--fail-under", "0.7"], 0, None),
    (["--fail-under", "0.8"], 0, None),  # 0.75 over 4 items: no evidence that the model is below 0.8
    (["--fail-under", "0.8", "--gate", "strict"], 1, "fail-under: candidate mean 0.7500, interval lower bound"),
    (["--max-drop", "0.1"], 0, None),
    (["--require-improvement"], 1, "require-improvement: too few items to tell"),
    (["--max-item-drop", "0.5"], 0, None),
    (["--max-item-drop", "0.3"], 0, None),  # b drops 1/3, but 3+3 epochs can never show it: a warning, not a failure
    (["--fail-under", "0.8", "--max-item-drop", "0.3", "--gate", "strict"], 1, "fail-under"),
])
@pytest.mark.slow
def test_gate_exit_codes(pair, flags, code, failure):
    res = run(*pair, "--format", "json", *flags)
    assert res.exit_code == code, res.output
    gate = json.loads(res.stdout)["gate"]
    assert gate["passed"] is (code == 0)
    if failure:
        assert any(f.startswith(failure) for f in gate["failures"])
        assert all(f"rfteval: gate failed: {f}" in res.stderr for f in gate["failures"])
    assert all(f"rfteval: warning: {w}" in res.stderr for w in gate["warnings"])
    table = run(*pair, *flags)
    assert table.exit_code == code
    assert ("gate FAILED" in table.stdout) is (code == 1)
    assert ("gate passed" in table.stdout) is (code == 0)


def test_an_item_drop_that_epochs_cannot_show_is_a_warning(pair):
    res = run(*pair, "--max-item-drop", "0.3", "--format", "json")
    assert res.exit_code == 0
    assert "rfteval: warning: max-item-drop: 3+3 epochs per item cannot show any single item's drop" in res.stderr


@pytest.mark.slow
def test_max_drop_fails_on_a_regression(regression):
    res = run(*regression, "--max-drop", "0.1", "--format", "json")
    assert res.exit_code == 1, res.output
    (failure,) = json.loads(res.stdout)["gate"]["failures"]
    assert failure.startswith("max-drop: delta -0.3125 [") and failure.endswith("lies below 0 and below -0.1")
    swapped = run(regression[1], regression[0], "--max-drop", "0.1", "--format", "json")
    assert swapped.exit_code == 0


@pytest.mark.slow
def test_reports_written(regression, tmp_path):
    md, xml, html = tmp_path / "out" / "c.md", tmp_path / "out" / "c.xml", tmp_path / "out" / "c.html"
    res = run(*regression, "--markdown", str(md), "--junit", str(xml), "--html", str(html), "--max-item-drop", "0.3")
    assert res.exit_code == 1, res.output
    assert "max-item-drop: 1 item(s) dropped by more than 0.3, significant after Holm: q0" in md.read_text()
    assert 'failures="2"' in xml.read_text()  # the item q0 (not the 11 items that dropped 0.25) and the gate check
    assert '<svg id="scatter"' in html.read_text()


@pytest.mark.slow
def test_error_policy_and_gate_mode_flags(tmp_path):
    err = {"stage": "generate", "type": "server_error", "message": "HTTP 500"}
    recs = []
    for i in range(10):
        for e in range(2):
            r = make_record(run_id="t", model_label="tuned", model="m", item_id=f"q{i}", epoch=e, output_text="o",
                            error=err if e == 0 and i < 2 else None)
            r.score = None if e == 0 and i < 2 else 1.0
            recs.append(r)
    write_jsonl(recs, tmp_path / "t.jsonl")
    write_side(tmp_path / "b.jsonl", "base", {f"q{i}": [1.0, 1.0] for i in range(10)})
    b, t = str(tmp_path / "b.jsonl"), str(tmp_path / "t.jsonl")
    j = json.loads(run(b, t, "--format", "json").stdout)
    assert j["candidate"]["mean"] == 1.0 and j["candidate"]["generation_errors"] == 2
    z = json.loads(run(b, t, "--format", "json", "--errors", "zero").stdout)
    assert z["candidate"]["mean"] == pytest.approx(0.9) and z["options"]["errors"] == "zero"
    gated = run(b, t, "--max-drop", "0.1")
    assert gated.exit_code == 1 and "error-rate: tuned: 10.0% of records failed to generate" in gated.stdout
    assert run(b, t, "--max-drop", "0.1", "--max-error-rate", "0.1").exit_code == 0
    table = run(b, t)
    assert "2 generation error(s) left out" in table.stdout


@pytest.mark.parametrize("args, message", [
    (["--format", "yaml"], "--format: must be table or json"),
    (["--ci", "wald"], "--ci: must be t or bootstrap"),
    (["--max-drop", "-1"], "--max-drop: must be >= 0"),
    (["--by", "difficulty"], "--by: --by needs --dataset"),
    (["--label", "a", "--label", "b", "--label", "c"], "--label: give --label once"),
    (["--gate", "lenient"], "--gate: must be evidence or strict"),
    (["--errors", "ignore"], "--errors: must be exclude or zero"),
    (["--score-range", "1,0"], "--score-range: LO must be below HI"),
    (["--score-range", "x"], "--score-range: must be two numbers LO,HI"),
])
def test_bad_flags_exit_2_one_line(pair, args, message, tmp_path):
    md = tmp_path / "never.md"
    res = run(*pair, *args, "--markdown", str(md))
    assert res.exit_code == 2
    assert res.stderr.strip().count("\n") == 0 and message in res.stderr
    assert "Traceback" not in res.output
    assert not md.exists()


def test_bad_record_file_exit_2_names_line(pair, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"item_id": "a", "epoch": 0, "score": 1}\n{"item_id": "b", "epoch": 0, "score": "x"}\n')
    html = tmp_path / "never.html"
    res = run(pair[0], str(bad), "--html", str(html))
    assert res.exit_code == 2
    assert res.stderr.strip() == f"rfteval: {bad}:2: score: must be a finite number, got \"x\""
    assert not html.exists()
    res = run(pair[0], str(tmp_path / "missing.jsonl"))
    assert res.exit_code == 2 and "no such file or directory" in res.stderr


@pytest.mark.slow
def test_strict_and_unpaired(tmp_path, pair):
    extra = write_side(tmp_path / "more.jsonl", "tuned", {**TUNED, "e": [1.0]})
    res = run(pair[0], str(extra), "--format", "json")
    assert res.exit_code == 0
    assert json.loads(res.stdout)["unpaired"] == {"baseline_only": [], "candidate_only": ["e"]}
    assert "1 item(s) only in the candidate" in res.stderr
    table = run(pair[0], str(extra))
    assert "only in the candidate, left out: e" in table.stdout
    strict = run(pair[0], str(extra), "--strict")
    assert strict.exit_code == 2 and "only in the candidate" in strict.stderr


@pytest.mark.slow
def test_run_directory_with_labels(tmp_path):
    write_side(tmp_path / "base.jsonl", "base", BASE)
    write_side(tmp_path / "tuned.jsonl", "tuned", TUNED)
    res = run(str(tmp_path), str(tmp_path), "-l", "base", "-l", "tuned", "--format", "json")
    assert res.exit_code == 0 and json.loads(res.stdout)["delta"]["mean"] == pytest.approx(0.25)
    res = run(str(tmp_path), str(tmp_path))
    assert res.exit_code == 2 and "name one with --label" in res.stderr


@pytest.mark.slow
def test_one_run_directory_with_a_label_per_side(tmp_path):
    """`compare runs/a -l base -l tuned`: one path, both labels (the README's form) pairs that directory's two."""
    write_side(tmp_path / "base.jsonl", "base", BASE)
    write_side(tmp_path / "tuned.jsonl", "tuned", TUNED)
    both = run(str(tmp_path), str(tmp_path), "-l", "base", "-l", "tuned", "--format", "json")
    one = run(str(tmp_path), "-l", "base", "-l", "tuned", "--format", "json")
    assert one.exit_code == 0, one.output
    assert json.loads(one.stdout) == json.loads(both.stdout)
    assert json.loads(one.stdout)["delta"]["mean"] == pytest.approx(0.25)
    res = run(str(tmp_path), "-l", "base")  # one label and one path is still not a comparison
    assert res.exit_code == 2 and "--label" in res.stderr


def test_by_slices_on_the_command_line(pair, tmp_path):
    ds = tmp_path / "data.jsonl"
    ds.write_text("\n".join(json.dumps({"id": i, "messages": [{"role": "user", "content": "q"}],
                                        "metadata": {"difficulty": "hard" if i in "ac" else "easy"}}) for i in "abcd"))
    res = run(*pair, "--dataset", str(ds), "--by", "difficulty", "--format", "json")
    assert res.exit_code == 0, res.output
    slices = json.loads(res.stdout)["slices"]
    assert slices["difficulty=hard"]["delta"]["mean"] == pytest.approx((2 / 3 + 1 / 3) / 2)
    assert slices["difficulty=easy"]["items"] == 2


def test_help_shows_a_ci_example():
    res = runner.invoke(app, ["compare", "--help"])
    assert res.exit_code == 0
    assert "CI example" in res.stdout
    assert 'cat compare.md >> "$GITHUB_STEP_SUMMARY"' in res.stdout
    for flag in ("--fail-under", "--max-drop", "--require-improvement", "--max-item-drop", "--markdown", "--junit",
                 "--html", "--strict", "--exclude-errors", "--tie", "--top", "--by", "--gate", "--errors",
                 "--max-error-rate", "--score-range", "--max-stop-share"):
        assert flag in res.stdout
    assert "--max-stop-share max_turns=0.10" in res.stdout  # the agent example


@pytest.mark.slow
def test_real_subprocess(pair, tmp_path):
    exe = Path(sys.executable).parent / "rfteval"
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-c", "from rfteval.cli.app import main; main()"]
    md = tmp_path / "summary.md"
    proc = subprocess.run(cmd + ["compare", *pair, "--format", "json", "--fail-under", "0.9", "--gate", "strict",
                                 "--markdown", str(md)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    j = json.loads(proc.stdout)
    (failure,) = j["gate"]["failures"]
    assert failure.startswith("fail-under: candidate mean 0.7500, interval lower bound ") and failure.endswith(" < 0.9")
    assert proc.stderr.splitlines() == [f"wrote {md}", f"rfteval: gate failed: {failure}"]
    assert failure in md.read_text()
    ok = subprocess.run(cmd + ["compare", *pair], capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0 and "overall" in ok.stdout and ok.stderr == ""


@pytest.mark.slow
def test_bootstrap_intervals(pair):
    t = json.loads(run(*pair, "--format", "json").stdout)
    b = json.loads(run(*pair, "--format", "json", "--ci", "bootstrap", "--seed", "3").stdout)
    assert b["options"]["ci_method"] == "bootstrap" and b["options"]["seed"] == 3
    assert b["delta"]["mean"] == t["delta"]["mean"]
    assert b["delta"]["ci95"] != t["delta"]["ci95"]
    lo, hi = b["delta"]["ci95"]
    assert min(i["delta"] for i in b["items"]) <= lo <= b["delta"]["mean"] <= hi <= max(i["delta"] for i in b["items"])


@pytest.mark.slow
def test_a_report_path_that_is_an_input_is_refused_before_any_work(pair, tmp_path):
    before = open(pair[0]).read()
    res = run(*pair, "--markdown", pair[0])
    assert res.exit_code == 2 and "is also an input of this command" in res.stderr
    assert open(pair[0]).read() == before
    run_dir = tmp_path / "rundir"
    run_dir.mkdir()
    (run_dir / "base.jsonl").write_text(before)
    (run_dir / "tuned.jsonl").write_text(open(pair[1]).read())
    res = run(str(run_dir), str(run_dir), "-l", "base", "-l", "tuned", "--html", str(run_dir / "tuned.jsonl"))
    assert res.exit_code == 2 and "is also an input" in res.stderr
    res = run(*pair, "--html", str(tmp_path))
    assert res.exit_code == 2 and "is a directory" in res.stderr and "Traceback" not in res.output
    ok = run(*pair, "--markdown", str(tmp_path / "out" / "c.md"))
    assert ok.exit_code == 0 and f"wrote {tmp_path / 'out' / 'c.md'}" in ok.stderr


def test_the_same_file_on_both_sides_is_said(pair):
    res = run(pair[0], pair[0], "--format", "json")
    assert res.exit_code == 0
    assert any("both sides are the same records" in n for n in json.loads(res.stdout)["notes"])


def test_by_a_field_no_item_has_is_bad_input(pair, tmp_path):
    ds = tmp_path / "data.jsonl"
    ds.write_text("\n".join(json.dumps({"id": i, "messages": [{"role": "user", "content": "q"}],
                                        "difficulty": "hard"}) for i in "abcd"))
    res = run(*pair, "--dataset", str(ds), "--by", "difficulti")
    assert res.exit_code == 2 and "--by difficulti: no item of" in res.stderr


def _agent_pair(tmp_path: Path) -> tuple[str, str]:
    """Ten items: the tuned agent answers in 2 turns where the base takes 5, but 3 of its 20 rollouts end at the
    turn limit."""
    from tests.support.agent_records import Rollout, agent_side, write_agent

    base = {f"q{i}": [(0.0, Rollout(5, tool_calls=4)), (1.0, Rollout(5, tool_calls=4))] for i in range(10)}
    ends = ["max_turns"] * 3 + ["no_tool_calls"] * 17
    tuned = {f"q{i}": [(1.0, Rollout(2, ends[2 * i], 1)), (1.0, Rollout(2, ends[2 * i + 1], 1))] for i in range(10)}
    return (str(write_agent(agent_side("base", base), tmp_path / "base.jsonl")),
            str(write_agent(agent_side("tuned", tuned), tmp_path / "tuned.parquet")))


@pytest.mark.slow
def test_agent_runs_table_json_and_the_stop_share_gate(tmp_path):
    b, t = _agent_pair(tmp_path)
    table = run(b, t, "--top", "0")
    assert table.exit_code == 0, table.output
    out = table.stdout
    assert out.index("overall") < out.index("agent: base -> tuned") < out.index("baseline base:")
    assert "tool calls" in out and "4.00" in out and "1.00" in out and "lower" in out
    assert "max_turns" in out and "15.0% (3)" in out and "finished on its own" in out
    gated = run(b, t, "--max-stop-share", "max_turns=0.10", "--format", "json")
    assert gated.exit_code == 1
    assert ("rfteval: gate failed: max-stop-share max_turns: tuned: 15.0% of 20 rollouts ended with max_turns "
            "(> 0.1)") in gated.stderr
    j = json.loads(gated.stdout)
    assert j["options"]["max_stop_share"] == {"max_turns": 0.1}
    assert j["agent"]["rows"]["tool_calls"]["delta"]["mean"] == pytest.approx(-3.0)
    assert j["agent"]["stop_reasons"]["max_turns"]["candidate"] == pytest.approx(0.15)
    assert run(b, t, "--max-stop-share", "max_turns=0.15").exit_code == 0
    plain = json.loads(run(*_plain_pair(tmp_path), "--format", "json").stdout)
    assert "agent" not in plain and "max_stop_share" not in plain["options"]


def _plain_pair(tmp_path: Path) -> tuple[str, str]:
    return (str(write_side(tmp_path / "pb.jsonl", "base", BASE)), str(write_side(tmp_path / "pt.jsonl", "tuned", TUNED)))


@pytest.mark.parametrize("value, message", [
    ("max_turn=0.1", "--max-stop-share: unknown stop reason 'max_turn'"),
    ("max_turns=2", "--max-stop-share: max_turns: the share must lie in [0, 1], got 2"),
    ("max_turns", "--max-stop-share: must be REASON=SHARE"),
])
def test_a_bad_stop_share_is_one_line_before_anything_is_read(tmp_path, value, message):
    """Exit 2 on the flag alone: the record files named do not even exist."""
    md = tmp_path / "never.md"
    res = run(str(tmp_path / "nowhere.jsonl"), str(tmp_path / "either.jsonl"), "--max-stop-share", value,
              "--markdown", str(md))
    assert res.exit_code == 2 and res.stderr.strip().count("\n") == 0
    assert res.stderr.startswith(f"rfteval: {message}")
    assert not md.exists()


def test_html_reads_the_baseline_file_once(tmp_path, monkeypatch):
    """compare --html's readiness section, its sampling check and its listed samples come from the one read of the
    baseline's file that the comparison makes (issue 40: it was read three times)."""
    from rfteval.compare import samples as samples_mod
    from rfteval.data import frame as frame_mod
    from rfteval.data import records as records_mod
    from rfteval.data import sampling_check
    from tests.compare.test_paths import _run_dir

    base, tuned = _run_dir(tmp_path, "jsonl")
    reads: list[Path] = []

    def count(module: object, name: str) -> None:
        real = getattr(module, name)
        monkeypatch.setattr(module, name, lambda path, *a, **k: reads.append(Path(path)) or real(path, *a, **k))

    for module, name in ((frame_mod, "read_frame"), (frame_mod, "read_record_rows"), (frame_mod, "recorded_range"),
                         (records_mod, "read_records"), (sampling_check, "file_answers")):
        count(module, name)
    init = samples_mod.SampleSource.__init__
    monkeypatch.setattr(samples_mod.SampleSource, "__init__",
                        lambda self, path, label=None: reads.append(Path(path)) or init(self, path, label))
    page = tmp_path / "c.html"
    res = run(str(base), str(tuned), "--html", str(page))
    assert res.exit_code == 0, res.output
    text = page.read_text()
    assert reads.count(base) == 1 and "RFT readiness of the baseline (base)" in text and "Not assessed" not in text
