import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rfteval.cli.app import app
from rfteval.data.sample import make_sample
from rfteval.errors import InputError
from rfteval.graders import GradeOptions, GradingEngine, load_grader, parse_config
from rfteval.graders.base import INVALID_VARIABLE, MODEL_SERVER, OTHER, GradeResult
from rfteval.graders.formula import compile_formula
from rfteval.graders.multi import FORMULA_EVAL, MultiConfig, combine

# The graders guide's "combined graders" example, verbatim.
NAME_EMAIL = {
    "type": "multi", "name": "combo",
    "graders": {
        "name": {"name": "name_grader", "type": "text_similarity", "input": "{{sample.output_json.name}}",
                 "reference": "{{item.name}}", "evaluation_metric": "fuzzy_match", "pass_threshold": 0.9},
        "email": {"name": "email_grader", "type": "string_check", "input": "{{sample.output_json.email}}",
                  "reference": "{{item.email}}", "operation": "eq"},
    },
    "calculate_output": "(name + email) / 2",
}

# The guide's tool-call pattern: the literal in `input`, the template in `reference`.
TOOL_CALL = {
    "type": "multi", "name": "tool_call",
    "graders": {
        "function_name": {"name": "fn", "type": "string_check", "input": "get_acceptors",
                          "reference": "{{sample.output_tools[0].function.name}}", "operation": "eq"},
        "arguments": {"name": "args", "type": "string_check", "input": "{\"smiles\": \"{{item.smiles}}\"}",
                      "reference": "{{sample.output_tools[0].function.arguments}}", "operation": "eq"},
    },
    "calculate_output": "0.5 * function_name + 0.5 * arguments",
}


def tool_sample(name: str, arguments: str) -> dict:
    return make_sample("", [{"id": "call_1", "type": "function", "function": {"name": name, "arguments": arguments}}])


def dump(tmp_path: Path, obj, name="g.json") -> Path:
    p = tmp_path / name
    p.write_text(json.dumps(obj, indent=2))
    return p


def grade(config: dict, sample: dict, item: dict) -> GradeResult:
    with GradingEngine(parse_config(config)) as engine:
        return engine.grade(sample, item)


def test_name_email_example():
    item = {"name": "John Smith", "email": "john@example.com"}
    r = grade(NAME_EMAIL, make_sample('{"name": "Jon Smith", "email": "john@example.com"}'), item)
    # fuzz.ratio("Jon Smith", "John Smith"): LCS 9 of 9 + 10 -> 1 - 1/19
    name = 1 - 1 / 19
    assert r.sub_scores == pytest.approx({"name": name, "email": 1.0})
    assert list(r.sub_scores) == ["name", "email"]     # config order
    assert r.score == pytest.approx((name + 1.0) / 2)
    assert r.error is None
    assert r.details["graders"]["name"]["passed"] is True  # the sub-grader's own pass_threshold (0.9)
    r = grade(NAME_EMAIL, make_sample('{"name": "John Smith", "email": "jon@example.com"}'), item)
    assert r.sub_scores == {"name": 1.0, "email": 0.0}
    assert r.score == 0.5


@pytest.mark.parametrize("name, arguments, expected", [
    ("get_acceptors", '{"smiles": "CCO"}', 1.0),
    ("get_acceptors", '{"smiles":"CCO"}', 0.5),      # exact string: whitespace matters, as the guide warns
    ("get_donors", '{"smiles": "CCO"}', 0.5),
    ("get_donors", "{}", 0.0),
])
def test_tool_call_example(name, arguments, expected):
    r = grade(TOOL_CALL, tool_sample(name, arguments), {"smiles": "CCO"})
    assert r.score == expected
    assert r.sub_scores == {"function_name": float(name == "get_acceptors"),
                            "arguments": float(arguments == '{"smiles": "CCO"}')}


def test_tool_call_without_a_tool_call_is_an_invalid_variable_error():
    r = grade(TOOL_CALL, make_sample("I will not call a tool"), {"smiles": "CCO"})
    assert r.score == 0.0
    assert r.error.type == INVALID_VARIABLE
    assert r.error.message.startswith("graders.function_name: ")
    assert "sample.output_tools[0].function.name" in r.error.message


def test_weighted_formula_with_functions():
    cfg = {**NAME_EMAIL, "calculate_output": "max(0, min(1, 0.8 * name ^ 2 + 0.2 * email - 0.1))"}
    r = grade(cfg, make_sample('{"name": "Jon Smith", "email": "x"}'), {"name": "John Smith", "email": "y"})
    name = 1 - 1 / 19
    assert r.score == pytest.approx(max(0, min(1, 0.8 * name ** 2 - 0.1)))


def test_failing_sub_grader_makes_an_error_and_keeps_sub_scores():
    cfg = {**NAME_EMAIL, "graders": {**NAME_EMAIL["graders"], "email": {
        **NAME_EMAIL["graders"]["email"], "reference": "{{item.mail}}"}}}
    r = grade(cfg, make_sample('{"name": "John Smith", "email": "a"}'), {"name": "John Smith", "email": "a"})
    assert r.score == 0.0
    assert r.sub_scores == {"name": 1.0, "email": 0.0}
    assert r.error.type == INVALID_VARIABLE
    assert r.error.message == "graders.email: {{ item.mail }}: no key 'mail'"
    assert r.details["graders"]["email"]["error"]["type"] == INVALID_VARIABLE


def test_label_model_is_allowed_as_a_sub_grader_and_its_error_propagates():
    cfg = {"type": "multi", "name": "m", "calculate_output": "0.5 * exact + 0.5 * judge", "graders": {
        "exact": NAME_EMAIL["graders"]["email"],
        "judge": {"type": "label_model", "name": "j", "model": "gpt-4o-mini",
                  "input": [{"role": "user", "content": "{{sample.output_text}}"}],
                  "labels": ["good", "bad"], "passing_labels": ["good"]}}}
    config = parse_config(cfg)
    assert config.graders["judge"].type == "label_model"
    with GradingEngine(config) as engine:  # no judge endpoint configured
        r = engine.grade(make_sample('{"email": "a"}'), {"email": "a"})
    assert r.error.type == MODEL_SERVER and r.error.message.startswith("graders.judge: ")
    assert r.sub_scores == {"exact": 1.0, "judge": 0.0} and r.score == 0.0


def test_formula_evaluation_error():
    cfg = {**NAME_EMAIL, "calculate_output": "log(email) + name"}
    r = grade(cfg, make_sample('{"name": "John Smith", "email": "x"}'), {"name": "John Smith", "email": "y"})
    assert r.score == 0.0
    assert r.error.type == FORMULA_EVAL == "formula_eval_error"
    assert "log(0) is undefined" in r.error.message
    assert r.sub_scores == {"name": 1.0, "email": 0.0}


def test_combine_prefers_the_first_sub_error_in_config_order():
    f = compile_formula("a + b", ["a", "b"])
    r = combine(f, {"a": GradeResult.failed("x_error", "first"), "b": GradeResult.failed("y_error", "second")})
    assert (r.error.type, r.error.message) == ("x_error", "graders.a: first")
    ok = combine(f, {"a": GradeResult(0.25, stdout="hi\n"), "b": GradeResult(0.5)})
    assert ok.score == 0.75 and ok.error is None and ok.stdout == "[a]\nhi\n"


class Spy:
    def __init__(self, scores):
        self.scores = scores
        self.calls: list[int] = []
        self.units: list[object] = []

    def grade_batch(self, pairs, units=None):
        self.calls.append(len(pairs))
        self.units.append(units)
        return [GradeResult(s) for s in self.scores[: len(pairs)]]


def test_each_sub_grader_grades_the_whole_batch_once():
    with GradingEngine(parse_config(NAME_EMAIL)) as engine:
        spy_name, spy_email = Spy([0.2, 0.4, 0.6]), Spy([1.0, 0.0, 1.0])
        engine.grader.graders = {"name": spy_name, "email": spy_email}
        results = engine.grade_batch([(make_sample("x"), {})] * 3, units=[("base", "q1")] * 2 + [("tuned", "q1")])
    assert spy_name.calls == [3] and spy_email.calls == [3]
    assert spy_name.units == spy_email.units == [[("base", "q1")] * 2 + [("tuned", "q1")]]  # the batch's units
    assert [r.score for r in results] == pytest.approx([0.6, 0.2, 0.8])


@pytest.mark.slow
def test_a_python_sub_grader_grades_in_the_batchs_units():
    """One unit, one process: a module-level count goes on across a unit's samples and starts again in the next."""
    counts = {"type": "python", "name": "n", "source": "n = 0\ndef grade(sample, item):\n    global n\n"
              "    n += 1\n    return n / 10\n"}
    config = parse_config({"type": "multi", "name": "m", "graders": {"n": counts}, "calculate_output": "n"})
    item = {"id": "q1"}
    with GradingEngine(config, GradeOptions(python_workers=1)) as engine:
        together = engine.grade_batch([(make_sample("x"), item)] * 3, units=[("base", "q1")] * 3)
        apart = engine.grade_batch([(make_sample("x"), item)] * 3)
        two = engine.grade_batch([(make_sample("x"), item)] * 3, units=[("base", "q1"), ("tuned", "q1"), ("base", "q1")])
    assert [r.score for r in together] == pytest.approx([0.1, 0.2, 0.3])
    assert [r.score for r in apart] == pytest.approx([0.1, 0.1, 0.1])  # no units: a process per sample
    assert [r.score for r in two] == pytest.approx([0.1, 0.1, 0.2])  # two models never share a process


def test_a_crashing_sub_grader_becomes_one_error_per_pair():
    class Boom:
        def grade_batch(self, pairs, units=None):
            raise RuntimeError("pool died")

    with GradingEngine(parse_config(NAME_EMAIL)) as engine:
        engine.grader.graders["email"] = Boom()
        results = engine.grade_batch([(make_sample('{"name": "a"}'), {"name": "a"})] * 2)
    for r in results:
        assert r.error.type == OTHER and r.error.message == "graders.email: RuntimeError: pool died"
        assert r.sub_scores == {"name": 1.0, "email": 0.0}


def test_short_result_list_is_an_error():
    with GradingEngine(parse_config(NAME_EMAIL)) as engine:
        engine.grader.graders["email"] = Spy([1.0])
        results = engine.grade_batch([(make_sample('{"name": "a"}'), {"name": "a"})] * 2)
    assert all("returned 1 results for 2 samples" in r.error.message for r in results)


# --- configuration errors name the field path -----------------------------------------------------------

def test_bad_nested_field_names_its_path_and_line(tmp_path):
    bad = json.loads(json.dumps(NAME_EMAIL))
    bad["graders"]["email"]["operation"] = "equals"
    p = dump(tmp_path, bad)
    with pytest.raises(InputError) as exc:
        load_grader(p)
    line = next(i for i, text in enumerate(p.read_text().splitlines(), 1) if '"operation"' in text)
    assert str(exc.value).startswith(f"{p}:{line}: graders.email.operation: ")
    assert exc.value.field == "graders.email.operation"


def test_bad_nested_field_inside_a_job(tmp_path):
    bad = json.loads(json.dumps(NAME_EMAIL))
    bad["graders"]["name"]["evaluation_metric"] = "jaccard"
    p = dump(tmp_path, {"method": {"type": "reinforcement", "reinforcement": {"grader": bad}}})
    with pytest.raises(InputError) as exc:
        load_grader(p)
    assert exc.value.field == "method.reinforcement.grader.graders.name.evaluation_metric"


@pytest.mark.parametrize("change, field, fragment", [
    ({"graders": {"inner": NAME_EMAIL}}, "graders.inner.type", "cannot contain another multi"),
    ({"graders": {"bad-key": NAME_EMAIL["graders"]["email"]}}, "graders.bad-key", "must be an identifier"),
    ({"graders": {"1st": NAME_EMAIL["graders"]["email"]}}, "graders.1st", "must be an identifier"),
    ({"graders": {"email": {"type": "regex", "name": "r"}}}, "graders.email.type", "unknown grader type 'regex'"),
    ({"graders": {"email": {**NAME_EMAIL["graders"]["email"], "reference": "{{ mail }}"}}},
     "graders.email.reference", "must start with item. or sample."),
    ({"graders": {"email": "eq"}}, "graders.email", "a grader must be a JSON object"),
    ({"graders": {}}, "graders", "at least one grader"),
    ({"graders": [NAME_EMAIL["graders"]["email"]]}, "graders", "an object mapping a variable name"),
    ({"calculate_output": "(name + mail) / 2"}, "calculate_output", "unknown name 'mail' at column 9"),
    ({"calculate_output": "name ** 2"}, "calculate_output", "use ^ for a power"),
    ({"calculate_output": "name_grader + email_grader"}, "calculate_output", "unknown name 'name_grader'"),
    ({"calculate_output": ""}, "calculate_output", "the formula is empty"),
    ({"calculate_output": 3}, "calculate_output", "valid string"),
    ({"invalid_grade": 0}, "invalid_grade", "unknown key (expected one of type, name, graders, calculate_output)"),
])
def test_config_errors(tmp_path, change, field, fragment):
    obj = {**NAME_EMAIL, **change}
    with pytest.raises(InputError) as exc:
        load_grader(dump(tmp_path, obj))
    assert exc.value.field == field, str(exc.value)
    assert fragment in str(exc.value)


def test_missing_calculate_output(tmp_path):
    obj = {k: v for k, v in NAME_EMAIL.items() if k != "calculate_output"}
    with pytest.raises(InputError, match="calculate_output: Field required"):
        load_grader(dump(tmp_path, obj))


def test_config_round_trips_through_model_dump():
    config = parse_config(NAME_EMAIL)
    assert isinstance(config, MultiConfig)
    dumped = config.model_dump(exclude_none=True)
    assert dumped["graders"]["email"]["operation"] == "eq"          # sub-grader fields survive dumping
    assert dumped["graders"]["name"]["evaluation_metric"] == "fuzzy_match"
    assert parse_config(dumped) == config


def test_config_built_in_code_from_parsed_sub_graders():
    email = parse_config(NAME_EMAIL["graders"]["email"])
    config = MultiConfig(type="multi", name="m", graders={"e": email}, calculate_output="e * 2")
    assert grade(config.model_dump(), make_sample('{"email": "a"}'), {"email": "a"}).score == 2.0


# --- command line ---------------------------------------------------------------------------------------

def test_grade_command_with_a_multi_grader(tmp_path):
    ds = tmp_path / "items.jsonl"
    ds.write_text(json.dumps({"id": "q1", "messages": [{"role": "user", "content": "who?"}],
                              "name": "John Smith", "email": "john@example.com"}) + "\n")
    outs = tmp_path / "outputs.jsonl"
    outs.write_text("\n".join(json.dumps({"item_id": "q1", "epoch": e, "output_text": t}) for e, t in [
        (1, '{"name": "John Smith", "email": "john@example.com"}'),
        (2, '{"name": "John Smith", "email": "nope"}'),
        (3, '{"name": "John Smith"}')]) + "\n")
    out = tmp_path / "records.jsonl"
    res = CliRunner().invoke(app, ["grade", "-d", str(ds), "-g", str(dump(tmp_path, NAME_EMAIL)), "--outputs", str(outs),
                                   "--out", str(out), "--format", "json", "--max-error-rate", "1"])  # one error: on purpose
    assert res.exit_code == 0, res.output
    records = {r["epoch"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert records[1]["score"] == 1.0 and records[1]["sub_scores"] == {"name": 1.0, "email": 1.0}
    assert records[2]["score"] == 0.5 and records[2]["error"] is None
    assert records[3]["score"] == 0.0 and records[3]["error"]["type"] == INVALID_VARIABLE
    assert records[3]["error"]["message"].startswith("graders.email: ")
    model = json.loads(res.output)["models"][0]
    assert model["errors"] == 1


@pytest.mark.slow
def test_validate_grader_subprocess_reports_the_nested_field(tmp_path):
    bad = json.loads(json.dumps(NAME_EMAIL))
    bad["graders"]["email"]["operation"] = "equals"
    p = dump(tmp_path, {"grader": bad})
    exe = Path(sys.executable).with_name("rfteval")  # the installed console script
    proc = subprocess.run([str(exe), "validate", "grader", str(p)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert "grader.graders.email.operation: Input should be 'eq', 'ne', 'like' or 'ilike'" in lines[0]
    assert lines[0].startswith(f"rfteval: {p}:")


def test_validate_grader_accepts_the_examples(tmp_path):
    for obj in (NAME_EMAIL, TOOL_CALL):
        res = CliRunner().invoke(app, ["validate", "grader", str(dump(tmp_path, obj))])
        assert res.exit_code == 0, res.output
        assert obj["calculate_output"] in res.output


def test_multi_key_must_be_an_ascii_variable_name():
    from rfteval.errors import InputError
    from rfteval.graders.loader import parse_config

    sub = {"type": "string_check", "name": "s", "input": "{{ sample.output_text }}", "reference": "x",
           "operation": "eq"}
    with pytest.raises(InputError, match="must be an identifier"):
        parse_config({"type": "multi", "name": "m", "graders": {"café": sub}, "calculate_output": "café"})


def test_multi_graders_may_be_one_grader_object_as_in_the_api_reference():
    from rfteval.graders.loader import parse_config

    sub = {"type": "string_check", "name": "exact", "input": "{{ sample.output_text }}", "reference": "x",
           "operation": "eq"}
    config = parse_config({"type": "multi", "name": "m", "graders": sub, "calculate_output": "exact"})
    assert list(config.graders) == ["exact"] and config.graders["exact"].operation == "eq"
