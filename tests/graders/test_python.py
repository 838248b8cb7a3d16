"""The `python` grader: config validation, grading through the engine, and the published sources run unchanged."""

from __future__ import annotations

import json
import subprocess
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from rfteval.cli.app import app
from rfteval.data.sample import make_sample
from rfteval.errors import InputError
from rfteval.graders import GradeOptions, GradingEngine, load_grader, parse_config
from rfteval.graders.base import PYTHON_RUNTIME, PYTHON_TIMEOUT, REGISTRY
from rfteval.graders.python import MAX_SOURCE_BYTES, PythonConfig, PythonGrader
from rfteval.sandbox import SandboxPolicy
from tests.support import REPO

SHARED = REPO.parent / "shared"
SEEDS = SHARED / "seed-graders"
needs_seeds = pytest.mark.skipif(not SEEDS.is_dir(), reason=f"published grader sources not found at {SEEDS}")


def config(source: str, **extra: Any) -> PythonConfig:
    return parse_config({"type": "python", "name": "py", "source": source, **extra})  # type: ignore[return-value]


def problem(source: str) -> str:
    with pytest.raises(InputError) as info:
        config(source)
    return str(info.value)


# ---------------------------------------------------------------- validation


def test_registered() -> None:
    assert REGISTRY["python"].config is PythonConfig
    assert not REGISTRY["python"].extension


def test_a_valid_config_keeps_every_field() -> None:
    cfg = config("def grade(sample, item) -> float:\n    return 1.0\n", image_tag="2025-05-08", pass_threshold=0.5)
    assert (cfg.type, cfg.name, cfg.image_tag, cfg.pass_threshold) == ("python", "py", "2025-05-08", 0.5)


def test_syntax_error_names_the_source_line() -> None:
    text = problem("import math\n\ndef grade(sample, item):\n    retrun 1.0\n")
    assert "source:" in text and "SyntaxError at source line 4" in text and "retrun 1.0" in text


def test_curly_quotes_in_the_source_say_to_straighten_them_as_json_and_toml_do() -> None:
    """Python named the character ("invalid character '\u201c' (U+201C)") but, unlike a JSON or TOML file's error,
    did not say what to do."""
    text = problem("def grade(sample, item):\n    return float(sample[\u201coutput_text\u201d] == 'a')\n")
    assert "SyntaxError at source line 2: invalid character '\u201c' (U+201C)" in text
    assert text.endswith("; contains curly quotes (\u201c at column 25): replace them with straight quotes"), text


def test_curly_quotes_inside_a_string_are_valid_and_not_blamed_for_another_error() -> None:
    text = problem("def grade(sample, item):\n    s = '\u201cquoted\u201d'\n    retrun 1.0\n")
    assert "SyntaxError at source line 3" in text and "curly" not in text


def test_missing_grade() -> None:
    assert "must define a top-level function grade(sample, item)" in problem("def score(sample, item):\n    return 1\n")


def test_grade_nested_in_a_class_or_function_does_not_count() -> None:
    nested = "class G:\n    def grade(self, sample, item):\n        return 1\n"
    assert "must define a top-level function grade" in problem(nested)


@pytest.mark.parametrize("signature, words", [
    ("def grade(sample):", "1 positional argument"),
    ("def grade():", "0 positional argument"),
    ("def grade(sample, item, extra):", "3 required arguments"),
    ("def grade(sample, item, *, strict):", "keyword-only argument(s) strict"),
    ("async def grade(sample, item):", "not async"),
])
def test_grade_must_take_two_positional_arguments(signature: str, words: str) -> None:
    text = problem(f"{signature}\n    return 1.0\n")
    assert "source line 1" in text and words in text


@pytest.mark.parametrize("source", [
    "def grade(sample, item, extra=None):\n    return 1.0\n",
    "def grade(*args):\n    return 1.0\n",
    "def grade(sample, item, /):\n    return 1.0\n",
    "def _g(s, i):\n    return 1.0\ngrade = _g\n",
    "try:\n    import numpy\nexcept ImportError:\n    pass\ndef grade(sample, item):\n    return 1.0\n",
])
def test_other_ways_to_define_grade_are_accepted(source: str) -> None:
    assert config(source).source == source  # unchanged


def test_the_last_definition_wins() -> None:
    assert "1 positional" in problem("def grade(s, i):\n    return 1\ndef grade(s):\n    return 1\n")
    config("def grade(s):\n    return 1\ndef grade(s, i):\n    return 1\n")


def test_too_large() -> None:
    body = "def grade(sample, item):\n    return 1.0\n"
    filler = "#" * (MAX_SOURCE_BYTES - len(body) - 1) + "\n"
    assert len((filler + body).encode()) == MAX_SOURCE_BYTES
    assert "256 kB" in problem(filler + body)  # OpenAI: "less than 256kB": exactly 256 KiB is too large
    config(filler[:-2] + "\n" + body)  # one byte under the limit is fine


def test_unknown_fields_are_refused() -> None:
    with pytest.raises(InputError) as info:
        parse_config({"type": "python", "name": "py", "source": "def grade(s, i):\n    return 1\n", "sauce": 1})
    assert "sauce" in str(info.value)


def test_loader_names_file_line_and_field(tmp_path: Path) -> None:
    path = tmp_path / "grader.json"
    path.write_text('{\n  "type": "python",\n  "name": "py",\n  "source": "def grade(s, i):\\n    return (\\n"\n}\n')
    with pytest.raises(InputError) as info:
        load_grader(path)
    text = str(info.value)
    assert text.startswith(f"{path}:4: source: SyntaxError at source line 2")


def test_building_starts_no_process() -> None:
    with GradingEngine(config("def grade(s, i):\n    return 1.0\n")) as engine:
        assert isinstance(engine.grader, PythonGrader)
        assert engine.ctx._pool is None


# ---------------------------------------------------------------- grading


@pytest.fixture(scope="module")
def engine_options() -> GradeOptions:
    return GradeOptions(sandbox=SandboxPolicy(timeout_s=2.0), python_workers=2)


def test_scores_and_pass_threshold(engine_options: GradeOptions) -> None:
    source = "def grade(sample, item):\n    return len(sample['output_text']) / item['n']\n"
    pairs = [(make_sample("abcd"), {"n": 8}), (make_sample("abcdefgh"), {"n": 10}), (make_sample("a"), {"n": 0})]
    with GradingEngine(config(source, pass_threshold=0.6), engine_options) as engine:
        results = engine.grade_batch(pairs)
    assert [r.score for r in results] == [0.5, 0.8, 0.0]
    assert [r.passed for r in results] == [False, True, False]
    assert results[2].error.type == PYTHON_RUNTIME and "ZeroDivisionError" in results[2].error.message


@pytest.mark.slow
def test_without_threshold_passed_is_not_set(engine_options: GradeOptions) -> None:
    with GradingEngine(config("def grade(s, i):\n    return 1.0\n"), engine_options) as engine:
        assert engine.grade(make_sample("x"), {}).passed is None


@pytest.mark.slow
def test_timeout_comes_from_the_options() -> None:
    source = "import time\ndef grade(sample, item):\n    time.sleep(item['s'])\n    return 1.0\n"
    with GradingEngine(config(source), GradeOptions(sandbox=SandboxPolicy(timeout_s=0.5), python_workers=1)) as engine:
        slow, fast = engine.grade_batch([(make_sample(""), {"s": 30}), (make_sample(""), {"s": 0})])
    assert slow.error.type == PYTHON_TIMEOUT and "0.5 s" in slow.error.message
    assert fast.error is None and fast.score == 1.0


@pytest.mark.slow
def test_grader_sees_the_sample_openai_builds(engine_options: GradeOptions) -> None:
    source = (
        "def grade(sample, item):\n"
        "    assert sample['output_json'] == {'a': [1, 2]}\n"
        "    assert sample['choices'][0]['message']['content'] == sample['output_text']\n"
        "    assert sample['output_tools'] == []\n"
        "    assert list(sample) == ['output_text', 'output_json', 'output_tools', 'choices', 'output_audio']\n"
        "    assert sample['output_audio'] is None  # OpenAI's dict has the key; a text model gives no audio\n"
        "    assert item['reference_answer'] == {'a': [1, 2]} and item['messages'][0]['role'] == 'user'\n"
        "    return 1.0\n"
    )
    item = {"messages": [{"role": "user", "content": "q"}], "reference_answer": {"a": [1, 2]}}
    with GradingEngine(config(source), engine_options) as engine:
        result = engine.grade(make_sample('{"a": [1, 2]}'), item)
    assert result.error is None and result.score == 1.0


@pytest.mark.slow
def test_a_grader_that_changes_its_item_does_not_change_the_next_call(engine_options: GradeOptions) -> None:
    source = (
        "def grade(sample, item):\n"
        "    expected = item['reference_answer']\n"
        "    hits = 0\n"
        "    for word in sample['output_text'].split():\n"
        "        if word in expected:\n"
        "            expected.remove(word)\n"
        "            hits += 1\n"
        "    return hits / 3\n"
    )
    item = {"reference_answer": ["a", "b", "c"]}
    outputs = ["a b c", "a b", "c", "a b c"] * 30
    with GradingEngine(config(source), GradeOptions(python_workers=1)) as engine:
        results = engine.grade_batch([(make_sample(o), item) for o in outputs])
    assert [r.score for r in results] == [3 / 3, 2 / 3, 1 / 3, 3 / 3] * 30
    assert item == {"reference_answer": ["a", "b", "c"]}  # the caller's copy was never touched


# ---------------------------------------------------------------- the published sources, unchanged


def in_process(source: str) -> Any:
    module = types.ModuleType(f"seed_{abs(hash(source))}")
    sys.modules[module.__name__] = module
    exec(compile(source, "<seed>", "exec"), module.__dict__)
    return module.grade


def chipstack_pairs() -> list[tuple[dict, dict]]:
    ref = [{"name": "clk", "value": "1'b0"}, {"name": "rst", "value": "1'b1"}, {"name": "data", "value": "8'hff"},
           {"name": "data", "value": "8'hff"}]
    outputs = [ref, ref[:2], [], ref + [{"name": "x", "value": "1"}], [{"name": "clk", "value": "1'b1"}]]
    return [(make_sample(json.dumps({"predicted": o})), {"reference_answer": ref}) for o in outputs]


def harvey_pairs() -> list[tuple[dict, dict]]:
    ref = {"passages": ["The court held that the contract was void.", "Damages are limited to direct losses."]}
    outputs = [ref["passages"], ["The court held the contract void."], [], ["Completely unrelated text."]]
    pairs = [(make_sample(json.dumps({"passages": o})), {"reference_answer": ref}) for o in outputs]
    return pairs + [(make_sample("not json"), {"reference_answer": ref}), (make_sample("{}"), {"reference_answer": {}})]


def runloop_pairs() -> list[tuple[dict, dict]]:
    code = ("```typescript src/pay.ts\nimport Stripe from 'stripe';\nconst stripe = new Stripe(key);\n"
            "const c = await stripe.customers.create({ email });\n```")
    item = {"reference_answer": {"ast_greps": [
        {"file_path_mask": "/home/user/testbed/src/", "pattern": "stripe.customers.create($$$)",
         "additional_greps": ["stripe"]},
        {"file_path_mask": "/home/user/testbed/src/", "pattern": "stripe.refunds.create($$$)"}]}}
    outputs = [f"<plan>Create a customer.</plan>\n<code>\n{code}\n</code>", f"<code>{code}</code>",
               f"<plan>p</plan><code>{code}</code> trailing", "<plan>p</plan><code>no blocks</code>", "nothing"]
    return [(make_sample(o), item) for o in outputs]


@needs_seeds
@pytest.mark.parametrize("name, make_pairs", [
    ("chipstack", chipstack_pairs), ("harvey", harvey_pairs), ("runloop", runloop_pairs),
])
@pytest.mark.slow
def test_published_sources_run_unchanged_and_agree_in_process(name: str, make_pairs: Any,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    source = (SEEDS / f"{name}.py").read_text()
    pairs = make_pairs()
    grade = in_process(source)
    expected: list[float | Exception] = []
    for sample, item in pairs:
        try:
            expected.append(float(grade(sample, item)))
        except Exception as exc:  # noqa: BLE001 - what the grader raised is what the pool must report
            expected.append(exc)  # an exception is an error (score 0) through the pool
    capsys.readouterr()
    with GradingEngine(config(source), GradeOptions(python_workers=2)) as engine:
        results = engine.grade_batch(pairs)
    assert capsys.readouterr().out == ""  # the graders' prints never reach the terminal
    for want, got in zip(expected, results, strict=True):
        if isinstance(want, Exception):
            assert got.error is not None and got.error.type == PYTHON_RUNTIME and got.score == 0.0, got
            assert f"raised {type(want).__name__}" in got.error.message, got.error.message
        else:
            assert got.error is None and got.score == want
    assert len(set(expected)) >= 3  # the samples really differ


@needs_seeds
@pytest.mark.slow
def test_runloop_prints_are_kept_per_sample() -> None:
    with GradingEngine(config((SEEDS / "runloop.py").read_text()), GradeOptions(python_workers=1)) as engine:
        good, *_, nothing = engine.grade_batch(runloop_pairs())
    assert good.score == 0.75  # format 1.0, one of two ast-grep patterns found
    assert "global format reward: 1.0" in good.stdout and "Found 1 code blocks" in good.stdout
    assert nothing.stdout == "missing plan or code tags. format reward: 0.0\n"


# ---------------------------------------------------------------- command line


@pytest.fixture
def grader_files(tmp_path: Path) -> Iterator[dict[str, Path]]:
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"type": "python", "name": "len", "source":
                                "def grade(sample, item):\n    print('graded', item['id'])\n"
                                "    return 1.0 if sample['output_text'] == item['reference_answer'] else 0.0\n"}))
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"type": "python", "name": "bad", "source": "def grade(sample, item)\n    return 1\n"}))
    yield {"good": good, "bad": bad, "dir": tmp_path}


def test_cli_validate_reports_a_bad_source_in_one_line(grader_files: dict[str, Path]) -> None:
    result = CliRunner().invoke(app, ["validate", "grader", str(grader_files["bad"])])
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "source: SyntaxError at source line 1" in lines[0]
    assert "Traceback" not in result.output


def test_cli_validate_accepts_a_good_source(grader_files: dict[str, Path]) -> None:
    result = CliRunner().invoke(app, ["validate", "grader", str(grader_files["good"])])
    assert result.exit_code == 0, result.output


@pytest.mark.slow
def test_cli_grade_runs_a_python_grader_in_a_real_process(grader_files: dict[str, Path]) -> None:
    tmp = grader_files["dir"]
    dataset = tmp / "data.jsonl"
    dataset.write_text("".join(json.dumps({"id": f"q{i}", "messages": [{"role": "user", "content": "say hi"}],
                                           "reference_answer": "hi"}) + "\n" for i in range(3)))
    outputs = tmp / "outputs.jsonl"
    outputs.write_text("".join(json.dumps({"item_id": f"q{i}", "output_text": text}) + "\n"
                               for i, text in enumerate(["hi", "hello", "hi"])))
    records_path = tmp / "records.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "rfteval", "grade", "--dataset", str(dataset), "--grader", str(grader_files["good"]),
         "--outputs", str(outputs), "--out", str(records_path), "--format", "json", "--grader-timeout", "5"],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "graded" not in proc.stdout and "graded" not in proc.stderr  # the grader's prints are in the records
    records = [json.loads(line) for line in records_path.read_text().splitlines()]
    assert [(r["item_id"], r["score"], r["error"]) for r in records] == [("q0", 1.0, None), ("q1", 0.0, None),
                                                                         ("q2", 1.0, None)]
    assert [r["grader_stdout"] for r in records] == ["graded q0\n", "graded q1\n", "graded q2\n"]


@pytest.mark.slow
def test_worker_future_flags_do_not_leak_into_graders():
    """The worker module uses `from __future__ import annotations`; an uploaded grader must not inherit it."""
    from rfteval.graders import GradeOptions, GradingEngine, parse_config

    source = ("def grade(sample: dict, item: dict) -> float:\n"
              "    return 1.0 if grade.__annotations__['sample'] is dict else 0.0\n")
    config = parse_config({"type": "python", "name": "ann", "source": source})
    with GradingEngine(config, GradeOptions(python_workers=1)) as engine:
        result = engine.grade({"output_text": ""}, {})
    assert result.error is None and result.score == 1.0
