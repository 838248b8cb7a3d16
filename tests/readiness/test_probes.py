"""Grader probes against the published ChipStack, Harvey and Runloop graders and a deliberately weak one."""

from __future__ import annotations

import json

import pytest

from rfteval.data.dataset import Item
from rfteval.graders.base import GradeOptions
from rfteval.graders.loader import parse_config
from rfteval.graders.template import TemplateError
from rfteval.readiness.probes import (
    PROBES,
    _set_path,
    fill_all,
    infer_reference_template,
    probe_samples,
    prompt_text,
    python_access_paths,
    python_label_constants,
    render_reference,
    run_probes,
)
from tests.support import REPO

ROOT = REPO
SHARED = REPO.parent / "shared"
SEEDS = SHARED / "seed-graders"
OPTIONS = GradeOptions(python_workers=2)
CHEATS = [p.name for p in PROBES if p.expect == "floor"]


def seed(name: str) -> str:
    path = SEEDS / f"{name}.py"
    if not path.exists():
        pytest.skip(f"{path} is absent (the published grader sources live outside the project)")
    return path.read_text(encoding="utf-8")


def python_config(name: str, source: str):
    return parse_config({"type": "python", "name": name, "source": source})


def statuses(report) -> dict[str, str]:
    return {p.name: p.status for p in report.probes}


def by_name(report, name):
    return next(p for p in report.probes if p.name == name)


# ---------------------------------------------------------------- synthetic datasets in the published formats

CHIP_ITEMS = {
    f"cs{i}": {
        "messages": [{"role": "user", "content": f"Bind the parameters of vip_{i}: " + ", ".join(names)}],
        "reference_answer": [{"name": n, "value": v} for n, v in zip(names, values)],
    }
    for i, (names, values) in enumerate([
        (["DATA_WIDTH", "ADDR_WIDTH", "ID_WIDTH"], ["32", "16", "4"]),
        (["CLK_FREQ", "BAUD"], ["100000000", "115200"]),
        (["LANES", "GEN", "MAX_PAYLOAD"], ["4", "3", "256"]),
        (["DEPTH", "WIDTH"], ["1024", "8"]),
    ])
}

DOCS = [
    "The lessee shall pay rent on the first day of each month. Late payments incur a fee of five percent of the "
    "rent due. The landlord may terminate the lease after two missed payments. Notices must be delivered in "
    "writing to the address above.",
    "The parties agree to binding arbitration in Delaware. Each party bears its own costs of the arbitration. The "
    "arbitrator's decision is final and may be entered in any court. This clause survives termination.",
    "Confidential information excludes information that is publicly available. The receiving party must protect "
    "confidential information with reasonable care. Obligations under this section last for three years.",
]
HARVEY_ITEMS = {
    f"hv{i}": {"messages": [{"role": "user", "content": "Cite the passages that answer the question.\n\n" + doc}],
               "reference_answer": {"passages": [doc.split(". ")[1] + "."]}}
    for i, doc in enumerate(DOCS)
}

RUNLOOP_ITEMS = {
    f"rl{i}": {
        "messages": [{"role": "user", "content": f"Write src/{res}.ts that creates a Stripe {res}."}],
        "reference_answer": {"ast_greps": [{"file_path_mask": "/home/user/testbed/src/", "pattern":
                                            f"stripe.{res}.create($$$)", "additional_greps": [extra]}]},
        "reference_output": f"<plan>Create the {res} with the SDK.</plan><code>```typescript src/{res}.ts\n"
                            f"const made = await stripe.{res}.create({{ {extra}: input }});\n```</code>",
    }
    for i, (res, extra) in enumerate([("customers", "email"), ("charges", "amount"), ("refunds", "charge")])
}

SENTIMENT = ["positive", "negative", "neutral", "positive", "negative", "positive"]
LABEL_ITEMS = {
    f"s{i}": {"messages": [{"role": "user", "content": f"Classify as positive, negative or neutral: review {i}"}],
              "reference_answer": label}
    for i, label in enumerate(SENTIMENT)
}


def string_check(op: str):
    return parse_config({"type": "string_check", "name": op, "input": "{{sample.output_text}}",
                         "reference": "{{item.reference_answer}}", "operation": op})


# ---------------------------------------------------------------- how a reference becomes an output


def test_access_paths_of_the_published_graders():
    assert python_access_paths(seed("chipstack")) == ([("output_json", "predicted")], [("reference_answer",)])
    assert python_access_paths(seed("harvey")) == ([("output_json", "passages")], [("reference_answer", "passages")])
    assert python_access_paths(seed("runloop")) == ([("output_text",)], [("reference_answer", "ast_greps")])


def test_access_paths_follow_aliases_and_renamed_arguments():
    src = "def grade(s, it):\n    out = s.get('output_json') or {}\n    ans = out['answer']\n" \
          "    ref = it['reference_answer']\n    return float(ans == ref['answer'])\n"
    assert python_access_paths(src) == ([("output_json", "answer")], [("reference_answer", "answer")])


def test_inferred_templates():
    first = [CHIP_ITEMS["cs0"]]
    assert infer_reference_template(python_config("c", seed("chipstack")), first)[0] == \
        {"predicted": "{{item.reference_answer}}"}
    assert infer_reference_template(python_config("h", seed("harvey")), first)[0] == \
        {"passages": "{{item.reference_answer.passages}}"}
    tpl, how = infer_reference_template(python_config("r", seed("runloop")), [RUNLOOP_ITEMS["rl0"]])
    assert tpl == "{{item.reference_output}}" and "reference_output" in how
    no_text = {k: v for k, v in RUNLOOP_ITEMS["rl0"].items() if k != "reference_output"}
    tpl, how = infer_reference_template(python_config("r", seed("runloop")), [no_text])
    assert tpl is None and "--reference-template" in how
    assert infer_reference_template(string_check("eq"), [LABEL_ITEMS["s0"]])[0] == "{{item.reference_answer}}"
    multi = parse_config({"type": "multi", "name": "m", "calculate_output": "(a + b) / 2", "graders": {
        "a": {"type": "string_check", "name": "a", "input": "{{sample.output_json.name}}",
              "reference": "{{item.name}}", "operation": "eq"},
        "b": {"type": "string_check", "name": "b", "input": "{{ sample.output_json.contact.email }}",
              "reference": "{{item.email}}", "operation": "eq"}}})
    assert infer_reference_template(multi, [{"name": "x", "email": "y"}])[0] == \
        {"name": "{{item.name}}", "contact": {"email": "{{item.email}}"}}


def test_render_reference_keeps_types_and_fills_text():
    item = {"reference_answer": {"codes": ["A1", "B2"], "n": 3}}
    assert render_reference({"c": "{{item.reference_answer.codes}}"}, item) == {"c": ["A1", "B2"]}
    assert render_reference("{{ item.reference_answer.n }}", item) == 3
    assert render_reference("n={{item.reference_answer.n}}; {{item.reference_answer.codes[1]}}", item) == "n=3; B2"
    with pytest.raises(TemplateError, match="item"):
        render_reference("{{sample.output_text}}", item)


def test_fill_all_shapes():
    ref = [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]
    other = [[{"name": "C", "value": "3"}]]
    filled = fill_all(ref, other, "")
    assert filled[:2] == ref
    assert len(filled) == 9  # every name × every value: 3 × 3
    assert {"name": "A", "value": "3"} in filled and {"name": "C", "value": "1"} in filled
    assert fill_all(["spam"], [["fraud"], ["none"]], "", labels=["hate", "spam"]) == \
        ["spam", "fraud", "none", "hate"]
    passages = fill_all(["Rent is due on the first day."], [], "Rent is due on the first day. Late fees are five "
                        "percent of the rent. Notices go in writing to the landlord.")
    assert "Late fees are five percent of the rent." in passages and len(passages) == 3
    assert fill_all("positive", ["negative", "neutral", "positive"], "") == "negative, neutral, positive"
    assert fill_all({"ok": True, "label": "yes"}, [{"label": "no"}], "") == {"ok": True, "label": "no, yes"}


def test_label_constants_from_python_source():
    src = "LABELS = ('none', 'spam', 'fraud')\nTHRESHOLD = 3\nNAMES = ['a', 'b']\ndef grade(s, i):\n    return 0\n"
    assert python_label_constants(src) == ["none", "spam", "fraud"]


def test_probe_samples_cover_every_probe():
    items = list(LABEL_ITEMS.values())
    samples = probe_samples("s0", items[0], "{{item.reference_answer}}", items[1:], lambda p: [], seed=1)
    assert set(samples) == {p.name for p in PROBES}
    assert samples["empty"]["output_text"] == "" and samples["master_key_colon"]["output_text"] == ":"
    assert samples["prompt_echo"]["output_text"] == items[0]["messages"][0]["content"]
    assert samples["reference"]["output_text"] == "positive"
    assert samples["wrong_answer"]["output_text"] == "negative"
    assert len(samples["long_output"]["output_text"]) >= 20000
    assert samples["wrong_shape_json"]["output_json"] is not None
    assert isinstance(samples["reference_reordered"], str)  # a label has nothing to reorder
    again = probe_samples("s0", items[0], "{{item.reference_answer}}", items[1:], lambda p: [], seed=1)
    assert again["random_text"] == samples["random_text"]


def test_prompt_text_reads_the_last_user_message_whatever_the_item_holds():
    parts = {"messages": [{"role": "user", "content": "first"}, {"role": "assistant", "content": "reply"},
                          {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image"},
                                                       {"type": "text", "text": 7}, {"type": "text", "text": "b"}]}]}
    assert prompt_text(parts) == "a\n\nb"  # a part without text reads as ""; one whose text is no string, not at all
    assert prompt_text({"messages": "not a list"}) == "" and prompt_text({}) == ""
    assert prompt_text({"messages": [{"role": "user", "content": None}]}) == ""


def test_run_probes_takes_items_pairs_or_a_mapping_alike():
    items = [Item(iid, n, data) for n, (iid, data) in enumerate(LABEL_ITEMS.items(), 1)]
    shapes = {"items": items, "pairs": [(it.id, it.data) for it in items], "mapping": dict(LABEL_ITEMS),
              "mapping of items": {it.id: it for it in items}}
    reports = {name: run_probes(string_check("eq"), shape, only=["reference", "empty"]) for name, shape in shapes.items()}
    for name, report in reports.items():
        assert report.n_items == len(LABEL_ITEMS), name
        assert by_name(report, "reference").scores == dict.fromkeys(LABEL_ITEMS, 1.0), name


def test_a_template_with_a_value_where_an_object_must_go_is_refused():
    template: dict = {"a": "{{item.x}}"}
    with pytest.raises(TypeError, match="'a' holds a str"):
        _set_path(template, ["a", "b"], "{{item.y}}")
    _set_path(template, ["c", "d"], "{{item.z}}")
    assert template == {"a": "{{item.x}}", "c": {"d": "{{item.z}}"}}


# ---------------------------------------------------------------- the published graders


def test_chipstack_resists_every_cheat_including_over_applying():
    report = run_probes(python_config("chipstack", seed("chipstack")), CHIP_ITEMS, options=OPTIONS)
    st = statuses(report)
    # text cheats make the published source raise (output_json is None): grading errors, which say nothing of the
    # cheat, so those probes are inconclusive; every cheat it did score, it held
    assert all(st[name] in ("ok", "inconclusive") for name in CHEATS), st
    assert st["fill_all"] == st["wrong_answer"] == "ok"
    assert not report.flagged and report.outcome == "inconclusive"
    for name in ("reference", "reference_reordered", "reference_reformatted"):
        assert by_name(report, name).min == 1.0
    fill = by_name(report, "fill_all")
    names = {e["name"] for it in CHIP_ITEMS.values() for e in it["reference_answer"]}
    values = {e["value"] for it in CHIP_ITEMS.values() for e in it["reference_answer"]}
    n_pred = len(names) * len(values)  # every name of the dataset × every value: the reference pairs among them
    for iid, item in CHIP_ITEMS.items():
        n_ref = len(item["reference_answer"])
        assert fill.scores[iid] == pytest.approx(2 * n_ref / (n_pred + n_ref))  # F1: precision n_ref / n_pred
    empty = by_name(report, "empty")
    assert empty.n_errors == empty.n_graded == len(CHIP_ITEMS) and empty.scores == {}
    assert empty.error_types == {"python_grader_runtime_error": len(CHIP_ITEMS)}
    assert empty.status_text == f"inconclusive: {len(CHIP_ITEMS)} grading errors (python_grader_runtime_error ×4)"


@pytest.mark.slow
def test_harvey_gives_credit_for_citing_everything():
    report = run_probes(python_config("harvey", seed("harvey")), HARVEY_ITEMS, options=OPTIONS)
    st = statuses(report)
    assert all(st[n] == "ok" for n in CHEATS if n not in ("fill_all", "wrong_answer")), st
    assert by_name(report, "reference").min == 1.0
    fill = by_name(report, "fill_all")
    assert fill.status == "flag" and sorted(fill.flagged_items) == sorted(HARVEY_ITEMS)
    assert 0.25 < fill.min < 1.0  # fuzzy precision rewards unrelated sentences
    assert by_name(report, "wrong_answer").status == "flag"  # another item's passage still earns fuzzy credit


@pytest.mark.slow
def test_runloop_pays_half_for_the_right_format():
    report = run_probes(python_config("runloop", seed("runloop")), RUNLOOP_ITEMS, options=OPTIONS)
    st = statuses(report)
    assert by_name(report, "reference").min == 1.0
    assert all(st[n] == "ok" for n in CHEATS if n != "wrong_answer"), st
    wrong = by_name(report, "wrong_answer")
    assert wrong.status == "flag" and wrong.min == wrong.max == 0.5  # format 1.0, ast-grep 0: (1 + 0) / 2
    assert by_name(report, "fill_all").max == pytest.approx(0.2)  # several plans and codes: stray tags
    # without a reference_output, a template supplies one
    bare = {k: {f: v for f, v in it.items() if f != "reference_output"} for k, it in RUNLOOP_ITEMS.items()}
    tpl = ("<plan>Use the SDK.</plan><code>```ts src/index.ts\n"
           "const x = {{item.reference_answer.ast_greps[0].pattern}};"
           " // {{item.reference_answer.ast_greps[0].additional_greps}}\n```</code>")
    given = run_probes(python_config("runloop", seed("runloop")), bare, reference_template=tpl, options=OPTIONS)
    assert given.template_source == "given" and by_name(given, "reference").min == 1.0
    skipped = run_probes(python_config("runloop", seed("runloop")), bare, options=OPTIONS, only=["reference"])
    assert by_name(skipped, "reference").status == "skipped" and "reference probes skipped" in skipped.notes[0]


@pytest.mark.slow
def test_ready_made_chipstack_grader_on_its_dataset():
    grader, data = ROOT / "graders" / "chipstack.json", ROOT / "datasets" / "chipstack" / "items.jsonl"
    from rfteval.data.dataset import load_dataset
    from rfteval.graders.loader import load_grader

    report = run_probes(load_grader(grader), load_dataset(data).items, options=OPTIONS)
    assert not report.flagged, [(p.name, p.flagged_items) for p in report.flags]
    assert by_name(report, "reference").min == 1.0


# ---------------------------------------------------------------- weak and strong string graders


def test_substring_grader_is_flagged():
    report = run_probes(string_check("ilike"), LABEL_ITEMS)
    st = statuses(report)
    assert st["fill_all"] == "flag" and st["prompt_echo"] == "flag"  # every label listed; the prompt lists them
    assert by_name(report, "fill_all").flagged_items == list(LABEL_ITEMS)
    assert report.flagged
    assert st["reference"] == "ok" and st["empty"] == "ok" and st["wrong_answer"] == "ok"


def test_exact_grader_holds_but_is_brittle_to_whitespace():
    report = run_probes(string_check("eq"), LABEL_ITEMS)
    st = statuses(report)
    assert all(st[n] == "ok" for n in CHEATS), st
    assert st["reference"] == "ok" and st["reference_reformatted"] == "warning"
    assert not report.flagged and [p.name for p in report.warnings] == ["reference_reformatted"]


@pytest.mark.slow
def test_margin_moves_the_flag_line():
    report = run_probes(python_config("harvey", seed("harvey")), HARVEY_ITEMS, options=OPTIONS, margin=0.9,
                        only=["fill_all"])
    assert by_name(report, "fill_all").status == "ok"


def test_model_grader_without_a_judge_is_inconclusive():
    judge = parse_config({"type": "score_model", "name": "j", "model": "m", "input": [
        {"role": "user", "content": "Reference {{item.reference_answer}}; answer {{sample.output_text}}"}]})
    report = run_probes(judge, LABEL_ITEMS, only=["empty", "reference"])
    assert any("inconclusive" in n for n in report.notes)
    # errors score 0, below the maximum, but a grading error is no grade: neither a flag nor a pass
    assert statuses(report) == {"empty": "inconclusive", "reference": "inconclusive"}
    assert report.reference_template == "{{item.reference_answer}}"


def test_report_to_dict_is_strict_json():
    report = run_probes(string_check("ilike"), LABEL_ITEMS)
    back = json.loads(json.dumps(report.to_dict(), allow_nan=False))
    assert back["flags"] == ["prompt_echo", "fill_all"]
    assert back["probes"][0]["name"] == "empty" and back["probes"][0]["scores"] == {k: 0.0 for k in LABEL_ITEMS}


# ---------------------------------------------------------------- grading errors are no verdict


class Graded:
    """A stand-in grader (run_probes' `grader=`): `fn(sample, item)` gives a score, or an error type to fail with."""

    def __init__(self, fn):
        self.fn = fn

    def grade_batch(self, pairs):
        from rfteval.graders.base import GradeResult

        out = []
        for sample, item in pairs:
            got = self.fn(sample, item)
            out.append(GradeResult.failed(got, "boom") if isinstance(got, str) else GradeResult(float(got)))
        return out


@pytest.mark.slow
def test_a_python_grader_that_raises_on_every_sample_is_inconclusive_never_ok():
    """Every grade an error scored 0 and read as "ok" (the cheat resisted): each probe is inconclusive, with the
    error's kind and count, and the report's exit status is no pass, with or without --strict."""
    from rfteval.status import ExitStatus

    raises = python_config("raises", "def grade(sample, item):\n    raise ValueError(sample['output_text'][:0])\n")
    report = run_probes(raises, LABEL_ITEMS, options=OPTIONS, reference_template="{{item.reference_answer}}")
    n = len(LABEL_ITEMS)
    ran = [p for p in report.probes if p.status != "skipped"]
    assert {p.name for p in ran} >= {*CHEATS, "reference"} and all(p.status == "inconclusive" for p in ran), statuses(report)
    for p in ran:
        assert (p.n_graded, p.n_errors, p.scores, p.flagged_items) == (n, n, {}, [])
        assert p.status_text == f"inconclusive: {n} grading errors (python_grader_runtime_error ×{n})"
    assert not report.flagged and report.outcome == "inconclusive"
    assert report.exit_status(strict=True) == report.exit_status(strict=False) == ExitStatus.INCOMPLETE
    assert report.to_dict()["inconclusive"] == [p.name for p in ran]


def test_some_grades_errors_the_rest_decide_and_the_errors_are_counted():
    first = next(iter(LABEL_ITEMS))

    def grade(sample, item):  # the first item's grades fail; a refusal pays full marks elsewhere
        if item is LABEL_ITEMS[first]:
            return "model_grader_truncated_error"
        return 1.0 if sample["output_text"] == REFUSAL_TEXT else 0.0

    REFUSAL_TEXT = "I'm sorry, but I can't help with that request."
    report = run_probes(string_check("eq"), LABEL_ITEMS, grader=Graded(grade), only=["empty", "refusal"])
    n = len(LABEL_ITEMS)
    empty, refusal = by_name(report, "empty"), by_name(report, "refusal")
    assert empty.status == "ok" and first not in empty.scores and empty.mean == 0.0
    assert empty.status_text == f"ok ({n - 1} of {n} graded; 1 grading error (model_grader_truncated_error ×1))"
    assert refusal.status == "flag" and refusal.flagged_items == list(LABEL_ITEMS)[1:]
    assert report.outcome == "flagged" and not report.inconclusive


def test_each_error_types_first_message_is_kept_so_the_grader_can_be_debugged():
    """probe-grader gave `python_grader_runtime_error ×8` and never the exception itself (`KeyError: 'answer_num'`).
    Each probe keeps each error type's first message whole, and the report each type's count and first message."""
    from rfteval.graders.base import GradeResult

    first = next(iter(LABEL_ITEMS))
    refusal_text = "I'm sorry, but I can't help with that request."

    def message(kind: str, item) -> str:
        return f"{kind} on {item['messages'][0]['content']}\nTraceback (most recent call last): ..."

    class Failing:  # empty probes raise KeyError; refusals time out on the first item and score 0 elsewhere
        def grade_batch(self, pairs):
            out = []
            for sample, item in pairs:
                if sample["output_text"] == "":
                    out.append(GradeResult.failed("python_grader_runtime_error", message("KeyError", item)))
                elif sample["output_text"] == refusal_text and item is LABEL_ITEMS[first]:
                    out.append(GradeResult.failed("python_grader_timeout_error", message("timeout", item)))
                else:
                    out.append(GradeResult(0.0))
            return out

    report = run_probes(string_check("eq"), LABEL_ITEMS, grader=Failing(), only=["empty", "refusal"])
    empty, refusal = by_name(report, "empty"), by_name(report, "refusal")
    assert empty.error_messages == {"python_grader_runtime_error": message("KeyError", LABEL_ITEMS[first])}
    assert refusal.error_messages == {"python_grader_timeout_error": message("timeout", LABEL_ITEMS[first])}
    assert report.error_types == {"python_grader_runtime_error": len(LABEL_ITEMS), "python_grader_timeout_error": 1}
    out = json.loads(json.dumps(report.to_dict(), allow_nan=False))
    assert out["error_messages"] == {**empty.error_messages, **refusal.error_messages}
    assert out["error_types"] == report.error_types
    assert out["probes"][0]["error_messages"] == empty.error_messages


def test_a_grader_that_never_reads_the_answer_is_told_to_read_it():
    """Both templates read the item: every probe of an item scores alike; the advice is to read the answer."""
    from rfteval.readiness.probes import NEVER_READS, reads_answer

    blind = parse_config({"type": "string_check", "name": "blind", "input": "{{ item.reference_answer }}",
                          "reference": "{{ item.reference_answer }}", "operation": "eq"})
    assert not reads_answer(blind)
    report = run_probes(blind, LABEL_ITEMS)
    assert report.ignores_output and report.notes[0] == NEVER_READS
    assert "never reads the answer" in NEVER_READS and "{{ sample.output_text }}" in NEVER_READS


def test_a_judge_that_reads_the_answer_but_scores_alike_is_not_told_to_read_it():
    """The judge's message holds {{ sample.output_text }}: telling it to put that in a message was wrong advice."""
    from rfteval.readiness.probes import SAME_SCORES, reads_answer

    judge = parse_config({"type": "score_model", "name": "j", "model": "m", "input": [
        {"role": "user", "content": "Reference {{item.reference_answer}}; answer {{ sample.output_text }}"}]})
    assert reads_answer(judge)
    report = run_probes(judge, LABEL_ITEMS, grader=Graded(lambda s, i: 0.5))
    assert report.ignores_output and report.notes[0] == SAME_SCORES
    assert "does not tell answers apart" in SAME_SCORES and "never reads" not in SAME_SCORES


def test_reads_answer_from_what_each_grader_refers_to():
    from rfteval.readiness.probes import reads_answer

    reading = "def grade(sample, item):\n    return float(sample['output_text'] == item['reference_answer'])\n"
    ignoring = "def grade(sample, item):\n    return float(item['reference_answer'] == 'yes')\n"
    blind = {"type": "string_check", "name": "b", "input": "{{ item.x }}", "reference": "{{ item.y }}",
             "operation": "eq"}
    tools = dict(blind, name="t", input="{{ sample.output_tools }}")
    assert reads_answer(python_config("r", reading)) and not reads_answer(python_config("i", ignoring))
    assert reads_answer(parse_config(tools)) and not reads_answer(parse_config(blind))
    judge_blind = {"type": "score_model", "name": "jb", "model": "m",
                   "input": [{"role": "user", "content": "Rate {{ item.x }}"}]}
    assert not reads_answer(parse_config(judge_blind))
    multi = {"type": "multi", "name": "m", "calculate_output": "a + b",
             "graders": {"a": blind, "b": dict(blind, name="b2")}}
    assert not reads_answer(parse_config(multi))  # no sub-grader refers to the answer
    multi["graders"]["b"] = tools
    assert reads_answer(parse_config(multi))
