"""The ready-made graders (graders/*.json), the example datasets (datasets/*) and their demo recordings."""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from rfteval.cli.app import app
from rfteval.data.dataset import load_dataset
from rfteval.data.sample import make_sample
from rfteval.graders import GradeOptions, GradingEngine, load_grader
from tests.support import REPO
from tests.support.optional import require

GRADERS = REPO / "graders"
DATASETS = REPO / "datasets"
CODE_CASES = ("chipstack", "runloop", "harvey", "ambience", "safetykit", "milo")
ALL_CASES = CODE_CASES + ("accordance", "legal-review", "math")
MIN_ITEMS = {"chipstack": 20, "runloop": 20, "harvey": 20, "ambience": 10, "safetykit": 10, "milo": 10,
             "accordance": 10, "legal-review": 12, "math": 24}
PREFIX = {"chipstack": "cs", "runloop": "rl", "harvey": "hv", "ambience": "am", "safetykit": "sk", "milo": "mi",
          "accordance": "ac", "legal-review": "lr", "math": "ma"}
ANSWER_KEY = {"chipstack": "predicted", "harvey": "passages", "ambience": "codes", "safetykit": "labels",
              "milo": "events"}
RECORDED = ("chipstack", "harvey", "milo")


def items(case: str) -> list[dict[str, Any]]:
    return [it.data for it in load_dataset(DATASETS / case / "items.jsonl")]


def by_id(case: str) -> dict[str, dict[str, Any]]:
    return {it["id"]: it for it in items(case)}


def answer_text(case: str, item: dict[str, Any]) -> str:
    """The reference rendered as the model would answer: JSON for structured cases, the full text for runloop."""
    if case == "runloop":
        return item["reference_output"]
    ref = item["reference_answer"]
    return json.dumps(ref if isinstance(ref, dict) else {ANSWER_KEY[case]: ref})


@pytest.fixture(scope="module")
def engine() -> Iterator[Callable[[str], GradingEngine]]:
    """One engine per ready-made grader for the whole module (python workers start once)."""
    made: dict[str, GradingEngine] = {}

    def get(case: str) -> GradingEngine:
        if case not in made:
            made[case] = GradingEngine(load_grader(GRADERS / f"{case}.json"), GradeOptions(python_workers=2))
        return made[case]

    yield get
    for e in made.values():
        e.close()


def score(engine: Callable[[str], GradingEngine], case: str, item_id: str, answer: Any) -> float:
    text = answer if isinstance(answer, str) else json.dumps(answer)
    result = engine(case).grade(make_sample(text), by_id(case)[item_id])
    assert result.error is None, result.error
    return result.score


# ------------------------------------------------------------------ graders load and stay in sync

def test_the_ready_made_graders_are_there() -> None:
    assert sorted(p.stem for p in GRADERS.glob("*.json")) == sorted(ALL_CASES)


@pytest.mark.parametrize("case", ALL_CASES)
def test_ready_made_grader_loads(case: str) -> None:
    config = load_grader(GRADERS / f"{case}.json")
    expected_type = {"milo": "multi", "accordance": "score_model", "legal-review": "score_model"}.get(case, "python")
    assert config.type == expected_type
    raw = json.loads((GRADERS / f"{case}.json").read_text(encoding="utf-8"))
    assert set(raw) <= {"type", "name", "source", "image_tag", "graders", "calculate_output", "model", "input",
                        "range", "sampling_params"}  # OpenAI's own fields only: uploadable as it is


def test_milo_and_accordance_follow_openai_shapes() -> None:
    milo = json.loads((GRADERS / "milo.json").read_text(encoding="utf-8"))
    assert list(milo["graders"]) == ["completeness", "classification", "duplicates", "conflicts"]
    assert all(g["type"] == "python" for g in milo["graders"].values())
    for key in milo["graders"]:
        assert key in milo["calculate_output"]
    judge = load_grader(GRADERS / "accordance.json")
    assert judge.model == "gpt-4.1-2025-04-14" and list(judge.range) == [0.0, 1.0]
    prompt = " ".join(m.content for m in judge.input if isinstance(m.content, str))
    for path in ("item.rubric", "item.reference_answer", "item.question", "sample.output_text"):
        assert path in prompt


def run_script(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *map(str, args)], capture_output=True, text=True, cwd=REPO, timeout=120)


def test_sync_check_is_clean() -> None:
    done = run_script("scripts/sync_graders.py", "--check")
    assert done.returncode == 0, done.stderr


@pytest.mark.slow
def test_sync_detects_and_fixes_a_stale_json(tmp_path: Path) -> None:
    root = tmp_path / "graders"
    shutil.copytree(GRADERS, root)
    src = root / "src" / "milo.py"
    src.write_text(src.read_text(encoding="utf-8") + "\nEXTRA = 1\n", encoding="utf-8")
    stale = run_script("scripts/sync_graders.py", "--check", "--root", root)
    assert stale.returncode == 1 and "milo.json" in stale.stderr and "chipstack" not in stale.stderr
    assert run_script("scripts/sync_graders.py", "--root", root).returncode == 0
    assert run_script("scripts/sync_graders.py", "--check", "--root", root).returncode == 0
    subs = json.loads((root / "milo.json").read_text(encoding="utf-8"))["graders"]
    for key, sub in subs.items():
        assert "EXTRA = 1" in sub["source"] and sub["source"].rstrip().endswith(f"return {key}(sample, item)")


def test_grader_sources_use_only_the_openai_grader_image() -> None:
    allowed = {"re", "collections", "rapidfuzz", "ast_grep_py", "json", "math", "sympy"}
    for src in (GRADERS / "src").glob("*.py"):
        for line in src.read_text(encoding="utf-8").splitlines():
            if line.startswith(("import ", "from ")):
                assert line.split()[1].split(".")[0] in allowed, (src.name, line)


# ------------------------------------------------------------------ references score the maximum

@pytest.mark.parametrize("case", [CODE_CASES[0], *(pytest.param(c, marks=pytest.mark.slow) for c in CODE_CASES[1:])])
def test_reference_answers_score_the_maximum(case: str, engine: Callable[[str], GradingEngine]) -> None:
    data = items(case)
    results = engine(case).grade_batch([(make_sample(answer_text(case, it)), it) for it in data])
    assert [(r.score, r.error) for r in results] == [(1.0, None)] * len(data)


@pytest.mark.slow
def test_milo_reference_gives_every_sub_score(engine: Callable[[str], GradingEngine]) -> None:
    item = items("milo")[3]
    result = engine("milo").grade(make_sample(answer_text("milo", item)), item)
    assert result.sub_scores == {"completeness": 1.0, "classification": 1.0, "duplicates": 1.0, "conflicts": 1.0}


# ------------------------------------------------------------------ wrong answers, scores computed by hand

def chipstack_ref(item_id: str) -> list[dict[str, str]]:
    return [dict(p) for p in by_id("chipstack")[item_id]["reference_answer"]]


def test_chipstack_wrong_answers(engine: Callable[[str], GradingEngine]) -> None:
    ref = chipstack_ref("cs-001")  # 8 parameters
    assert len(ref) == 8
    wrong = [dict(p) for p in ref[:6]] + [{"name": "DATA_WIDTH", "value": "32"}, {"name": "CLK_MHZ", "value": "100"}]
    assert score(engine, "chipstack", "cs-001", {"predicted": wrong}) == pytest.approx(0.75)  # P = R = 6/8
    assert score(engine, "chipstack", "cs-001", {"predicted": ref + [ref[0]]}) == pytest.approx(16 / 17)  # P 8/9, R 1
    assert score(engine, "chipstack", "cs-001", {"predicted": ref[:4]}) == pytest.approx(2 / 3)  # P 1, R 1/2
    assert score(engine, "chipstack", "cs-001", {"predicted": [dict(p, value=p["value"] + " bits") for p in ref]}) == 0
    assert score(engine, "chipstack", "cs-001", "Here you go: " + json.dumps({"predicted": ref})) == 0.0


@pytest.mark.slow
def test_runloop_wrong_answers(engine: Callable[[str], GradingEngine]) -> None:
    ref = by_id("runloop")["rl-001"]["reference_output"]
    assert score(engine, "runloop", "rl-001", ref.replace("<plan>", "")) == 0.0  # a tag missing
    assert score(engine, "runloop", "rl-001", ref + "\nDone!") == pytest.approx(0.4)  # 0.1 + 0.1 + 0.2, then text after
    assert score(engine, "runloop", "rl-001", ref.replace("<plan>", "<plan>\n</plan>\n<plan>")) == pytest.approx(0.2)
    no_path = ref.replace("```typescript src/payments/createPaymentIntent.ts", "```typescript")
    assert score(engine, "runloop", "rl-001", no_path) == 0.5  # layout fine, no usable code block
    one_of_two = ref.replace("automatic_payment_methods: { enabled: true },\n", "")
    assert score(engine, "runloop", "rl-001", one_of_two) == pytest.approx((1.0 + 0.5) / 2)
    elsewhere = ref.replace("src/payments/createPaymentIntent.ts", "lib/createPaymentIntent.ts")
    assert score(engine, "runloop", "rl-001", elsewhere) == pytest.approx(0.5)  # checks look under src/payments/ only


@pytest.mark.slow
def test_harvey_wrong_answers(engine: Callable[[str], GradingEngine]) -> None:
    passages = by_id("harvey")["hv-010"]["reference_answer"]["passages"]
    assert len(passages) == 2
    assert score(engine, "harvey", "hv-010", {"passages": passages + passages}) == 1.0  # duplicates: no penalty
    assert score(engine, "harvey", "hv-010", {"passages": []}) == 0.0
    with GradingEngine(load_grader(GRADERS / "harvey.json"), GradeOptions(python_workers=1)) as own:
        item = {"reference_answer": {"passages": ["abcd", "wxyz"]}}
        # "abcd" matches exactly, "wxyz" shares no character with it: recall (1 + 0) / 2, precision 1.
        assert own.grade(make_sample('{"passages": ["abcd"]}'), item).score == pytest.approx(2 / 3)
        # Indel similarity of "abce" and "abcd": 1 - 2 / 8 = 0.75, for recall of "abcd" and precision alike.
        one = {"reference_answer": {"passages": ["abcd"]}}
        assert own.grade(make_sample('{"passages": ["abce"]}'), one).score == pytest.approx(0.75)


@pytest.mark.slow
def test_ambience_partial_credit(engine: Callable[[str], GradingEngine]) -> None:
    assert by_id("ambience")["am-004"]["reference_answer"]["codes"] == ["E11.65", "Z79.4", "E66.9", "Z68.34"]
    # exact: Z79.4, E669 (dots and case normalised); same category: e11.9 ~ E11.65, Z68.35 ~ Z68.34; wrong: I10.
    answer = {"codes": ["e11.9", "Z79.4", "E669", "Z68.35", "I10"]}
    hits = 2 + 0.5 * 2
    p, r = hits / 5, hits / 4
    assert score(engine, "ambience", "am-004", answer) == pytest.approx(2 * p * r / (p + r))
    # one reference code gives category credit once: two E11 guesses against one E11.65
    answer = {"codes": ["E11.9", "E11.8", "Z79.4", "E66.9", "Z68.34"]}
    hits = 3 + 0.5
    assert score(engine, "ambience", "am-004", answer) == pytest.approx(2 * (hits / 5) * (hits / 4) / (hits / 5 + hits / 4))
    assert score(engine, "ambience", "am-004", {"codes": []}) == 0.0


@pytest.mark.slow
def test_safetykit_label_sets(engine: Callable[[str], GradingEngine]) -> None:
    assert by_id("safetykit")["sk-004"]["reference_answer"]["labels"] == ["illegal_goods", "fraud"]
    assert score(engine, "safetykit", "sk-004", {"labels": ["Illegal goods"]}) == pytest.approx(2 / 3)  # P 1, R 1/2
    assert score(engine, "safetykit", "sk-004", {"labels": ["fraud", "illegal_goods", "spam"]}) == pytest.approx(0.8)
    assert score(engine, "safetykit", "sk-004", {"labels": []}) == 0.0  # empty means "none"
    assert score(engine, "safetykit", "sk-001", {"labels": []}) == 1.0  # ... which is right for benign content
    assert score(engine, "safetykit", "sk-006", {"labels": ["self_harm"]}) == 0.0  # a recovery story is not a violation


@pytest.mark.slow
def test_milo_sub_scores(engine: Callable[[str], GradingEngine]) -> None:
    item = by_id("milo")["mi-004"]
    conference, deadline = item["reference_answer"]["events"]
    assert conference["conflict"] and not deadline["conflict"] and deadline["start_time"] is None
    answer = {"events": [
        dict(conference, start_time="7:15 PM"),  # same time, other spelling
        dict(conference, title="Conference w/ Mr. Okafor"),  # the same event again
        dict(deadline, type="other"),  # wrong type
    ]}
    result = engine("milo").grade(make_sample(json.dumps(answer)), item)
    subs = {"completeness": 1.0, "classification": 0.5, "duplicates": 2 / 3, "conflicts": 2 * 1 / (1 + 2)}
    assert result.sub_scores == pytest.approx(subs)
    assert result.score == pytest.approx(2 / 3 * (2 * 1.0 + 0.5 + 2 / 3) / 4)  # duplicates scales the rest
    late = {"events": [dict(conference, start_time="19:45", conflict=False), deadline]}
    result = engine("milo").grade(make_sample(json.dumps(late)), item)
    assert result.sub_scores == pytest.approx({"completeness": 0.75, "classification": 1.0, "duplicates": 1.0,
                                               "conflicts": 0.0})
    # Saying nothing earns nothing: "no duplicates" and "no false conflict flags" must not reward it.
    empty = engine("milo").grade(make_sample('{"events": []}'), item)
    assert empty.score == 0.0 and empty.sub_scores == {"completeness": 0.0, "classification": 0.0,
                                                       "duplicates": 0.0, "conflicts": 0.0}


# ------------------------------------------------------------------ datasets

@pytest.mark.parametrize("case", ALL_CASES)
def test_dataset_shape(case: str) -> None:
    data = items(case)
    assert len(data) >= MIN_ITEMS[case]
    assert [it["id"] for it in data] == [f"{PREFIX[case]}-{n:03d}" for n in range(1, len(data) + 1)]
    assert {it["difficulty"] for it in data} == {"easy", "medium", "hard"}
    for it in data:
        assert it["messages"][-1]["role"] == "user" and "system" not in {m["role"] for m in it["messages"]}
        assert "reference_answer" in it
    readme = (DATASETS / case / "README.md").read_text(encoding="utf-8")
    assert "written for rfteval" in readme.lower()


def strict_problems(schema: dict[str, Any], where: str = "$") -> list[str]:
    """Places where a schema breaks OpenAI's strict mode: objects must list every property and forbid others."""
    out = []
    if schema.get("type") == "object" or "properties" in schema:
        props = schema.get("properties", {})
        if schema.get("additionalProperties") is not False:
            out.append(f"{where}: additionalProperties must be false")
        if sorted(schema.get("required", [])) != sorted(props):
            out.append(f"{where}: every property must be required")
        for key, sub in props.items():
            out += strict_problems(sub, f"{where}.{key}")
    if isinstance(schema.get("items"), dict):
        out += strict_problems(schema["items"], f"{where}[]")
    return out


@pytest.mark.parametrize("case", ANSWER_KEY)
def test_schema_is_strict_and_fits_the_references(case: str) -> None:
    jsonschema = require("jsonschema", "setup")  # the graders extra

    wrapper = json.loads((DATASETS / case / "schema.json").read_text(encoding="utf-8"))
    assert wrapper["strict"] is True and wrapper["name"]
    schema = wrapper["schema"]
    assert strict_problems(schema) == []
    jsonschema.Draft202012Validator.check_schema(schema)
    for it in items(case):
        jsonschema.validate(json.loads(answer_text(case, it)), schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({ANSWER_KEY[case]: [], "note": "extra"}, schema)


def test_spec_loader_accepts_the_schemas() -> None:
    from rfteval.run.spec import load_response_format_file

    for case in ANSWER_KEY:
        fmt = load_response_format_file(DATASETS / case / "schema.json")
        assert fmt["strict"] is True and fmt["schema"]["required"] == [ANSWER_KEY[case]]


def test_harvey_passages_are_verbatim() -> None:
    for it in items("harvey"):
        source = it["messages"][-1]["content"]
        assert all(p in source for p in it["reference_answer"]["passages"]), it["id"]


# ------------------------------------------------------------------ recordings

def recorded_scores(engine: Callable[[str], GradingEngine], case: str, model: str) -> dict[str, list[float]]:
    data = by_id(case)
    rows = [json.loads(line) for line in (DATASETS / case / "recordings" / f"{model}.jsonl").read_text().splitlines()]
    assert sorted((r["item_id"], r["epoch"]) for r in rows) == sorted((i, e) for i in data for e in (1, 2, 3))
    results = engine(case).grade_batch([(make_sample(r["output_text"]), data[r["item_id"]]) for r in rows])
    per: dict[str, list[float]] = defaultdict(list)
    for r, res in zip(rows, results):
        assert res.error is None
        per[r["item_id"]].append(res.score)
    return per


def test_recordings_are_up_to_date() -> None:
    done = run_script("scripts/make_recordings.py", "--check")
    assert done.returncode == 0, done.stderr


@pytest.mark.slow
def test_sums_is_what_its_script_writes_and_no_held_out_sum_is_trained_on() -> None:
    """datasets/sums (the RFT example's task): its files are make_sums.py's, no pair of numbers is on both sides (3 + 4
    in training and 4 + 3 held out would be the same sum), and its grader scores the reference 1, the sum inside a
    sentence 0.5, a bare wrong number 0.5 and a wrong sentence 0."""
    done = run_script("datasets/sums/make_sums.py", "--check")
    assert done.returncode == 0, done.stderr
    split = {name: [it.data for it in load_dataset(DATASETS / "sums" / f"{name}.jsonl")] for name in ("train", "heldout")}
    pairs = {name: {frozenset(str(it["id"]).split("-")[1:]) for it in items} for name, items in split.items()}
    assert len(split["train"]) >= 60 and len(split["heldout"]) >= 20 and not pairs["train"] & pairs["heldout"]
    item = split["heldout"][0]
    ref = str(item["reference_answer"])
    outputs = [ref, f"The sum is {ref}.", str(int(ref) + 1), f"The sum is {int(ref) + 1}."]
    with GradingEngine(load_grader(DATASETS / "sums" / "grader.json"), GradeOptions(python_workers=1)) as grade:
        scores = [r.score for r in grade.grade_batch([(make_sample(o), item) for o in outputs])]
    assert scores == [1.0, 0.5, 0.5, 0.0]


@pytest.mark.parametrize("case", RECORDED)
@pytest.mark.slow
def test_recordings_show_a_trainable_task_and_a_better_tuned_model(case: str, engine: Callable[[str], GradingEngine]) -> None:
    base, tuned = recorded_scores(engine, case, "base"), recorded_scores(engine, case, "tuned")
    base_all = [s for v in base.values() for s in v]
    assert 0.5 < statistics.mean(base_all) < 0.95  # between the minimum and the maximum
    assert sum(len(set(v)) > 1 for v in base.values()) >= len(base) // 3  # epochs differ: RFT gets a signal
    deltas = [statistics.mean(tuned[i]) - statistics.mean(base[i]) for i in base]
    assert 0.05 < statistics.mean(deltas) < 0.2  # about +0.1
    assert any(d <= 0 for d in deltas)  # tuned is not better everywhere
    assert max(statistics.mean(v) for v in tuned.values()) == 1.0 > statistics.mean(s for v in tuned.values() for s in v)


# ------------------------------------------------------------------ through the command line

@pytest.mark.parametrize("case", CODE_CASES)
@pytest.mark.slow
def test_validate_grader_reference_check_cli(case: str) -> None:
    """rfteval's own reference check finds, unaided, how each item's reference stands for an output."""
    result = CliRunner().invoke(app, ["validate", "grader", str(GRADERS / f"{case}.json"),
                                      "-d", str(DATASETS / case / "items.jsonl")])
    assert result.exit_code == 0, result.output
    n = len(items(case))
    assert f"at the maximum (1): {n}/{n} = 100.0%" in result.output


@pytest.mark.slow
def test_grade_recordings_subprocess(tmp_path: Path, engine: Callable[[str], GradingEngine]) -> None:
    out = tmp_path / "base.records.jsonl"
    done = subprocess.run(
        [sys.executable, "-m", "rfteval", "grade", "-d", "datasets/milo/items.jsonl", "-g", "graders/milo.json",
         "--outputs", "datasets/milo/recordings/base.jsonl", "--out", str(out), "--format", "json"],
        capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr
    (model,) = json.loads(done.stdout)["models"]
    expected = [s for v in recorded_scores(engine, "milo", "base").values() for s in v]
    assert model["records"] == 33 and model["errors"] == 0
    assert model["mean"] == pytest.approx(statistics.mean(expected), abs=1e-12)
    assert len(out.read_text().splitlines()) == 33
