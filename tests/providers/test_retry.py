"""Retry policy: backoff bounds, Retry-After as a floor, which errors are retried, and how often."""

from __future__ import annotations

import asyncio
import random

import pytest

from rfteval.providers.base import ProviderError
from rfteval.providers.retry import RetryPolicy, call_with_retries


class Flaky:
    """Fails with the given errors in order, then returns 'ok'."""

    def __init__(self, *errors: BaseException):
        self.errors = list(errors)
        self.calls = 0

    async def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "ok"


def run(fn, policy, **kw):
    waits: list[float] = []

    async def fake_sleep(s: float) -> None:
        waits.append(s)

    retries: list[tuple[int, str, float]] = []
    result = asyncio.run(call_with_retries(
        fn, policy, lambda n, e, w: retries.append((n, getattr(e, "kind", ""), w)), sleep=fake_sleep, **kw))
    return result, waits, retries


def test_backoff_is_full_jitter_within_the_exponential_cap():
    policy = RetryPolicy(base_s=0.5, max_backoff_s=4.0)
    rng = random.Random(1)
    for retry, cap in [(1, 0.5), (2, 1.0), (3, 2.0), (4, 4.0), (9, 4.0)]:
        draws = [policy.backoff(retry, rng) for _ in range(400)]
        assert all(0.0 <= d <= cap for d in draws)
        assert max(draws) > 0.8 * cap and min(draws) < 0.2 * cap  # uses the whole interval: full jitter


def test_retry_after_is_a_floor_and_capped():
    policy = RetryPolicy(base_s=0.01, max_backoff_s=0.02, max_retry_after_s=30)
    assert policy.delay(1, ProviderError("rate_limit", "x", 429, retry_after=7.0), random.Random(0)) == 7.0
    assert policy.delay(1, ProviderError("rate_limit", "x", 429, retry_after=999.0), random.Random(0)) == 30.0
    assert policy.delay(1, ProviderError("server", "x", 500), random.Random(0)) <= 0.01


def test_retries_retryable_kinds_then_succeeds_and_reports_each_retry():
    fn = Flaky(ProviderError("rate_limit", "slow down", 429, retry_after=2.0), ProviderError("server", "boom", 500),
               ProviderError("timeout", "t"), ProviderError("connection", "c"), ProviderError("malformed", "m"))
    result, waits, retries = run(fn, RetryPolicy(max_retries=10, base_s=0.001), rng=random.Random(3))
    assert result == "ok" and fn.calls == 6
    assert [r[:2] for r in retries] == [(1, "rate_limit"), (2, "server"), (3, "timeout"), (4, "connection"),
                                        (5, "malformed")]
    assert waits[0] == 2.0  # Retry-After honoured
    assert waits == [r[2] for r in retries]


@pytest.mark.parametrize("kind", ["bad_request", "auth", "not_found", "refusal", "missing"])
def test_non_retryable_kinds_raise_at_once(kind):
    fn = Flaky(ProviderError(kind, "no"))
    with pytest.raises(ProviderError) as info:
        run(fn, RetryPolicy(max_retries=5))
    assert info.value.kind == kind and fn.calls == 1


def test_gives_up_after_max_retries_with_the_last_error():
    fn = Flaky(*[ProviderError("server", f"boom{i}", 500) for i in range(10)])
    with pytest.raises(ProviderError, match="boom3"):
        run(fn, RetryPolicy(max_retries=3, base_s=0.001))
    assert fn.calls == 4  # one try + 3 retries


def test_other_exceptions_are_not_retried():
    fn = Flaky(ValueError("a bug"))
    with pytest.raises(ValueError):
        run(fn, RetryPolicy())
    assert fn.calls == 1


def test_custom_retryable_set():
    fn = Flaky(ProviderError("missing", "later"))
    result, _, retries = run(fn, RetryPolicy(retryable=frozenset({"missing"}), base_s=0.001))
    assert result == "ok" and len(retries) == 1


def test_real_sleep_is_used_by_default():
    fn = Flaky(ProviderError("server", "x", 500))
    assert asyncio.run(call_with_retries(fn, RetryPolicy(base_s=0.001))) == "ok"


def test_flex_unavailable_waits_longer_and_never_near_zero():
    policy = RetryPolicy(base_s=0.5, max_backoff_s=60.0)
    rng = random.Random(1)
    plain = ProviderError("rate_limit", "busy")
    unavailable = ProviderError("rate_limit", "Resource unavailable", unavailable=True)
    for retry in (1, 2, 3):
        waits = [policy.delay(retry, unavailable, rng) for _ in range(200)]
        cap = min(60.0, 0.5 * 10 * 2 ** (retry - 1))
        assert min(waits) >= cap / 2 and max(waits) <= cap
        assert max(policy.delay(retry, plain, rng) for _ in range(200)) <= 0.5 * 2 ** (retry - 1)


# ---------------------------------------------------------------- what retrying cannot fix


def test_one_line_keeps_the_first_line_and_the_fields_a_validation_header_hides() -> None:
    from rfteval.providers.retry import one_line

    assert one_line("HTTP 500: boom\n  at line 3\n  at line 4") == "HTTP 500: boom"
    text = ("HTTP 500: 1 validation error for CreateChatCompletionRequest\nresponse_format.type\n  Input should be "
            "'text' or 'json_object' [type=literal_error]\nmore")
    assert one_line(text, 400) == ("HTTP 500: 1 validation error for CreateChatCompletionRequest: "
                                   "response_format.type: Input should be 'text' or 'json_object' [type=literal_error]")
    short = one_line("x" * 300, 50)
    assert len(short) == 50 and short.endswith("…") and "\n" not in one_line("a\r\nb")


@pytest.mark.parametrize(("message", "body", "option"), [
    ("Input should be 'text' or 'json_object'", {"response_format": {}}, "--response-format"),
    ("response_format.type: invalid", None, "--response-format"),
    ("Unrecognized request argument supplied: seed", {"seed": 1}, "--seed"),
    ("max_tokens must be at most 4096", {"max_completion_tokens": 9000}, "--max-output-tokens"),
    ("'tool_choice' is only allowed when 'tools' are specified", {"tools": []}, "the dataset's tools"),
    ("reasoning_effort is not supported with this model", {"reasoning_effort": "low"}, "--reasoning-effort"),
    ("temperature must be at most 2", {"temperature": 3}, "--temperature"),
    ("top_p out of range", {"top_p": 3}, "--top-p"),
    ("invalid service_tier", {}, "--service-tier"),
    ("the model is busy", {"seed": 1}, "the request"),
    ("Unsupported parameter: 'text.format' is not supported", {"text": {}}, "--response-format"),
    ("reasoning.effort: unknown value 'max'", {"reasoning": {"effort": "max"}}, "--reasoning-effort"),
    ("seeds are great; temperature must be at most 2", {"temperature": 3}, "--temperature"),  # a word, not the key
])
def test_the_option_behind_a_refused_key(message: str, body: dict | None, option: str) -> None:
    from rfteval.providers.retry import option_of

    assert option_of(message, body) == option


def test_the_refusal_watch_stops_on_identical_refusals_before_any_success() -> None:
    from rfteval.providers.retry import REJECT_AFTER, RefusalWatch

    watch = RefusalWatch()
    validation = ProviderError("server", "HTTP 500: Input should be 'text'", status=500)
    assert [watch.failed(validation) for _ in range(REJECT_AFTER)] == [False] * (REJECT_AFTER - 1) + [True]
    watch = RefusalWatch()
    watch.failed(validation)
    watch.ok()  # a success: later refusals are the cells' own
    assert not any(watch.failed(validation) for _ in range(10))
    watch = RefusalWatch()
    for i in range(10):  # refusals that differ are not one request shape refused
        assert not watch.failed(ProviderError("bad_request", f"HTTP 400: context of item {i} too long", status=400))
    watch = RefusalWatch()
    transient = [ProviderError("server", "HTTP 503: overloaded", status=503), ProviderError("rate_limit", "HTTP 429"),
                 ProviderError("timeout", "no answer"), ProviderError("connection", "refused")]
    assert not any(watch.failed(e) for e in transient * 5)
    bad = ProviderError("bad_request", "HTTP 400: Unrecognized request argument supplied: seed", status=400)
    assert [watch.failed(bad) for _ in range(REJECT_AFTER)][-1] is True


# llama-cpp-python's server (0.3.x) answering a `developer` message: FastAPI's RequestValidationError printed into
# a 500, one dict per member of the messages union pydantic tried (captured from tests/support/real_server.py's server; the
# union members there are class names, shortened here to typed-dict as older pydantic printed TypedDicts)
DEVELOPER_500 = (
    "HTTP 500: 7 validation errors:\n"
    "  {'type': 'literal_error', 'loc': ('body', 'messages', 0, 'typed-dict', 'role'), 'msg': \"Input should be "
    "'system'\", 'input': 'developer', 'ctx': {'expected': \"'system'\"}}\n"
    "  {'type': 'literal_error', 'loc': ('body', 'messages', 0, 'typed-dict', 'role'), 'msg': \"Input should be "
    "'user'\", 'input': 'developer', 'ctx': {'expected': \"'user'\"}}\n"
    "  {'type': 'literal_error', 'loc': ('body', 'messages', 0, 'typed-dict', 'role'), 'msg': \"Input should be "
    "'assistant'\", 'input': 'developer', 'ctx': {'expected': \"'assistant'\"}}\n"
    "  {'type': 'literal_error', 'loc': ('body', 'messages', 0, 'typed-dict', 'role'), 'msg': \"Input should be "
    "'tool'\", 'input': 'developer', 'ctx': {'expected': \"'tool'\"}}\n"
    "  {'type': 'missing', 'loc': ('body', 'messages', 0, 'typed-dict', 'tool_call_id'), 'msg': 'Field required', "
    "'input': {'role': 'developer', 'content': 'Bind the VIP'}}\n"
    "  {'type': 'literal_error', 'loc': ('body', 'messages', 0, 'typed-dict', 'role'), 'msg': \"Input should be "
    "'function'\", 'input': 'developer', 'ctx': {'expected': \"'function'\"}}\n"
    "  {'type': 'missing', 'loc': ('body', 'messages', 0, 'typed-dict', 'name'), 'msg': 'Field required', "
    "'input': {'role': 'developer', 'content': 'Bind the VIP'}}\n")


def test_a_fastapi_validation_list_is_condensed_to_the_field_and_value_it_refuses() -> None:
    from rfteval.providers.retry import DEVELOPER_FIX, one_line, option_of, refuses_developer

    line = one_line(DEVELOPER_500, 400)
    assert line == ("HTTP 500: 7 validation errors: messages[0].role: Input should be 'system', 'user', "
                    "'assistant', 'tool' or 'function' (input: 'developer')")
    assert refuses_developer(DEVELOPER_500) and option_of(DEVELOPER_500, {"messages": []}) == DEVELOPER_FIX
    assert not refuses_developer("HTTP 500: Input should be 'text' or 'json_object' (input: 'json_schema')")
    # a list whose errors name several fields: the first shown, the others counted
    two = ("HTTP 422: 2 validation errors:\n  {'type': 'int_type', 'loc': ('body', 'seed'), 'msg': 'Input should be "
           "a valid integer', 'input': 'x'}\n  {'type': 'missing', 'loc': ('body', 'model'), 'msg': 'Field required', "
           "'input': {}}")
    assert one_line(two, 400) == "HTTP 422: 2 validation errors: seed: Input should be a valid integer (input: 'x')"
    assert one_line("HTTP 500: 2 validation errors:\nnot a dict", 400) == "HTTP 500: 2 validation errors:"
