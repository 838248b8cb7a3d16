import json

import pytest
from typer.testing import CliRunner

from rfteval.cli.app import app
from rfteval.data.sample import make_sample
from rfteval.errors import InputError
from rfteval.graders import GradingEngine, load_grader, parse_config
from rfteval.graders.base import INVALID_VARIABLE, OTHER, REGISTRY
from rfteval.graders.text_similarity import TextSimilarityConfig

BASE = {"type": "text_similarity", "name": "sim", "input": "{{sample.output_text}}",
        "reference": "{{item.reference_answer}}", "evaluation_metric": "fuzzy_match"}


def grade(output: str, answer: str, **overrides):
    cfg = parse_config({**BASE, **overrides})
    with GradingEngine(cfg) as engine:
        return engine.grade(make_sample(output), {"reference_answer": answer})


def test_registered():
    assert REGISTRY["text_similarity"].config is TextSimilarityConfig
    assert not REGISTRY["text_similarity"].extension


def test_openai_example_fuzzy_wuzzy():
    # The graders API reference pair. LCS = "fuzzy wuzzy " (12) + "a  ar" (5) = 17 of 22 + 23 characters;
    # indel distance 45 - 34 = 11; fuzz.ratio = 1 - 11/45
    r = grade("fuzzy wuzzy was a bear", "fuzzy wuzzy had no hair")
    assert r.score == pytest.approx(34 / 45)
    assert r.passed is None and r.error is None   # no pass_threshold: no verdict


@pytest.mark.parametrize("metric, expected", [
    ("fuzzy_match", 1 - 4 / 42),
    ("bleu", (5 / 6 * 3 / 5 * 2 / 4 * 1 / 3) ** 0.25),
    ("gleu", 11 / 18),
    ("meteor", 5 / 6 * (1 - 0.5 * (3 / 5) ** 3)),
    ("rouge_1", 5 / 6), ("rouge_2", 3 / 5), ("rouge_3", 1 / 2), ("rouge_4", 1 / 3), ("rouge_5", 0.0),
    ("rouge_l", 5 / 6),
])
def test_each_metric_through_the_grader(metric, expected):
    r = grade("the cat sat on the mat", "the cat sat on a mat", evaluation_metric=metric)
    assert r.score == pytest.approx(expected)
    assert r.error is None


@pytest.mark.parametrize("threshold, passed", [(0.9, True), (0.905, False), (1 - 4 / 42, True), (0.0, True)])
def test_pass_threshold(threshold, passed):
    r = grade("the cat sat on the mat", "the cat sat on a mat", pass_threshold=threshold)
    assert r.passed is passed
    assert r.score == pytest.approx(1 - 4 / 42)   # the threshold never changes the score


def test_cosine_loads_but_grades_as_an_error():
    cfg = parse_config({**BASE, "evaluation_metric": "cosine", "pass_threshold": 0.5})
    assert cfg.evaluation_metric == "cosine"
    with GradingEngine(cfg) as engine:
        results = engine.grade_batch([(make_sample("a"), {"reference_answer": "a"})] * 2)
    for r in results:
        assert r.score == 0.0 and r.error is not None
        assert r.error.type == OTHER
        assert "embeddings" in r.error.message and "evals" in r.error.message


def test_missing_template_path_is_invalid_variable():
    r = grade("x", "y", reference="{{item.answer}}")
    assert r.score == 0.0 and r.error is not None
    assert r.error.type == INVALID_VARIABLE
    assert "item.answer" in r.error.message


def test_templates_and_non_string_values():
    cfg = parse_config({**BASE, "input": "{{sample.output_json.total}}", "reference": "{{item.expected.total}}"})
    with GradingEngine(cfg) as engine:
        r = engine.grade(make_sample('{"total": 42}'), {"expected": {"total": 42}})
    assert r.score == 1.0   # both render as the JSON text "42"


def test_unicode_and_empty():
    assert grade("日本語", "日本語").score == 1.0
    assert grade("café", "cafe").score == pytest.approx(0.75)
    assert grade("", "").score == 1.0
    assert grade("", "something").score == 0.0
    assert grade("", "", evaluation_metric="bleu").score == 1.0


def test_a_metric_crash_is_one_error_not_a_crashed_batch(monkeypatch):
    from rfteval.graders import metrics

    def boom(text, reference):
        if text == "bad":
            raise RuntimeError("library bug")
        return 0.5

    monkeypatch.setitem(metrics.METRICS, "bleu", boom)
    cfg = parse_config({**BASE, "evaluation_metric": "bleu"})
    with GradingEngine(cfg) as engine:
        good, bad = engine.grade_batch([(make_sample("ok"), {"reference_answer": "x"}),
                                        (make_sample("bad"), {"reference_answer": "x"})])
    assert good.score == 0.5 and good.error is None
    assert bad.score == 0.0 and bad.error.type == OTHER and "RuntimeError: library bug" in bad.error.message


@pytest.mark.parametrize("change, fragment", [
    ({"evaluation_metric": "rouge_6"}, "evaluation_metric: Input should be"),
    ({"evaluation_metric": "levenshtein"}, "evaluation_metric: Input should be"),
    ({"pass_threshold": "high"}, "pass_threshold: "),
    ({"input": "{{ output_text }}"}, "input: "),
    ({"metric": "bleu"}, "metric: unknown key (did you mean `evaluation_metric`?)"),
])
def test_config_errors_name_the_field(tmp_path, change, fragment):
    p = tmp_path / "g.json"
    p.write_text(json.dumps({**BASE, **change}, indent=2))
    with pytest.raises(InputError) as exc:
        load_grader(p)
    assert fragment in str(exc.value) and str(exc.value).startswith(str(p))


def test_missing_metric_is_required(tmp_path):
    p = tmp_path / "g.json"
    p.write_text(json.dumps({k: v for k, v in BASE.items() if k != "evaluation_metric"}))
    with pytest.raises(InputError, match="evaluation_metric: Field required"):
        load_grader(p)


def test_grade_command_with_text_similarity(tmp_path):
    ds = tmp_path / "items.jsonl"
    ds.write_text("\n".join(json.dumps({"id": f"q{i}", "messages": [{"role": "user", "content": "x"}],
                                        "reference_answer": ref}) for i, ref in enumerate(["kitten", "abc"])) + "\n")
    grader = tmp_path / "g.json"
    grader.write_text(json.dumps({**BASE, "pass_threshold": 0.5}))
    outs = tmp_path / "outputs.jsonl"
    outs.write_text('{"item_id": "q0", "output_text": "sitting"}\n{"item_id": "q1", "output_text": "abc"}\n')
    out = tmp_path / "records.jsonl"
    res = CliRunner().invoke(app, ["grade", "-d", str(ds), "-g", str(grader), "--outputs", str(outs), "--out", str(out),
                                   "--format", "json"])
    assert res.exit_code == 0, res.output
    per_item = {r["item_id"]: r["mean"] for r in json.loads(res.output)["models"][0]["per_item"]}
    assert per_item == pytest.approx({"q0": 8 / 13, "q1": 1.0})
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted((r["item_id"], r["passed"]) for r in records) == [("q0", True), ("q1", True)]
