"""What a model provider is: one request in, one generation out, failures classified for the runner."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal, Protocol

from rfteval.data.json_types import JSONMapping, JSONObject, JSONValue

if TYPE_CHECKING:
    from collections.abc import Sequence

    import openai

ErrorKind = Literal[
    "rate_limit",  # 429: retry, honouring Retry-After
    "server",  # 5xx: retry
    "timeout",  # no answer within the per-request timeout: retry
    "connection",  # refused, reset: retry
    "malformed",  # 2xx whose body is not a valid response: retry
    "bad_request",  # 400/422: no retry; the cell is an error
    "auth",  # 401/403: stops the run at once
    "not_found",  # 404 / unknown model: stops the run at once
    "refusal",  # the model refused (structured outputs): recorded, not retried
    "missing",  # replay: no recording for this cell
    "capped",  # a judge call past its budget (providers.judge.JudgeBudget): not sent
]
RETRYABLE: frozenset[str] = frozenset({"rate_limit", "server", "timeout", "connection", "malformed"})
FATAL: frozenset[str] = frozenset({"auth", "not_found"})
# a server's refusal of a prompt (and output limit) longer than its context: llama-cpp-python's 400
# context_length_exceeded, vLLM's "maximum context length", llama-server's "exceeds the available context size"
CONTEXT_EXCEEDED = re.compile(r"context_length_exceeded|maximum context length|context (window|size|length)|"
                              r"exceeds? the (available )?context", re.I)


def exceeds_context(kind: str, message: str) -> bool:
    """Whether an error (its kind and message) is the server refusing a request as longer than its context: a
    judge's prompt (graders.judged) or an agent's history (run.rollout's stop reason `context`)."""
    return kind in ("bad_request", "server") and bool(CONTEXT_EXCEEDED.search(message))


class ProviderError(Exception):
    """`rate` holds the x-ratelimit-* figures the answer carried (see RateInfo); `unavailable` marks flex
    processing's 429 "resource unavailable": capacity, not the account's rate, so it waits longer and does not
    cut concurrency."""

    def __init__(self, kind: ErrorKind, message: str, status: int | None = None, retry_after: float | None = None,
                 rate: RateInfo | None = None, unavailable: bool = False,
                 usage: dict[str, int | None] | None = None):
        super().__init__(message)
        self.kind = kind
        self.status = status
        self.retry_after = retry_after
        self.rate = rate
        self.unavailable = unavailable
        self.usage = usage  # what a call that was answered (a refusal) still cost: its tokens are counted
        self.sent = False  # a request went out and this is how it ended (the judge counts such calls)
        self.call_id: str | None = None  # set by the judge for a call it sent, so it is counted once
        self.cached = False
        self.final = False  # never retried, whatever its kind: the endpoint was given up (a judge that stopped)

    @property
    def retryable(self) -> bool:
        return self.kind in RETRYABLE

    @property
    def fatal(self) -> bool:
        return self.kind in FATAL


@dataclass(frozen=True)
class RateInfo:
    """What an answer's x-ratelimit-* headers say (None: not sent); resets in seconds."""

    limit_requests: int | None = None
    remaining_requests: int | None = None
    reset_requests_s: float | None = None
    limit_tokens: int | None = None
    remaining_tokens: int | None = None
    reset_tokens_s: float | None = None

    def low(self, share: float) -> bool:
        """True when requests or tokens left are under `share` of the limit: slow down before a 429."""
        for left, limit in ((self.remaining_requests, self.limit_requests),
                            (self.remaining_tokens, self.limit_tokens)):
            if left is not None and limit and left < share * limit:
                return True
        return False

    def exhausted_wait(self) -> float | None:
        """Seconds until the exhausted budget (0 left) resets, if any is exhausted."""
        waits = [reset for left, reset in ((self.remaining_requests, self.reset_requests_s),
                                           (self.remaining_tokens, self.reset_tokens_s))
                 if left == 0 and reset is not None]
        return max(waits) if waits else None


@dataclass(frozen=True)
class Sampling:
    """Sampling settings shared by the spec, the flags and every provider."""

    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    reasoning_effort: str | None = None
    max_output_tokens: int | None = None
    # a JSON schema wrapper {"name", "schema", "strict"?} (structured outputs), or a format sent as the user gave
    # it: {"type": "json_object", ...any keys the server takes, e.g. llama.cpp's "schema"} or {"type": "text"}
    response_format: JSONObject | None = None

    @property
    def asks_for_json(self) -> bool:
        """Whether the response format asks for JSON (json_schema or json_object): then sample.output_json is
        filled, leniently parsed, as OpenAI fills it for a job with a response_format."""
        return asks_for_json(self.response_format)

    def for_epoch(self, epoch: int) -> Sampling:
        """The sampling of one epoch: a given seed S becomes S + epoch - 1, so each epoch is its own sample (a
        server that honours seeds would otherwise return the same output N times) and epoch 1 keeps S itself.
        No seed given: none is sent, in any epoch."""
        if self.seed is None or epoch == 1:
            return self
        return replace(self, seed=self.seed + epoch - 1)


def asks_for_json(response_format: JSONMapping | None) -> bool:
    return bool(response_format) and (response_format or {}).get("type") != "text"


@dataclass(frozen=True)
class GenerationRequest:
    model: str
    messages: Sequence[JSONValue]  # the item's own (message objects), or the judge's: read, never changed
    sampling: Sampling = field(default_factory=Sampling)
    tools: Sequence[JSONValue] | None = None  # the item's own, as its line has them
    tool_choice: JSONValue = None  # the item's own (a dataset field); None: "auto" whenever tools are given
    item_id: str = ""
    epoch: int = 1


@dataclass
class Generation:
    output_text: str
    output_tools: list[JSONValue] = field(default_factory=list)  # the tool calls, as the server sent them
    output_json: JSONValue = None
    choices: list[JSONValue] | None = None
    usage: dict[str, int | None] = field(default_factory=dict)  # input_tokens, output_tokens, reasoning_tokens
    finish_reason: str | None = None
    cached: bool = False
    call_id: str | None = None  # judge answers: the judge-cache key of the call that produced it
    rate: RateInfo | None = None  # the answer's rate-limit headers, for adaptive concurrency
    tier: str | None = None  # the service tier that served it ("flex" bills at batch prices)
    # The thinking a reasoning model's server sent apart from the content (reasoning_content / reasoning, the
    # Responses API's reasoning summaries): None when it sent none, "" for reasoning it did not show. output_text
    # stays the content as sent; rfteval.data.reasoning splits the answer out at grading time, so --reasoning can change
    # on a resumed run without re-sending anything.
    reasoning: str | None = None


Warn = Callable[[str], None]


class Provider(Protocol):
    """An endpoint. `identity()` (no secrets) and `request_body()` make the response cache key; the attributes
    say where it is, which a run's preflight and batch phases read, and carry its warnings to the run."""

    @property
    def api(self) -> str:
        """The request shape, "chat" or "responses" (one that reaches no server answers as "chat")."""
        ...

    @property
    def base_url(self) -> str | None:
        """The server's root URL; None for one that reaches no server (a replay)."""
        ...

    @property
    def api_key_env(self) -> str | None:
        """The NAME of the variable holding the key (never the key); None where no key is sent."""
        ...

    @property
    def header_names(self) -> tuple[str, ...]:
        """The names of the extra headers sent, sorted (never their values): part of which server is asked."""
        ...

    @property
    def max_epoch(self) -> int | None:
        """The most epochs it can answer (a replay's recordings); None: any number."""
        ...

    on_warning: Warn | None  # where its one-line warnings go (a run points it at its monitor); None: dropped

    def identity(self) -> JSONObject: ...

    def request_body(self, request: GenerationRequest) -> JSONObject: ...

    async def generate(self, request: GenerationRequest, timeout_s: float) -> Generation: ...

    async def aclose(self) -> None: ...


class ServerlessProvider:
    """The Provider attributes of one that reaches no server (a replay, a test's stand-in): its subclasses
    implement the methods."""

    api = "chat"
    base_url: str | None = None
    api_key_env: str | None = None
    header_names: tuple[str, ...] = ()
    max_epoch: int | None = None
    on_warning: Warn | None = None


class BatchProvider(Provider, Protocol):
    """A provider behind an OpenAI-compatible endpoint: its SDK client has the Files and Batches resources
    (`rfteval.providers.batchable` tells one apart)."""

    @property
    def client(self) -> openai.AsyncOpenAI: ...

    def endpoint_path(self) -> str: ...

    def classify(self, exc: Exception, timeout_s: float = ...) -> ProviderError | None: ...
