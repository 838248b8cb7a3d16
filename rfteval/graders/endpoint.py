"""`endpoint` (Agent RFT's): the grader is the user's own HTTP endpoint, called as Agent RFT's service called it.

    {"type": "endpoint", "name": "...", "url": "https://example.com/grade", "headers": {"Authorization": "Bearer
     ${KEY}"}, "rate_limit": 50, "pass_threshold": 8}

Each sample is POSTed as `{"sample": {...}, "item": {...}, "trace_id": "trace_..."}` and the answer's `{"score":
number}` is its score, as Microsoft's samples write the contract (microsoft-foundry/fine-tuning,
Demos/Agentic_RFT_PrivatePreview). `sample` is the grader's sample as OpenAI's graders see it (the final turn's
`output_text`, `output_tools`, `choices`, ...; rfteval's `sample.rollout` is not sent: Agent RFT never sent a
transcript, a grader joined its tool server's logs on the trace id); `item` is the whole dataset line, references
and `messages` included; `trace_id` is the one the rollout's tool calls carried (sample.rollout.trace_id), so a
grader that joins its tool logs works as it did on the service; a sample with none (no tool ran, or outputs graded
outside a run) gets a new one.

`${VAR}` in a header value (or the URL) is read from the environment when the grader is built (an unset one is one
line before anything is graded) and written nowhere (rfteval.providers.agent_rft). `rate_limit` is the most
requests a second sent to the endpoint, retries included, across every batch the grader grades. A 5xx, a 429, a
timeout (10 minutes) or a dropped connection is retried 3 times; then the sample's grade is an
`endpoint_grader_server_error`, as is any other answer that is not a 2xx, and an answer with no finite `score` an
`endpoint_grader_parse_error`: counted errors, never a score the endpoint gave, re-graded by re-running the same
command (the endpoint is the user's, fixed without the grader config changing). The endpoint declares no range:
its scores are taken as they come (Microsoft's countdown grader scores 0 to 5), `pass_threshold` says what passes.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING, Literal

from pydantic import Field, ValidationInfo, field_validator

from rfteval.graders.base import BuildContext, GraderConfig, GradeResult, Pair, register
from rfteval.graders.judged import finite_number
from rfteval.providers.agent_rft import (
    CALL_TIMEOUT_S,
    ENDPOINT_CONCURRENCY,
    MAX_BYTES,
    EndpointFailed,
    Pacer,
    check_placeholders,
    new_client,
    new_trace_id,
    post,
    resolve,
    run_sync,
    shown_url,
    variables,
)

if TYPE_CHECKING:
    import httpx

    from rfteval.data.json_types import JSONObject
    from rfteval.data.sample import Sample
    from rfteval.providers.agent_rft import Resolved

ENDPOINT_SERVER = "endpoint_grader_server_error"  # no usable answer (after the retries, where retried)
ENDPOINT_PARSE = "endpoint_grader_parse_error"  # an answer without a finite `score`
RETRIED_STATUSES = frozenset({408, 429})  # besides the 5xx: Agent RFT retried a grader "for any reason"


class EndpointConfig(GraderConfig):
    type: Literal["endpoint"]
    url: str
    headers: dict[str, str] = Field(default_factory=dict)
    rate_limit: float | None = Field(None, gt=0)  # requests a second, at most
    pass_threshold: float | None = None

    def score_range(self) -> tuple[float, float, str]:
        return 0.0, 1.0, "assumed [0, 1]: an endpoint grader's server decides its scores (Agent RFT declares no range)"

    def needs_env(self) -> list[tuple[str, str]]:
        fields = [("url", self.url), *((f"headers.{k}", v) for k, v in self.headers.items())]
        return [(field, var) for field, text in fields for var in variables(text)]

    @field_validator("url")
    @classmethod
    def _url(cls, value: str, info: ValidationInfo) -> str:
        check_placeholders(value)
        if not re.match(r"^(https?://[^\s/]+|\$\{)", value):
            raise ValueError(f"must be an http(s) URL, got {shown_url(value)!r}")
        notes = (info.context or {}).get("notes")
        if isinstance(notes, list):
            name = (info.data or {}).get("name", "endpoint")
            notes.append(f"{name!r} is Agent RFT's endpoint grader: each sample is POSTed to {shown_url(value)} (with "
                         "the item and the rollout's trace_id); OpenAI's public grader API has no such type")
        return value

    @field_validator("headers")
    @classmethod
    def _headers(cls, value: dict[str, str]) -> dict[str, str]:
        for text in value.values():
            check_placeholders(text)
        return value


class EndpointGrader:
    """Grades a batch by POSTing each pair (ENDPOINT_CONCURRENCY at a time, paced by rate_limit) from an event loop
    of its own, so that it is called as every grader is: synchronously, from any thread (a run's grading threads, a
    trainer's reward call inside its own event loop)."""

    def __init__(self, config: EndpointConfig, ctx: BuildContext | None = None, *, retry_base_s: float = 0.5,
                 timeout_s: float = CALL_TIMEOUT_S):
        self.config = config
        self.endpoint: Resolved = resolve(config.url, config.headers, None)  # InputError: a variable not set
        self.pace = Pacer(config.rate_limit)
        self.retry_base_s, self.timeout_s = retry_base_s, timeout_s

    def grade_batch(self, pairs: Sequence[Pair], units: Sequence[Hashable] | None = None) -> list[GradeResult]:
        if not pairs:
            return []
        return run_sync(lambda: self._grade_all(pairs))

    async def _grade_all(self, pairs: Sequence[Pair]) -> list[GradeResult]:
        gate = asyncio.Semaphore(ENDPOINT_CONCURRENCY)
        async with new_client(self.timeout_s) as client:
            return list(await asyncio.gather(*(self._grade(client, gate, s, i) for s, i in pairs)))

    async def _grade(self, client: httpx.AsyncClient, gate: asyncio.Semaphore, sample: Sample,
                     item: JSONObject) -> GradeResult:
        trace_id = _trace_id(sample) or new_trace_id()
        details: JSONObject = {"trace_id": trace_id}
        sent = {k: v for k, v in sample.items() if k != "rollout"}
        try:
            payload = json.dumps({"sample": sent, "item": item, "trace_id": trace_id}, ensure_ascii=False,
                                 allow_nan=False, separators=(",", ":")).encode()
        except ValueError as exc:
            return GradeResult.failed(ENDPOINT_SERVER, f"the sample or item is not JSON ({exc}); nothing was sent",
                                      details=details)
        if len(payload) > MAX_BYTES:
            return GradeResult.failed(ENDPOINT_SERVER, f"the request is {len(payload):,} bytes, over an endpoint "
                                      f"grader's 1 MB limit ({MAX_BYTES:,} bytes); it was not sent", details=details)
        async with gate:
            try:
                answer = await post(client, self.endpoint, payload, timeout_s=self.timeout_s, retry_timeouts=True,
                                    retry_statuses=RETRIED_STATUSES, base_s=self.retry_base_s, pace=self.pace)
            except EndpointFailed as exc:
                return GradeResult.failed(ENDPOINT_SERVER, f"{shown_url(self.endpoint.url)}: {exc}", details=details)
        text = self.endpoint.secrets.scrub(answer.body.decode("utf-8", "replace"))
        if answer.over:
            return GradeResult.failed(ENDPOINT_SERVER, f"{shown_url(self.endpoint.url)}: its answer is over 1 MB",
                                      details=details)
        if not 200 <= answer.status < 300:
            return GradeResult.failed(ENDPOINT_SERVER, f"{shown_url(self.endpoint.url)}: HTTP {answer.status}: "
                                      f"{text[:300]}", details=details)
        try:
            obj = json.loads(text)
        except ValueError:
            obj = None
        score = finite_number(obj.get("score")) if isinstance(obj, dict) else None
        if score is None:
            return GradeResult.failed(ENDPOINT_PARSE, f'{shown_url(self.endpoint.url)}: the answer has no finite '
                                      f'"score": {text[:300]!r}', details=details)
        threshold = self.config.pass_threshold
        return GradeResult(score, passed=None if threshold is None else score >= threshold, details=details)


def _trace_id(sample: Sample) -> str | None:
    rollout = sample.get("rollout")
    trace = rollout.get("trace_id") if isinstance(rollout, dict) else None
    return trace if isinstance(trace, str) and trace else None


@register("endpoint", EndpointConfig, "Agent RFT's: each sample POSTed to the user's grading endpoint, its "
          "{\"score\"} the score")
def build(config: EndpointConfig, ctx: BuildContext) -> EndpointGrader:
    return EndpointGrader(config, ctx)
