"""Each model of a spec resolved for the runner (ModelRun): its provider and settings, and the shared sampling
with the model's own keys, a response format file read once, and what the grader file's fine-tuning job says
(its response_format and reasoning_effort); and the providers built from them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from rfteval.data.json_types import JSONObject
from rfteval.errors import InputError
from rfteval.providers.base import Sampling
from rfteval.run.response_format import load_response_format_file, normalize_response_format
from rfteval.run.spec_tables import REPLAY_PREFIX, SAMPLING_KEYS, RunSpec

if TYPE_CHECKING:
    from rfteval.graders.loader import GraderFile
    from rfteval.providers.base import Provider


@dataclass(frozen=True)
class ModelRun:
    """One model resolved for the runner: how to reach it and how to sample it."""

    label: str
    model: str  # as recorded in each record's `model`
    provider: Literal["openai", "replay"]
    settings: dict[str, str | None]  # make_provider(provider, **settings): base_url, api_key_env, api; or a replay path
    sampling: Sampling
    system_prompt: str | None = None  # [models.LABEL] system_prompt: a system message before the item's own


def build_providers(runs: Sequence[ModelRun], service_tier: str | None = None,
                    transport: str | None = None) -> dict[str, Provider]:
    """One provider per model run, by label; tier and transport go to OpenAI endpoints. Those that reach one
    endpoint share what is learned of it (openai_provider.share_endpoint_state)."""
    from rfteval.providers import make_provider
    from rfteval.providers.openai_provider import share_endpoint_state

    extra: dict[str, object] = {}
    if service_tier is not None:
        extra["service_tier"] = service_tier
    if transport is not None:
        extra["transport"] = transport
    providers = {run.label: make_provider(run.provider, **run.settings, **(extra if run.provider == "openai" else {}))
                 for run in runs}
    share_endpoint_state(providers.values())
    return providers


def resolve_models(spec: RunSpec, grader: GraderFile | None = None) -> list[ModelRun]:
    """Per model: provider kind and settings, and the shared sampling with this model's overrides. `grader`: the
    spec's grader file as the command read it (read here when not given)."""
    from rfteval.graders.loader import GraderFile

    source = grader if grader is not None else GraderFile(spec.grader)
    formats: dict[str, JSONObject] = {}
    job_format = None
    if spec.sampling.response_format is None:
        job_format = source.response_format  # a fine-tuning job file carries its own
    # the job's hyperparameters.reasoning_effort is what the trained model samples with: the run's own wins
    job_effort = source.job.reasoning_effort if spec.sampling.reasoning_effort is None else None
    runs = []
    for label, m in spec.models.items():
        values = {k: getattr(spec.sampling, k) for k in SAMPLING_KEYS}
        values.update({k: getattr(m, k) for k in SAMPLING_KEYS if k in m.model_fields_set})
        if values["reasoning_effort"] is None and job_effort is not None:
            values["reasoning_effort"] = job_effort
        rf_path = values.pop("response_format")
        rf = None
        if rf_path:
            if rf_path not in formats:
                formats[rf_path] = load_response_format_file(rf_path)
            rf = formats[rf_path]
        elif job_format is not None:
            rf = normalize_response_format(job_format, spec.grader)
        sampling = Sampling(response_format=rf, **values)
        replay, model = m.replay, m.model
        if model is not None and model.startswith(REPLAY_PREFIX):
            replay = model[len(REPLAY_PREFIX):]
            if not replay:
                raise InputError("replay: needs a path (replay:FILE.jsonl)", field=f"models.{label}.model")
            model = REPLAY_PREFIX + Path(replay).name
        if replay is not None:
            runs.append(ModelRun(label, model or REPLAY_PREFIX + Path(replay).name, "replay", {"path": replay},
                                 sampling))
            continue
        assert model is not None
        settings = {
            "base_url": m.base_url or spec.endpoint.base_url,
            "api_key_env": m.api_key_env or spec.endpoint.api_key_env,
            "api": m.api or spec.endpoint.api,
        }
        if spec.developer_as is not None:
            settings["developer_as"] = spec.developer_as
        runs.append(ModelRun(label, model, "openai", settings, sampling, m.system_prompt))
    return runs
