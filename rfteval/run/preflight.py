"""Know the server before spending: model names, the Batch API and the Responses API, checked once at start.

A mistyped model name on a self-hosted server is not an error there: llama.cpp answers with whatever it has
loaded, and the run ends with exit 0 on the wrong model. Where `GET /models` answers with a list, every model
asked for must be in it. `--batch` against an endpoint without the Files and Batches API, or `--api responses`
against one without the Responses API, would fail on its first call, after the run directory and the batch
journal were written; here they are one line before anything is. Whatever does not answer (no /models, a
timeout) is skipped in silence: the run's own requests then say what is wrong.

Only providers that can be asked take part (OpenAIProvider: `list_models`, `missing_api`); replay providers
and tests' stand-ins have nothing to check.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol, runtime_checkable

from rfteval.errors import InputError
from rfteval.providers import batchable

if TYPE_CHECKING:
    from rfteval.graders.base import GraderConfig
    from rfteval.providers.base import Provider
    from rfteval.providers.judge import Judge
    from rfteval.run.spec import ModelRun, RunSpec

SHOWN_MODELS = 20  # at most this many of the served names in the one line


@runtime_checkable
class AskableServer(Protocol):
    """What the preflight asks a provider (OpenAIProvider's probes; tests' stand-ins)."""

    def list_models(self) -> list[str] | None: ...

    def missing_api(self, which: Literal["batch", "responses"]) -> str | None: ...


@dataclass
class Check:
    """What one provider is asked for: models (name, the flag or key that named it) and APIs."""

    provider: Provider  # any provider: only those that can be asked (`list_models`, `missing_api`) are
    models: list[tuple[str, str]] = field(default_factory=list)
    batch: bool = False  # --batch: the Files and Batches API
    responses_field: str | None = None  # api = responses: the flag or key that chose it ("--api", "--judge-api")


def _endpoint(provider: Provider) -> tuple[object, ...]:
    """Providers that reach the same server with the same key see the same list: ask it once."""
    return provider.base_url, provider.api_key_env, provider.header_names


def _served(names: list[str]) -> str:
    shown = ", ".join(names[:SHOWN_MODELS])
    return shown + (f" and {len(names) - SHOWN_MODELS} more" if len(names) > SHOWN_MODELS else "")


def no_batch_api(route: str) -> InputError:
    """The one line for an endpoint without the Files and Batches API (`route`: "GET /v1/batches: HTTP 404")."""
    return InputError(f"the endpoint has no Files and Batches API ({route}); write the requests with "
                      "--export-requests FILE.jsonl, run them with `vllm run-batch -i FILE.jsonl -o OUT.jsonl`, "
                      "then --import-responses OUT.jsonl", field="--batch")


def preflight(checks: Sequence[Check], check_models: bool = True) -> None:
    """Raise one InputError for the first thing the servers cannot do; nothing for what they do not say."""
    listed: dict[tuple[object, ...], list[str] | None] = {}
    probed: dict[tuple[object, ...], str | None] = {}
    for check in checks:
        provider = check.provider
        if not isinstance(provider, AskableServer):
            continue
        where = _endpoint(provider)
        base_url = provider.base_url or "the endpoint"
        if check_models and check.models:
            if where not in listed:
                listed[where] = provider.list_models()
            names = listed[where]
            if names is not None:
                for model, flag in check.models:
                    if model not in names:
                        # a grader's judge model is replaced by a flag, not by editing the grader uploaded as is
                        fix = "--judge-model NAME judges with one it serves; " if flag == "grader model" else ""
                        raise InputError(f"unknown model {model!r}: {base_url} serves {_served(names)} (GET /models; "
                                         f"{fix}--skip-model-check for a gateway that routes names it does not "
                                         "list)", field=flag)
        if check.batch:
            key = (*where, "batch")
            if key not in probed:
                probed[key] = provider.missing_api("batch")
            route = probed[key]
            if route is not None:
                raise no_batch_api(route)
        if check.responses_field is not None:
            key = (*where, "responses")
            if key not in probed:
                probed[key] = provider.missing_api("responses")
            if probed[key] is not None:
                chat = "--judge-api chat" if "judge" in check.responses_field else "--api chat"
                raise InputError(f"the endpoint has no Responses API ({probed[key]}); use {chat}",
                                 field=check.responses_field)


def run_checks(spec: RunSpec, runs: Sequence[ModelRun], providers: Mapping[str, Provider], grader: GraderConfig,
               judge: Judge | None = None, batch: bool = False) -> list[Check]:
    """The checks of one `rfteval run`: each model's name and API on its provider, and the judge's.

    The judge is asked through the run's judge when one was handed in (`judge.provider`), else through a
    model's provider on the same endpoint, else through a provider built for the purpose (httpx transport: it
    is not kept, and that transport leaves nothing to close)."""
    checks: list[Check] = []
    for run in runs:
        provider = providers.get(run.label)
        if provider is None:
            continue
        responses = "--api" if provider.api == "responses" else None
        checks.append(Check(provider, [(run.model, f"--model {run.label}")], batch=batch and batchable(provider),
                            responses_field=responses))
    models = judge_models(grader, spec.judge.model)
    if not models:
        return checks
    if judge is not None:
        jprovider = judge.provider
    else:
        from rfteval.providers.openai_provider import OPENAI_BASE_URL

        endpoint = spec.judge_endpoint()
        want = ((endpoint.base_url or OPENAI_BASE_URL).rstrip("/"), endpoint.api_key_env, endpoint.api)
        same = [p for p in providers.values() if (p.base_url, p.api_key_env, p.api) == want]
        jprovider = same[0] if same else endpoint.provider(transport="httpx")
    checks.append(judge_check(jprovider, models, overridden=bool(spec.judge.model)))
    return checks


def judge_models(grader: GraderConfig, override: str | None = None) -> list[str]:
    """The judge models a grader asks for (a multi's sub-graders included); the override replaces them all."""
    from rfteval.graders.base import walk

    models = sorted({m for c in walk(grader) if c.calls_judge and isinstance(m := getattr(c, "model", None), str)})
    return [override] if models and override else models


def judge_check(provider: Provider, models: list[str], overridden: bool = False) -> Check:
    """The check of a judge's provider; `rfteval grade` and the other judge users can hand it to preflight()
    (`Judge.provider`, `judge_models(config, judge.model_override)`)."""
    flag = "--judge-model" if overridden else "grader model"
    return Check(provider, [(m, flag) for m in models],
                 responses_field="--judge-api" if provider.api == "responses" else None)
