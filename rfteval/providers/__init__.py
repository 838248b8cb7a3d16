"""Model providers. `make_provider` builds one by name; each backend is imported only when it is built."""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, TypeGuard

from rfteval.errors import InputError
from rfteval.providers.base import BatchProvider, Generation, GenerationRequest, Provider, ProviderError, Sampling

if TYPE_CHECKING:
    from rfteval.providers.base import Provider

__all__ = ["KINDS", "BatchProvider", "Generation", "GenerationRequest", "Provider", "ProviderError", "Sampling", "batchable",
           "make_provider"]

KINDS = ("openai", "replay")


def _provider_class(kind: str) -> type:
    if kind == "openai":
        from rfteval.providers.openai_provider import OpenAIProvider

        return OpenAIProvider
    if kind == "replay":
        from rfteval.providers.replay import ReplayProvider

        return ReplayProvider
    raise InputError(f"unknown provider {kind!r}; expected one of: {', '.join(KINDS)}", field="provider")


def make_provider(kind: str, **settings: object) -> Provider:
    """Build a provider; settings it does not take are an InputError naming them (a spec typo, not a crash).
    The settings are only carried to the provider's constructor, which checks their values."""
    cls = _provider_class(kind)
    params = inspect.signature(cls).parameters
    unknown = sorted(set(settings) - set(params) - {"self"})
    if unknown:
        allowed = ", ".join(p for p in params if p != "self")
        raise InputError(f"unknown setting(s) {', '.join(unknown)} for provider {kind!r}; allowed: {allowed}", field="provider")
    return cls(**settings)


def batchable(provider: Provider) -> TypeGuard[BatchProvider]:
    """Providers with a Files/Batches client (OpenAI-compatible endpoints); replay answers locally."""
    return hasattr(provider, "client") and hasattr(provider, "endpoint_path")
