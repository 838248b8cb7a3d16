"""The eval spec: TOML and flags merged key by key, validated once, errors naming file, line and key."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest

from rfteval.errors import InputError
from rfteval.providers.base import Sampling
from rfteval.providers.openai_provider import OpenAIProvider
from rfteval.run.spec import (
    ModelRun,
    build_providers,
    build_spec,
    flag_overrides,
    normalize_response_format,
    parse_model_flag,
    resolve_models,
    to_toml,
)

SPEC = """\
name = "chipstack-vip"
dataset = "items.jsonl"          # relative to the spec file
grader = "grader.json"
epochs = 3

[endpoint]
base_url = "http://127.0.0.1:8000/v1"
api_key_env = "MY_KEY"
api = "chat"

[sampling]
temperature = 1.0
reasoning_effort = "medium"
max_output_tokens = 4096
response_format = "schema.json"

[models.base]
model = "o3-mini"

[models.tuned]
model = "ft:o3-mini:acme::abc123"
base_url = "http://127.0.0.1:9000/v1"
temperature = 0.5

[pricing."ft:o3-mini"]
input = 2.0
output = 8.0
"""

SCHEMA = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"],
          "additionalProperties": False}


@pytest.fixture
def spec_dir(tmp_path: Path) -> Path:
    d = tmp_path / "evals"
    d.mkdir()
    (d / "spec.toml").write_text(SPEC)
    (d / "schema.json").write_text(json.dumps(SCHEMA))
    (d / "grader.json").write_text(json.dumps({"type": "string_check", "name": "g", "input": "{{ sample.output_text }}",
                                               "reference": "{{ item.ref }}", "operation": "eq"}))
    return d


def test_spec_file_paths_are_relative_to_the_file(spec_dir: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # not the spec's folder
    spec = build_spec(spec_dir / "spec.toml")
    assert spec.dataset == str(spec_dir / "items.jsonl")
    assert spec.grader == str(spec_dir / "grader.json")
    assert spec.sampling.response_format == str(spec_dir / "schema.json")
    assert spec.epochs == 3 and spec.concurrency == 32 and spec.max_retries == 10 and spec.timeout == 600
    assert spec.max_error_rate == 0.05
    assert spec.out_dir == Path("runs") / "chipstack-vip"
    assert spec.pricing["ft:o3-mini"].input == 2.0


def test_flags_win_key_by_key(spec_dir: Path) -> None:
    over = flag_overrides(models=["tuned=ft:o3-mini:acme::new"], epochs=5, base_url="http://127.0.0.1:7/v1",
                          concurrency=4, temperature=None)
    spec = build_spec(spec_dir / "spec.toml", over)
    assert spec.epochs == 5 and spec.concurrency == 4
    assert spec.endpoint.base_url == "http://127.0.0.1:7/v1"
    assert spec.endpoint.api_key_env == "MY_KEY"  # untouched keys of the same table stay
    assert spec.models["tuned"].model == "ft:o3-mini:acme::new"
    assert spec.models["tuned"].base_url == "http://127.0.0.1:9000/v1"  # the model's own endpoint stays
    assert spec.models["base"].model == "o3-mini"  # a model not named by a flag stays
    assert spec.sampling.temperature == 1.0  # None means "flag not given"


def test_flags_alone_are_a_complete_spec(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    over = flag_overrides(models=["base=gpt-4o-mini", "tuned=ft:gpt-4o-mini:x::y"], dataset="d.jsonl",
                          grader="g.json", epochs=3, base_url="http://127.0.0.1:8000/v1/", concurrency=32,
                          out="results")
    spec = build_spec(None, over)
    assert list(spec.models) == ["base", "tuned"]
    assert spec.dataset == str(tmp_path / "d.jsonl")  # flag paths: relative to the working directory
    assert spec.out_dir == tmp_path / "results"
    assert spec.endpoint.base_url == "http://127.0.0.1:8000/v1"  # trailing slash dropped
    assert spec.run_name == "d"
    spec = build_spec(None, flag_overrides(models=["a=x"], dataset="datasets/chipstack/items.jsonl", grader="g"))
    assert spec.run_name == "chipstack" and spec.out_dir == Path("runs/chipstack")  # items.jsonl: the folder names it


def test_the_sandbox_policy_keeps_every_key_of_the_run_from_grader_code(spec_dir: Path, monkeypatch) -> None:
    monkeypatch.delenv("RFTEVAL_UNSAFE_PYTHON_GRADERS", raising=False)
    over = flag_overrides(grader_timeout=9.0, grader_memory=512, judge_api_key_env="JUDGE_KEY")
    spec = build_spec(spec_dir / "spec.toml", over)
    policy = spec.sandbox_policy(True)
    assert (policy.unsafe, policy.never_pass, policy.timeout_s, policy.memory_mb) == (
        True, frozenset({"MY_KEY", "JUDGE_KEY"}), 9.0, 512)
    assert spec.sandbox_policy(False).unsafe is False and spec.sandbox_policy().unsafe is False
    monkeypatch.setenv("RFTEVAL_UNSAFE_PYTHON_GRADERS", "1")  # a library run that does not say
    assert spec.sandbox_policy().unsafe is True and spec.sandbox_policy(False).unsafe is False


def test_resolve_models_merges_sampling_and_endpoints(spec_dir: Path) -> None:
    runs = {r.label: r for r in resolve_models(build_spec(spec_dir / "spec.toml"))}
    base, tuned = runs["base"], runs["tuned"]
    assert base.provider == tuned.provider == "openai"
    assert base.settings == {"base_url": "http://127.0.0.1:8000/v1", "api_key_env": "MY_KEY", "api": "chat"}
    assert tuned.settings["base_url"] == "http://127.0.0.1:9000/v1"
    assert base.sampling.temperature == 1.0 and tuned.sampling.temperature == 0.5
    assert tuned.sampling.reasoning_effort == "medium" and tuned.sampling.max_output_tokens == 4096
    assert base.sampling.response_format == {"name": "response", "schema": SCHEMA, "strict": True}


def test_a_jobs_reasoning_effort_is_the_models_unless_the_run_sets_one(spec_dir: Path) -> None:
    # the RFT guide's job request (openai-graders.md §3.2): method.reinforcement.hyperparameters.reasoning_effort
    grader = json.loads((spec_dir / "grader.json").read_text())
    job = {"model": "o4-mini-2025-04-16", "method": {"type": "reinforcement", "reinforcement": {
        "grader": grader, "hyperparameters": {"reasoning_effort": "high", "n_epochs": 2}}}}
    (spec_dir / "grader.json").write_text(json.dumps(job))
    no_effort = SPEC.replace('reasoning_effort = "medium"\n', "")
    (spec_dir / "spec.toml").write_text(no_effort)
    runs = {r.label: r for r in resolve_models(build_spec(spec_dir / "spec.toml"))}
    assert runs["base"].sampling.reasoning_effort == runs["tuned"].sampling.reasoning_effort == "high"
    (spec_dir / "spec.toml").write_text(no_effort.replace('model = "o3-mini"\n', 'model = "o3-mini"\n'
                                                          'reasoning_effort = "low"\n', 1))
    runs = {r.label: r for r in resolve_models(build_spec(spec_dir / "spec.toml"))}
    assert runs["base"].sampling.reasoning_effort == "low" and runs["tuned"].sampling.reasoning_effort == "high"
    (spec_dir / "spec.toml").write_text(SPEC)  # [sampling] reasoning_effort = "medium" wins for every model
    runs = {r.label: r for r in resolve_models(build_spec(spec_dir / "spec.toml"))}
    assert runs["base"].sampling.reasoning_effort == runs["tuned"].sampling.reasoning_effort == "medium"
    job["method"]["reinforcement"]["hyperparameters"]["reasoning_effort"] = "default"  # RFT's "not set"
    (spec_dir / "grader.json").write_text(json.dumps(job))
    (spec_dir / "spec.toml").write_text(no_effort)
    runs = {r.label: r for r in resolve_models(build_spec(spec_dir / "spec.toml"))}
    assert runs["base"].sampling.reasoning_effort is None


def test_replay_models(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "g.json").write_text('{"type": "string_check", "name": "g", "input": "a", "reference": "a", '
                                     '"operation": "eq"}')
    over = flag_overrides(models=["base=replay:rec/base.jsonl"], dataset="d.jsonl", grader="g.json")
    (run,) = resolve_models(build_spec(None, over))
    assert run.provider == "replay"
    assert run.settings == {"path": str(tmp_path / "rec" / "base.jsonl")}
    assert run.model == "replay:base.jsonl"
    # the spec form can name the model the recordings stand for
    (tmp_path / "s.toml").write_text('dataset = "d.jsonl"\ngrader = "g.json"\n[models.tuned]\n'
                                     'model = "o3-mini"\nreplay = "rec/tuned.jsonl"\n')
    (run,) = resolve_models(build_spec(tmp_path / "s.toml"))
    assert (run.provider, run.model, run.settings) == ("replay", "o3-mini", {"path": str(tmp_path / "rec/tuned.jsonl")})


def test_unknown_key_names_file_line_and_key(spec_dir: Path) -> None:
    path = spec_dir / "spec.toml"
    path.write_text(SPEC.replace("epochs = 3", "epochs = 3\nepoch_count = 4"))
    with pytest.raises(InputError) as err:
        build_spec(path)
    assert err.value.file == path and err.value.line == 5 and err.value.field == "epoch_count"
    assert str(err.value).startswith(f"{path}:5: epoch_count: ")


@pytest.mark.parametrize("old, new, field, meant", [
    ("epochs = 3", "epoch = 3", "epoch", "epochs"),
    ("temperature = 0.5", "temprature = 0.5", "models.tuned.temprature", "temperature"),
    ('api = "chat"', 'base_ur = "http://127.0.0.1:1/v1"', "endpoint.base_ur", "base_url"),
    ("reasoning_effort", "reasoning_efort", "sampling.reasoning_efort", "reasoning_effort"),
])
def test_a_misspelt_key_gets_the_key_it_most_likely_meant(spec_dir: Path, old: str, new: str, field: str,
                                                          meant: str) -> None:
    path = spec_dir / "spec.toml"
    text = SPEC.replace(old, new)
    path.write_text(text)
    with pytest.raises(InputError) as err:
        build_spec(path)
    assert err.value.field == field and err.value.message == f"unknown key (did you mean `{meant}`?)"
    bad = field.rsplit(".", 1)[-1]
    assert err.value.line == 1 + next(i for i, line in enumerate(text.splitlines()) if line.split(" = ")[0] == bad)


@pytest.mark.parametrize("old, new, field, meant", [
    ('dataset = "items.jsonl"', 'datset = "items.jsonl"', "datset", "dataset"),
    ("[models.base]", "[model.base]", "model", "models"),  # both tables below: no `models` is left at all
    ("[models.tuned]", "[modle.tuned]", "modle", "models"),  # one table of two: pydantic's own check
])
def test_a_misspelt_required_key_is_named_not_reported_missing(spec_dir: Path, old: str, new: str, field: str,
                                                               meant: str) -> None:
    """Tried as a new user: `[model.base]` for `[models.base]` said "models: missing: set `models` in the spec",
    and `datset = ...` "dataset: missing", where every other misspelt key gets the key it most likely meant."""
    path = spec_dir / "spec.toml"
    text = SPEC.replace(old, new)
    if new == "[model.base]":
        text = text.replace("[models.tuned]", "[model.tuned]")
    path.write_text(text)
    with pytest.raises(InputError) as err:
        build_spec(path)
    assert err.value.field == field and err.value.message == f"unknown key (did you mean `{meant}`?)"
    first = new.split(".")[0].split(" ")[0]  # `datset`, `[model`, `[modle`: the line that holds the typo
    assert err.value.line == 1 + next(i for i, ln in enumerate(text.splitlines()) if ln.startswith(first))


@pytest.mark.parametrize("where, table, env", [
    ("", "", "endpoint.api_key_env"),  # a top-level key: the endpoint's variable is meant
    ("[endpoint]\n", "endpoint.", "endpoint.api_key_env"),
    ("[judge]\n", "judge.", "judge.api_key_env"),
    ("[models.base]\n", "models.base.", "models.base.api_key_env"),
])
def test_an_api_key_in_the_spec_points_to_api_key_env_and_is_never_repeated(tmp_path: Path, where: str, table: str,
                                                                            env: str) -> None:
    secret = "sk-proj-Zq81xSECRETvalue"
    body = 'dataset = "d.jsonl"\ngrader = "g.json"\n'
    tail = '[models.base]\nmodel = "m"\n'
    if where == "[models.base]\n":
        text = body + f'[models.base]\nmodel = "m"\napi_key = "{secret}"\n'
    else:
        text = body + where + f'api_key = "{secret}"\n' + tail
    path = tmp_path / "s.toml"
    path.write_text(text)
    with pytest.raises(InputError) as err:
        build_spec(path)
    assert err.value.field == f"{table}api_key" and f"`{env}`" in err.value.message
    assert err.value.line == text.splitlines().index(f'api_key = "{secret}"') + 1
    assert secret not in str(err.value) and "sk-" not in str(err.value)


def test_curly_quotes_in_a_spec_are_named(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text('grader = "g.json"\ndataset = \u201cd.jsonl\u201d\n', encoding="utf-8")
    with pytest.raises(InputError) as err:
        build_spec(path)
    assert err.value.line == 2
    assert err.value.message.endswith("; contains curly quotes (\u201c at line 2, column 11): replace them with "
                                      "straight quotes")


def test_bad_value_in_a_table_names_its_line(spec_dir: Path) -> None:
    path = spec_dir / "spec.toml"
    path.write_text(SPEC.replace("temperature = 0.5", "temperature = 7"))
    with pytest.raises(InputError) as err:
        build_spec(path)
    assert err.value.field == "models.tuned.temperature"
    assert err.value.line == SPEC.splitlines().index("temperature = 0.5") + 1


def test_bad_flag_is_named_as_the_flag(spec_dir: Path) -> None:
    with pytest.raises(InputError) as err:
        build_spec(spec_dir / "spec.toml", flag_overrides(epochs=0))
    assert err.value.field == "--epochs" and err.value.file is None
    with pytest.raises(InputError) as err:
        build_spec(spec_dir / "spec.toml", flag_overrides(api="completions"))
    assert err.value.field == "--api"


def test_the_key_itself_is_refused_in_a_file(spec_dir: Path) -> None:
    path = spec_dir / "spec.toml"
    path.write_text(SPEC.replace('api_key_env = "MY_KEY"', 'api_key = "sk-secret-123"'))
    with pytest.raises(InputError) as err:
        build_spec(path)
    assert err.value.field == "endpoint.api_key" and "sk-secret-123" not in str(err.value)
    path.write_text(SPEC.replace('api_key_env = "MY_KEY"', 'api_key_env = "sk-secret-123"'))
    with pytest.raises(InputError) as err:
        build_spec(path)
    assert "NAME of an environment variable" in str(err.value)


@pytest.mark.parametrize("flag", ["base", "=gpt-4o", "base=", "bad label=gpt-4o", "../x=gpt-4o"])
def test_bad_model_flag(flag: str) -> None:
    with pytest.raises(InputError) as err:
        parse_model_flag(flag)
    assert err.value.field == "--model"


def test_duplicate_label_and_missing_keys(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="given twice"):
        flag_overrides(models=["a=x", "a=y"])
    with pytest.raises(InputError) as err:
        build_spec(None, flag_overrides(grader="g.json", models=["a=x"]))
    assert err.value.field == "dataset" and "--dataset" in str(err.value)


def test_invalid_toml_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text('dataset = "d.jsonl"\ngrader = \n')
    with pytest.raises(InputError) as err:
        build_spec(path)
    assert err.value.file == path and err.value.line == 2


def test_resolved_toml_round_trips(spec_dir: Path) -> None:
    spec = build_spec(spec_dir / "spec.toml")
    text = to_toml(spec)
    again = tomllib.loads(text)
    assert again["models"]["tuned"] == {"model": "ft:o3-mini:acme::abc123", "base_url": "http://127.0.0.1:9000/v1",
                                        "temperature": 0.5}
    assert again["endpoint"]["api_key_env"] == "MY_KEY"
    resolved = spec_dir / "spec.resolved.toml"
    resolved.write_text(text)
    assert build_spec(resolved).model_dump() == {**spec.model_dump(), "name": "chipstack-vip",
                                                 "out": str(spec.out_dir.resolve())}


@pytest.mark.parametrize("given", [
    SCHEMA,
    {"name": "answer", "schema": SCHEMA},
    {"type": "json_schema", "json_schema": {"name": "answer", "schema": SCHEMA, "strict": True}},
])
def test_response_format_shapes(given: dict) -> None:
    rf = normalize_response_format(given)
    assert rf["schema"] == SCHEMA and rf["strict"] is True and rf["name"] in ("answer", "response")


def test_response_format_not_a_schema(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not a JSON schema"):
        normalize_response_format({"foo": 1}, tmp_path / "x.json")


@pytest.mark.parametrize("given", [
    {"type": "json_object"},
    {"type": "json_object", "schema": SCHEMA},  # llama.cpp's JSON mode with a schema: kept, extra key and all
    {"type": "text"},
])
def test_json_object_and_text_formats_are_kept_as_given(given: dict) -> None:
    rf = normalize_response_format(given)
    assert rf == given and rf is not given


def test_responses_spelling_of_json_schema_is_structured_outputs() -> None:
    rf = normalize_response_format({"type": "json_schema", "name": "answer", "schema": SCHEMA, "strict": False})
    assert rf == {"name": "answer", "schema": SCHEMA, "strict": False}


def test_json_schema_without_a_schema_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="needs `json_schema`"):
        normalize_response_format({"type": "json_schema"}, tmp_path / "x.json")


def test_a_json_object_file_reaches_sampling_as_given(tmp_path: Path) -> None:
    (tmp_path / "fmt.json").write_text(json.dumps({"type": "json_object", "schema": SCHEMA}))
    (tmp_path / "g.json").write_text('{"type": "string_check", "name": "g", "input": "a", "reference": "a", '
                                     '"operation": "eq"}')
    over = flag_overrides(models=["base=m"], dataset="d.jsonl", grader=str(tmp_path / "g.json"),
                          response_format=str(tmp_path / "fmt.json"))
    (run,) = resolve_models(build_spec(None, over))
    assert run.sampling.response_format == {"type": "json_object", "schema": SCHEMA}
    assert run.sampling.asks_for_json


def test_text_format_does_not_ask_for_json() -> None:
    from rfteval.providers.base import Sampling

    assert not Sampling(response_format={"type": "text"}).asks_for_json and not Sampling().asks_for_json
    assert Sampling(response_format={"name": "r", "schema": SCHEMA}).asks_for_json


def test_skip_model_check_from_the_flag_or_the_spec(tmp_path: Path) -> None:
    base = dict(models=["base=m"], dataset="d.jsonl", grader="g.json")
    assert build_spec(None, flag_overrides(**base)).skip_model_check is None
    assert build_spec(None, flag_overrides(**base, skip_model_check=True)).skip_model_check is True
    spec = build_spec(None, flag_overrides(**base, skip_model_check=True))
    assert "skip_model_check = true" in to_toml(spec)
    assert "skip_model_check" not in to_toml(build_spec(None, flag_overrides(**base)))


def test_each_epoch_gets_its_own_seed() -> None:
    from rfteval.providers.base import Sampling

    seeded = Sampling(seed=41, temperature=1.0)
    assert [seeded.for_epoch(e).seed for e in (1, 2, 3)] == [41, 42, 43]
    assert seeded.for_epoch(1) is seeded and seeded.for_epoch(3).temperature == 1.0
    assert Sampling().for_epoch(5).seed is None  # no seed unless asked


# ---- --limit, the judge caps, and the per-model keys (README: "Per-model keys") ----------------------------------


@pytest.mark.parametrize(("flag", "value"), [("limit", 0), ("max_judge_calls", 0), ("max_judge_cost", 0.0),
                                             ("limit", -3)])
def test_a_cap_below_one_is_refused_as_its_flag(spec_dir: Path, flag: str, value: float) -> None:
    with pytest.raises(InputError) as err:
        build_spec(spec_dir / "spec.toml", flag_overrides(**{flag: value}))
    assert err.value.field == "--" + flag.replace("_", "-") and err.value.file is None
    assert "\n" not in str(err.value)


def test_limit_and_caps_from_the_spec_file_name_their_line(spec_dir: Path) -> None:
    path = spec_dir / "spec.toml"
    path.write_text(SPEC.replace("epochs = 3", "epochs = 3\nlimit = 5\nmax_judge_calls = 40\nmax_judge_cost = 1.5"))
    spec = build_spec(path)
    assert (spec.limit, spec.max_judge_calls, spec.max_judge_cost) == (5, 40, 1.5)
    assert build_spec(path, flag_overrides(limit=2)).limit == 2  # the flag wins
    path.write_text(SPEC.replace("epochs = 3", "epochs = 3\nlimit = 0"))
    with pytest.raises(InputError) as err:
        build_spec(path)
    assert (err.value.file, err.value.line, err.value.field) == (path, 5, "limit")


def test_a_models_system_prompt_reaches_its_run_only(spec_dir: Path) -> None:
    path = spec_dir / "spec.toml"
    path.write_text(SPEC.replace('model = "o3-mini"\n', 'model = "o3-mini"\nsystem_prompt = "Answer in JSON."\n', 1))
    runs = {r.label: r for r in resolve_models(build_spec(path))}
    assert runs["base"].system_prompt == "Answer in JSON." and runs["tuned"].system_prompt is None
    assert 'system_prompt = "Answer in JSON."' in to_toml(build_spec(path))  # spec.resolved.toml re-runs it


def _readme_per_model_section() -> str:
    from tests.support import REPO

    readme = (REPO / "docs" / "running.md").read_text(encoding="utf-8")
    start = readme.index("**Per-model keys.**")
    return readme[start:readme.index("\n#", start)]


def test_the_readme_per_model_example_is_a_valid_spec() -> None:
    section = _readme_per_model_section()
    example = section.split("```toml\n", 1)[1].split("```", 1)[0]
    raw = tomllib.loads(example)
    from rfteval.run.spec import RunSpec

    spec = RunSpec.model_validate({"dataset": "d.jsonl", "grader": "g.json", **raw})
    assert set(spec.models) == {"base", "tuned", "old"}
    for label, keys in raw["models"].items():  # each key written is the one that was read
        assert spec.models[label].model_fields_set == set(keys)


def test_every_per_model_key_is_documented_and_every_documented_key_exists() -> None:
    from rfteval.run.spec import ModelSpec

    rows = [line for line in _readme_per_model_section().splitlines() if line.startswith("| `")]
    documented = {key for row in rows for key in re.findall(r"`([a-z_]+)`", row.split("|")[1])}
    assert documented == set(ModelSpec.model_fields), (
        f"undocumented: {set(ModelSpec.model_fields) - documented}; not keys: {documented - set(ModelSpec.model_fields)}")


def test_providers_built_for_one_endpoint_share_what_is_learned_of_it() -> None:
    """base and tuned on one server step down together (one refused request, one line); another server apart."""
    runs = [ModelRun(label, "m", "openai", {"base_url": url}, Sampling())
            for label, url in (("base", "http://127.0.0.1:8000/v1"), ("tuned", "http://127.0.0.1:8000/v1"),
                               ("other", "http://127.0.0.1:8001/v1"))]
    providers = build_providers(runs)
    assert all(isinstance(p, OpenAIProvider) for p in providers.values())
    shapes = {label: p.history for label, p in providers.items() if isinstance(p, OpenAIProvider)}
    assert shapes["base"] is shapes["tuned"] and shapes["other"] is not shapes["base"]


def test_the_tool_endpoints_keys_from_a_spec_file_and_as_flags(spec_dir: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    path = spec_dir / "spec.toml"
    path.write_text(SPEC + '\n[tools]\nendpoints = "tools-config.json"\nitem_fields = ["id", "messages"]\n'
                           "endpoint_timeout = 30\n")
    spec = build_spec(path)
    assert spec.tools is not None and spec.tools.python is None
    assert spec.tools.endpoints == str(spec_dir / "tools-config.json")  # relative to the spec file
    assert (spec.tools.item_fields, spec.tools.endpoint_timeout) == (["id", "messages"], 30.0)
    flags = build_spec(path, flag_overrides(tools={"endpoints": "other.json", "item_fields": "id, messages,ref",
                                                   "endpoint_timeout": None}, cwd=tmp_path))
    assert flags.tools is not None and flags.tools.endpoints == str(tmp_path / "other.json")
    assert flags.tools.item_fields == ["id", "messages", "ref"] and flags.tools.endpoint_timeout == 30.0
    resolved = to_toml(flags)
    assert f'endpoints = "{tmp_path / "other.json"}"' in resolved.split("[tools]\n")[1]
    assert 'item_fields = ["id", "messages", "ref"]' in resolved and "endpoint_timeout = 30.0" in resolved


@pytest.mark.parametrize("tools, field, message", [
    ({"endpoint_timeout": 601, "endpoints": "t.json"}, "--tool-endpoint-timeout", "less than or equal to 600"),
    ({"item_fields": "id", "python": "tools.py"}, "--tools", "it needs --tool-endpoints FILE"),
    ({"item_fields": " , ", "endpoints": "t.json"}, "--tool-item-fields", "name at least one field"),
])
def test_bad_tool_endpoint_flags_are_one_line_naming_the_flag(spec_dir: Path, tools: dict, field: str,
                                                             message: str) -> None:
    with pytest.raises(InputError) as err:
        build_spec(spec_dir / "spec.toml", flag_overrides(tools=tools))
    assert err.value.field == field and message in err.value.message


def test_the_mcp_servers_from_a_spec_file_and_as_flags(spec_dir: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    path = spec_dir / "spec.toml"
    path.write_text(SPEC + '\n[tools]\nmcp = [{command = [".venv-mcp/bin/srv", "--db", "x.db"], env = {K = "${K}"}, '
                           'per = "run"}, {command = ["mcp-server-time"], network = true}]\n')
    spec = build_spec(path)
    assert spec.tools is not None and spec.tools.mcp is not None and spec.tools.python is None
    first, second = spec.tools.mcp
    # a relative command is relative to the spec file; a bare name stays, found on PATH when the server starts
    assert first.command == [str(spec_dir / ".venv-mcp/bin/srv"), "--db", "x.db"] and second.command == [
        "mcp-server-time"]
    assert (first.env, first.per, first.network, second.per, second.network) == ({"K": "${K}"}, "run", False,
                                                                                 "rollout", True)
    flags = build_spec(path, flag_overrides(tools={"mcp": ["bin/srv --tz 'Europe/Paris'", "mcp-server-time"]},
                                            cwd=tmp_path))
    assert flags.tools is not None and flags.tools.mcp is not None
    assert [m.command for m in flags.tools.mcp] == [[str(tmp_path / "bin/srv"), "--tz", "Europe/Paris"],
                                                    ["mcp-server-time"]]
    assert "mcp = [{ command = [" in to_toml(flags).split("[tools]\n")[1]
    with pytest.raises(InputError) as err:
        build_spec(path, flag_overrides(tools={"mcp": [{"command": ["x"], "per": "item"}]}))
    assert err.value.field is not None and "mcp" in err.value.field and "per" in str(err.value)
