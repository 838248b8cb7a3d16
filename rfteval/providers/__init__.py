"""Model providers. `make_provider` builds one by name; each backend is imported only when it is built."""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rfteval.errors import InputError
from rfteval.providers.base import Generation, GenerationRequest, Provider, ProviderError, Sampling

if TYPE_CHECKING:
    from rfteval.providers.base import Provider
    from rfteval.run.spec import ModelRun

__all__ = ["KINDS", "Generation", "GenerationRequest", "Provider", "ProviderError", "Sampling", "batchable",
           "build_providers", "make_provider"]

KINDS = ("openai", "replay")


def _provider_class(kind: str) -> type:
    if kind == "openai":
        from rfteval.providers.openai_provider import OpenAIProvider

        return OpenAIProvider
    if kind == "replay":
        from rfteval.providers.replay import ReplayProvider

        return ReplayProvider
    raise InputError(f"unknown provider {kind!r}; expected one of: {', '.join(KINDS)}", field="provider")


def make_provider(kind: str, **settings: Any) -> Provider:
    """Build a provider; settings it does not take are an InputError naming them (a spec typo, not a crash)."""
    cls = _provider_class(kind)
    params = inspect.signature(cls).parameters
    unknown = sorted(set(settings) - set(params) - {"self"})
    if unknown:
        allowed = ", ".join(p for p in params if p != "self")
        raise InputError(f"unknown setting(s) {', '.join(unknown)} for provider {kind!r}; allowed: {allowed}", field="provider")
    return cls(**settings)


def build_providers(runs: Sequence[ModelRun], service_tier: str | None = None,
                    transport: str | None = None) -> dict[str, Provider]:
    """One provider per model run (rfteval.run.spec.ModelRun), by label; tier and transport go to OpenAI endpoints."""
    extra: dict[str, Any] = {}
    if service_tier is not None:
        extra["service_tier"] = service_tier
    if transport is not None:
        extra["transport"] = transport
    return {run.label: make_provider(run.provider, **run.settings, **(extra if run.provider == "openai" else {}))
            for run in runs}


def batchable(provider: Provider) -> bool:
    """Providers with a Files/Batches client (OpenAI-compatible endpoints); replay answers locally."""
    return hasattr(provider, "client") and hasattr(provider, "endpoint_path")
