"""Graders built with the installed `openai` package's own types load here the same whether their optional fields
are dumped as null or left out (issue 27, item 8).

The SDK types optional fields `Optional[...] = None` (a score_model's `range`, `sampling_params`, a python
grader's `image_tag`, an image part's `detail`) and `model_dump()` writes them as null. Its MultiGrader types
`graders` as one grader, so a multi of named graders, as the SDK builds it from an API answer
(`construct`), dumps that grader's fields as null beside the named graders. Every grader type the SDK knows is
found by walking openai.types.graders and openai.types.fine_tuning (classes, and the members of the unions a
job's grader and a multi's graders are typed with), so a type added to the SDK fails here until it has an
instance below.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import typing

import pydantic
import pytest

from rfteval.data.sample import make_sample
from rfteval.graders import GradingEngine, load_grader, parse_config
from rfteval.graders.loader import load_job_settings
from rfteval.providers.judge import Judge
from rfteval.providers.openai_provider import OpenAIProvider
from rfteval.providers.retry import RetryPolicy
from tests.support.optional import require

openai_types = require("openai.types", "setup")

FAST = RetryPolicy(max_retries=1, base_s=0.001, max_backoff_s=0.01)
ITEM = {"id": "i1", "reference_answer": "42"}
OUTPUTS = ["42", "41", "the answer is 42"]


def _grader_classes(annotation: object) -> list[type]:
    """The pydantic grader classes inside a field's annotation (unions and Optionals opened)."""
    if isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel):
        return [annotation] if "type" in annotation.model_fields else []
    return [c for arg in typing.get_args(annotation) for c in _grader_classes(arg)]


def sdk_grader_types() -> dict[str, type]:
    """{type literal: SDK class} for every grader class under openai.types.graders and openai.types.fine_tuning."""
    found: dict[str, type] = {}
    for pkg_name in ("openai.types.graders", "openai.types.fine_tuning"):
        pkg = importlib.import_module(pkg_name)
        for info in pkgutil.walk_packages(pkg.__path__, pkg_name + "."):
            if info.name.endswith("_param"):
                continue  # TypedDicts of request params: the same shapes, not models that dump
            module = importlib.import_module(info.name)
            for obj in list(vars(module).values()):
                classes: list[type] = []
                if isinstance(obj, type) and issubclass(obj, pydantic.BaseModel):
                    if obj.__name__.endswith("Grader"):
                        classes += _grader_classes(obj)
                    for name, f in obj.model_fields.items():
                        if name in ("grader", "graders"):
                            classes += _grader_classes(f.annotation)
                for cls in classes:
                    literal = typing.get_args(cls.model_fields["type"].annotation)
                    if literal and isinstance(literal[0], str):
                        found.setdefault(literal[0], cls)
    return found


def instances() -> dict[str, list[pydantic.BaseModel]]:
    """One or more instances per SDK grader type, built with the SDK's own classes (optional fields left unset)."""
    from openai.types.graders import (
        LabelModelGrader,
        MultiGrader,
        PythonGrader,
        ScoreModelGrader,
        StringCheckGrader,
        TextSimilarityGrader,
    )
    from openai.types.graders.grader_inputs import GraderInputItemInputImage
    from openai.types.graders.score_model_grader import Input, InputContentInputImage, SamplingParams
    from openai.types.responses.response_input_text import PromptCacheBreakpoint, ResponseInputText

    string = StringCheckGrader(type="string_check", name="exact", input="{{sample.output_text}}",
                               reference="{{item.reference_answer}}", operation="eq")
    similar = TextSimilarityGrader(type="text_similarity", name="fuzzy", input="{{sample.output_text}}",
                                   reference="{{item.reference_answer}}", evaluation_metric="fuzzy_match")
    python = PythonGrader(type="python", name="contains", source=(
        "def grade(sample, item):\n    return 1.0 if item['reference_answer'] in sample['output_text'] else 0.0\n"))
    judge_input = [Input(role="developer", content="Score from 0 to 10."),
                   Input(role="user", content=[
                       ResponseInputText(type="input_text", text="Reference {{item.reference_answer}}",
                                         prompt_cache_breakpoint=PromptCacheBreakpoint(mode="explicit")),
                       GraderInputItemInputImage(type="input_image", image_url="https://example.invalid/x.png"),
                       "Answer: {{sample.output_text}}"]),
                   Input(role="user", content=InputContentInputImage(type="input_image",
                                                                     image_url="https://example.invalid/y.png"))]
    score = ScoreModelGrader(type="score_model", name="judge", model="gpt-4o-mini", input=judge_input)
    score_ten = ScoreModelGrader(type="score_model", name="judge10", model="gpt-4o-mini", input=judge_input,
                                 range=[0, 10], sampling_params=SamplingParams(seed=7))
    score_sampled = ScoreModelGrader(type="score_model", name="sampled", model="gpt-4o-mini", input=[Input(
        role="user", content=[ResponseInputText(type="input_text", text="Answer: {{sample.output_text}}")])],
        range=[0, 1], sampling_params=SamplingParams(temperature=0.0))
    label = LabelModelGrader(type="label_model", name="label", model="gpt-4o-mini",
                             input=[{"role": "user", "content": "Answer: {{sample.output_text}}"}],
                             labels=["right", "wrong"], passing_labels=["right"])
    # the SDK's typed multi holds one grader; the formula names it by its name
    multi_one = MultiGrader(type="multi", name="one", graders=string, calculate_output="exact")
    # a multi of named graders, as the SDK builds one from an API answer (its type does not validate a dict)
    multi_named = MultiGrader.construct(type="multi", name="named", calculate_output="0.5 * exact + 0.5 * judge",
                                        graders={"exact": string, "judge": score})
    return {"string_check": [string], "text_similarity": [similar], "python": [python],
            "score_model": [score, score_ten, score_sampled], "label_model": [label], "multi": [multi_one, multi_named]}


def test_every_grader_type_of_the_sdk_has_an_instance_here():
    found = sdk_grader_types()
    assert {"string_check", "text_similarity", "python", "score_model", "label_model", "multi"} <= set(found)
    missing = sorted(set(found) - set(instances()))
    assert not missing, f"the openai SDK has grader type(s) {missing}: add an instance to instances()"


def _optional_fields(cls: type, seen: set[type] | None = None) -> set[str]:
    """`Class.field` for every field the SDK types with a None default, in the class and the models inside it."""
    seen = seen if seen is not None else set()
    if cls in seen:
        return set()
    seen.add(cls)
    out: set[str] = set()
    for name, f in cls.model_fields.items():
        if not f.is_required() and f.default is None:
            out.add(f"{cls.__name__}.{name}")
        for inner in _models_in(f.annotation):
            out |= _optional_fields(inner, seen)
    return out


def _models_in(annotation: object) -> list[type]:
    if isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]


def _nulls(instance: object) -> set[str]:
    """`Class.field` of every field left None in an SDK object and the objects inside it."""
    out: set[str] = set()
    if isinstance(instance, pydantic.BaseModel):
        for name in type(instance).model_fields:
            value = getattr(instance, name, None)
            if value is None:
                out.add(f"{type(instance).__name__}.{name}")
            out |= _nulls(value)
        for value in (instance.model_extra or {}).values():  # construct() keeps a dict of named graders here
            out |= _nulls(value)
    elif isinstance(instance, dict):
        for value in instance.values():
            out |= _nulls(value)
    elif isinstance(instance, list):
        for value in instance:
            out |= _nulls(value)
    return out


def test_the_instances_leave_every_optional_field_of_the_sdk_null_somewhere():
    """So the dumps below carry a null for each field the SDK types as optional (content parts not used as
    such in a grader, audio's, have none)."""
    wanted = set().union(*(_optional_fields(cls) for cls in sdk_grader_types().values()))
    seen = set().union(*(_nulls(i) for objs in instances().values() for i in objs))
    assert wanted - seen == set(), f"optional SDK fields no instance leaves null: {sorted(wanted - seen)}"


def judge_responder(request):
    """A judge that answers from the sample's answer text: 0.9 (or `right`) for "42", else 0.2 (`wrong`)."""
    text = json.dumps(request.body.get("messages") or request.body.get("input"))
    good = "Answer: 42" in text
    if "label_model_result" in json.dumps(request.body):
        return json.dumps({"steps": [], "label": "right" if good else "wrong"})
    return json.dumps({"steps": [], "result": 0.9 if good else 0.2})


def grade_all(server, config):
    with Judge(OpenAIProvider(server.base_url), retry_policy=FAST) as judge, \
            GradingEngine(config, judge=judge) as engine:
        return [(r.score, r.error, r.passed) for r in engine.grade_batch([(make_sample(o), ITEM) for o in OUTPUTS])]


def dumps(instance: pydantic.BaseModel) -> list[object]:
    return [instance.model_dump(), instance.model_dump(exclude_none=True), instance.model_dump(mode="json"),
            json.loads(instance.model_dump_json())]


CASES = [(t, i) for t, objs in instances().items() for i in range(len(objs))]


@pytest.mark.parametrize("gtype, index", [
    pytest.param(t, i, marks=[] if t == "string_check" else [pytest.mark.slow]) for t, i in CASES])
def test_model_dump_with_nulls_and_without_gives_the_same_grader(fake_openai, gtype, index):
    fake_openai.responder = judge_responder
    instance = instances()[gtype][index]
    configs = [parse_config(d) for d in dumps(instance)]
    assert all(c.model_dump() == configs[0].model_dump() for c in configs)
    assert configs[0].type == gtype
    results = [grade_all(fake_openai, c) for c in configs]
    assert all(r == results[0] for r in results)
    assert all(error is None for _, error, _ in results[0])
    scores = [s for s, _, _ in results[0]]
    assert len(set(scores)) > 1  # the samples tell good from bad: a grader that read nothing would not


def test_range_null_is_zero_to_one_and_a_declared_range_is_kept():
    score, score_ten, _ = instances()["score_model"]
    assert parse_config(score.model_dump()).score_range()[:2] == (0.0, 1.0)
    assert parse_config(score_ten.model_dump()).score_range()[:2] == (0.0, 10.0)


@pytest.mark.parametrize("config, field", [
    ({"type": "string_check", "name": "x", "input": None, "reference": "a", "operation": "eq"}, "input"),
    ({"type": "multi", "name": "m", "calculate_output": "a", "graders": {"a": None}}, "graders.a"),
])
def test_a_required_field_or_a_sub_grader_given_as_null_is_still_refused(config, field):
    from rfteval.errors import InputError

    with pytest.raises(InputError, match=field):
        parse_config(config)


def job_json(grader: dict[str, object], hyperparameters: dict[str, object]) -> dict[str, object]:
    """A fine-tuning job as the API returns it (the shape of openai-python's FineTuningJob)."""
    return {
        "id": "ftjob-abc", "object": "fine_tuning.job", "created_at": 1733000000, "model": "o4-mini-2025-04-16",
        "status": "succeeded", "organization_id": "org-x", "training_file": "file-t", "validation_file": "file-v",
        "result_files": [], "seed": 42, "error": None, "fine_tuned_model": None, "finished_at": None,
        "trained_tokens": None, "hyperparameters": {"batch_size": "auto", "learning_rate_multiplier": "auto",
                                                    "n_epochs": "auto"},
        "method": {"type": "reinforcement", "reinforcement": {"grader": grader, "hyperparameters": hyperparameters}},
    }


def test_a_fine_tuning_job_dumped_whole_by_the_sdk_loads(tmp_path):
    from openai._models import construct_type
    from openai.types.fine_tuning import FineTuningJob

    _, score_ten, _ = instances()["score_model"]
    hyper = {"reasoning_effort": "medium", "n_epochs": 2, "eval_samples": 3}
    job = construct_type(type_=FineTuningJob, value=job_json(score_ten.model_dump(exclude_none=True), hyper))
    assert isinstance(job, FineTuningJob)
    dumped = job.model_dump()
    # the SDK's nulls: methods not used, hyperparameters not set, the grader's unset optional fields
    assert dumped["method"]["dpo"] is None and dumped["method"]["reinforcement"]["hyperparameters"]["batch_size"] is None
    path = tmp_path / "job.json"
    path.write_text(json.dumps(dumped, indent=2))
    config = load_grader(path)
    assert config.model_dump() == parse_config(score_ten.model_dump()).model_dump()
    settings = load_job_settings(path)
    assert settings.reasoning_effort == "medium"
    assert settings.ignored == ["eval_samples", "n_epochs"]


@pytest.mark.filterwarnings("ignore::UserWarning")  # the SDK's own serializer warns about its loose union
def test_a_job_holding_an_sdk_multi_of_named_graders_loads(tmp_path):
    from openai._models import construct_type
    from openai.types.fine_tuning import FineTuningJob

    multi_named = instances()["multi"][1]
    job = construct_type(type_=FineTuningJob, value=job_json(multi_named.model_dump(), {}))
    dumped = job.model_dump()
    grader = dumped["method"]["reinforcement"]["grader"]
    # the SDK read the multi as the first member of its grader union: a string_check's fields, null, beside
    # `graders`, and inside `graders` the same nulls beside the named graders
    assert grader["input"] is None and grader["operation"] is None and grader["graders"]["type"] is None
    path = tmp_path / "job.json"
    path.write_text(json.dumps(dumped, indent=2))
    config = load_grader(path)
    assert config.model_dump() == parse_config(multi_named.model_dump(exclude_none=True)).model_dump()
    assert sorted(c.name for c in config.sub_graders()) == ["exact", "judge"]
    assert load_job_settings(path).note() is None  # every hyperparameter null: nothing to say
