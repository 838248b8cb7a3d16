"""The judge client against the local OpenAI-compatible server: cache, dedupe, retries, limits, usage, repeats."""

from __future__ import annotations

import json
import threading
import time

import pytest

from rfteval.graders.judged import chat_content, parse_json_answer
from rfteval.providers.base import Generation, GenerationRequest, ProviderError, Sampling
from rfteval.providers.judge import Judge, cache_key, judge_repeat
from rfteval.providers.openai_provider import OpenAIProvider
from rfteval.providers.retry import RetryPolicy
from tests.support.fake_openai import FakeOpenAI, Reply

FAST = RetryPolicy(max_retries=3, base_s=0.001, max_backoff_s=0.01)


def req(text: str, model: str = "judge-m") -> GenerationRequest:
    return GenerationRequest(model=model, messages=[{"role": "user", "content": text}], sampling=Sampling(seed=1))


def make_judge(server: FakeOpenAI, **kw) -> Judge:
    kw.setdefault("retry_policy", FAST)
    return Judge(OpenAIProvider(server.base_url), **kw)


def test_complete_returns_answers_in_order_and_counts_usage(fake_openai):
    with make_judge(fake_openai) as judge:
        out = judge.complete([req("a b c"), req("d")])
    assert [g.output_text for g in out] == ["echo:judge-m:a b c", "echo:judge-m:d"]
    assert all(isinstance(g, Generation) and not g.cached for g in out)
    usage = judge.usage()["judge-m"]
    assert usage["calls"] == 2 and usage["cache_hits"] == 0 and usage["errors"] == 0
    # the fake counts words and punctuation: output "echo:judge-m:a b c" = echo : judge - m : a b c = 9 tokens
    assert usage["output_tokens"] == 9 + 7
    assert usage["input_tokens"] == 3 + 1


def test_cache_makes_a_rerun_free(fake_openai, tmp_path):
    cache = tmp_path / "judge.jsonl"
    with make_judge(fake_openai, cache_path=cache) as judge:
        first = judge.complete([req("x"), req("y")])
    assert len(fake_openai.requests) == 2
    with make_judge(fake_openai, cache_path=cache) as judge:
        again = judge.complete([req("y"), req("x")])
        assert judge.stats()["calls"] == 0 and judge.stats()["cache_hits"] == 2
        assert judge.usage()["judge-m"]["input_tokens"] == 0  # a cached answer costs nothing
    assert len(fake_openai.requests) == 2  # the server saw no second call
    assert [g.output_text for g in again] == [first[1].output_text, first[0].output_text]
    assert all(g.cached for g in again)
    lines = cache.read_text().splitlines()
    assert len(lines) == 2 and all(json.loads(line)["key"] for line in lines)


def test_a_request_shared_in_flight_is_counted_so_calls_cached_and_shared_add_up(fake_openai):
    """Issue 27 (10): a run's judge line said "12 calls, 5 cached" for 36 graded cells; the answers shared with an
    identical call still in flight were counted nowhere."""
    with make_judge(fake_openai) as judge:
        judge.complete([req("same")] * 5 + [req("other")])
        usage = judge.usage()["judge-m"]
        assert judge.stats()["shared"] >= 1
    assert len(fake_openai.requests) == usage["calls"] == 2
    assert usage["calls"] + usage["cache_hits"] + usage["shared"] == 6


@pytest.mark.slow
def test_identical_requests_in_flight_are_sent_once(fake_openai):
    fake_openai.delay_s = 0.2
    with make_judge(fake_openai) as judge:
        out = judge.complete([req("same")] * 5)
        assert judge.stats()["shared"] == 4
        u = judge.usage()["judge-m"]  # issue 27: a shared call is counted, so the three add up to the requests
        assert (u["calls"], u["cache_hits"], u["shared"]) == (1, 0, 4)
    assert len(fake_openai.requests) == 1
    assert {g.output_text for g in out} == {"echo:judge-m:same"}


@pytest.mark.slow
def test_concurrency_limit_is_respected():
    active = 0
    peak = 0
    lock = threading.Lock()

    def responder(request):
        nonlocal active, peak
        with lock:
            active += 1
            peak = max(peak, active)
        time.sleep(0.05)
        with lock:
            active -= 1
        return "ok"

    with FakeOpenAI(responder) as server, make_judge(server, concurrency=3) as judge:
        out = judge.complete([req(f"q{i}") for i in range(12)])
    assert [g.output_text for g in out] == ["ok"] * 12
    assert peak == 3  # the limit is reached and never passed


def test_retries_on_429_and_500_then_answers(fake_openai):
    fake_openai.queue(Reply.error(429, headers={"Retry-After": "0"}), Reply.error(500))
    retries = []
    with make_judge(fake_openai, on_retry=lambda n, e, w: retries.append(e.kind)) as judge:
        (answer,) = judge.complete([req("hello")])
        assert judge.stats()["retries"] == 2
    assert answer.output_text == "echo:judge-m:hello"
    assert retries == ["rate_limit", "server"]
    assert len(fake_openai.requests) == 3


def test_server_errors_after_retries_are_returned_not_raised(fake_openai):
    fake_openai.responder = lambda r: Reply.error(500)
    with make_judge(fake_openai, retry_policy=RetryPolicy(max_retries=2, base_s=0.001)) as judge:
        (answer,) = judge.complete([req("x")])
        assert judge.usage()["judge-m"]["errors"] == 1
    assert isinstance(answer, ProviderError) and answer.kind == "server"
    assert len(fake_openai.requests) == 3


def test_auth_failure_is_fatal_and_stops_further_calls(monkeypatch):
    monkeypatch.setenv("JUDGE_KEY", "sk-wrong-key-123456")
    with FakeOpenAI(api_key="sk-right") as server:
        judge = Judge(OpenAIProvider(server.base_url, api_key_env="JUDGE_KEY"), retry_policy=FAST)
        try:
            (first,) = judge.complete([req("a")])
            assert isinstance(first, ProviderError) and first.kind == "auth"
            assert judge.fatal_error is first
            seen = len(server.requests)
            more = judge.complete([req("b"), req("c")])
            assert all(isinstance(a, ProviderError) and a.kind == "auth" for a in more)
            assert len(server.requests) == seen == 1
            assert "sk-wrong-key-123456" not in str(first)
        finally:
            judge.close()


def test_refusal_is_cached_as_a_refusal(fake_openai, tmp_path):
    fake_openai.responder = lambda r: Reply(refusal="I can't judge that.")
    cache = tmp_path / "c.jsonl"
    for _ in range(2):
        with make_judge(fake_openai, cache_path=cache) as judge:
            (answer,) = judge.complete([req("x")])
        assert isinstance(answer, ProviderError) and answer.kind == "refusal"
        assert "can't judge" in str(answer)
    assert len(fake_openai.requests) == 1


def test_model_override_changes_the_model_asked(fake_openai):
    with make_judge(fake_openai, model_override="local-judge") as judge:
        (answer,) = judge.complete([req("x", model="gpt-4.1-2025-04-14")])
        assert set(judge.usage()) == {"local-judge"}
    assert fake_openai.requests[0].model == "local-judge"
    assert answer.output_text == "echo:local-judge:x"


def test_repeats_bypass_the_cache_but_repeat_zero_shares_it(fake_openai, tmp_path):
    cache = tmp_path / "c.jsonl"
    with make_judge(fake_openai, cache_path=cache) as judge:
        judge.complete([req("x")])
        with judge_repeat(0):
            judge.complete([req("x")])
        assert len(fake_openai.requests) == 1
        for k in (1, 2):
            with judge_repeat(k):
                judge.complete([req("x")])
        assert len(fake_openai.requests) == 3
        with judge_repeat(2):
            judge.complete([req("x")])  # the same repeat again is cached
        assert len(fake_openai.requests) == 3


def test_repeat_is_per_thread(fake_openai):
    with make_judge(fake_openai) as judge:
        seen = []
        with judge_repeat(5):
            t = threading.Thread(target=lambda: seen.append(judge.complete([req("x")])))
            t.start()
            t.join()
            judge.complete([req("x")])
    assert len(fake_openai.requests) == 2  # repeat 0 in the thread, repeat 5 here: two slots


def test_a_torn_cache_line_is_skipped_and_the_file_stays_valid(fake_openai, tmp_path):
    cache = tmp_path / "c.jsonl"
    with make_judge(fake_openai, cache_path=cache) as judge:
        judge.complete([req("x")])
    with open(cache, "a") as fh:
        fh.write('{"key": "abc", "output_te')  # killed mid-write
    with make_judge(fake_openai, cache_path=cache) as judge:
        judge.complete([req("x"), req("y")])
    assert len(fake_openai.requests) == 2  # x cached, y new
    lines = cache.read_text().splitlines()
    assert json.loads(lines[-1])["output_text"] == "echo:judge-m:y"


def test_no_secret_reaches_the_cache(fake_openai, tmp_path, monkeypatch):
    monkeypatch.setenv("JUDGE_KEY", "sk-secret-abcdef-987654")
    cache = tmp_path / "c.jsonl"
    with Judge(OpenAIProvider(fake_openai.base_url, api_key_env="JUDGE_KEY"), cache_path=cache) as judge:
        judge.complete([req("x")])
        assert "sk-secret" not in repr(judge)
    assert fake_openai.requests[0].headers["authorization"] == "Bearer sk-secret-abcdef-987654"
    assert "sk-secret" not in cache.read_text()


def test_thread_safe_from_many_threads(fake_openai):
    with make_judge(fake_openai, concurrency=4) as judge:
        results: dict[int, list] = {}

        def work(n: int) -> None:
            results[n] = judge.complete([req(f"t{n}-{i}") for i in range(5)])

        threads = [threading.Thread(target=work, args=(n,)) for n in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    for n, answers in results.items():
        assert [a.output_text for a in answers] == [f"echo:judge-m:t{n}-{i}" for i in range(5)]
    assert len(fake_openai.requests) == 30


def test_closed_judge_refuses_work(fake_openai):
    judge = make_judge(fake_openai)
    judge.close()
    judge.close()  # idempotent
    with pytest.raises(RuntimeError):
        judge.complete([req("x")])


def test_cache_key_depends_on_identity_body_and_repeat():
    ident = {"provider": "openai", "base_url": "http://a/v1", "api": "chat"}
    body = {"model": "m", "messages": [{"role": "user", "content": "out-1"}]}
    k = cache_key(ident, body)
    assert k == cache_key(dict(reversed(ident.items())), body)  # key order does not matter
    assert k != cache_key({**ident, "base_url": "http://b/v1"}, body)
    assert k != cache_key(ident, {**body, "messages": [{"role": "user", "content": "out-2"}]})
    assert k != cache_key(ident, body, repeat=1)
    assert k == cache_key(ident, body, repeat=0)


def test_parse_json_answer_is_lenient_about_wrapping():
    assert parse_json_answer('{"result": 1}') == {"result": 1}
    assert parse_json_answer('```json\n{"result": 2}\n```') == {"result": 2}
    assert parse_json_answer('Here you go: {"result": 3} hope it helps') == {"result": 3}
    assert parse_json_answer("seven") is None
    assert parse_json_answer("") is None


def test_chat_content_maps_grader_parts():
    assert chat_content("plain") == "plain"
    assert chat_content({"type": "input_text", "text": "a"}) == "a"
    assert chat_content([{"type": "input_text", "text": "a"}, {"type": "output_text", "text": "b"}]) == "ab"
    parts = chat_content([{"type": "input_text", "text": "look"},
                          {"type": "input_image", "image_url": "http://x/i.png", "detail": "low"}])
    assert parts == [{"type": "text", "text": "look"},
                     {"type": "image_url", "image_url": {"url": "http://x/i.png", "detail": "low"}}]


def test_every_sent_call_carries_its_id_and_tokens_even_refused_or_failed(fake_openai):
    from rfteval.graders.judged import error_result

    fake_openai.responder = lambda r: Reply(refusal="no", usage={"input_tokens": 5, "output_tokens": 2,
                                                                 "reasoning_tokens": 0})
    with make_judge(fake_openai) as judge:
        (refusal,) = judge.complete([req("x")])
        assert judge.usage()["judge-m"]["input_tokens"] == 5
    grade = error_result(refusal, "judge-m")
    assert grade.error.type == "model_grader_refusal_error"
    assert grade.details["judge_usage"]["output_tokens"] == 2 and grade.details["judge_call"]
    fake_openai.responder = lambda r: Reply.error(500)
    with make_judge(fake_openai, retry_policy=RetryPolicy(max_retries=0, base_s=0.001)) as judge:
        (failed,) = judge.complete([req("y")])
    assert failed.sent and error_result(failed, "judge-m").details["judge_call"]


def test_parse_json_answer_reads_a_reasoning_judge_past_its_thinking():
    """Braces inside the thinking of a judge served without a reasoning parser must not be taken for the answer."""
    text = '<think>The rubric says {"result": 0} for a miss, but this one hits.</think>\n{"result": 1}'
    assert parse_json_answer(text) == {"result": 1}
    assert parse_json_answer('so {"result": 0} would be wrong</think>{"result": 0.5}') == {"result": 0.5}
    assert parse_json_answer('<think>still thinking {"result": 0}') is None  # cut off while thinking: no answer


def test_parse_json_answer_accepts_raw_newlines_inside_strings():
    assert parse_json_answer('{"result": 1, "why": "line one\nline two"}'.replace("\\n", "\n")) == {
        "result": 1, "why": "line one\nline two"}


def _judge_req(text: str) -> GenerationRequest:
    schema = {"type": "object", "properties": {"result": {"type": "number"}}, "required": ["result"]}
    return GenerationRequest(model="judge-m", messages=[{"role": "user", "content": text}],
                             sampling=Sampling(response_format={"name": "r", "schema": schema, "strict": True}))


@pytest.mark.parametrize("refused, sent", [({"json_schema"}, "json_object"), ({"json_schema", "json_object"}, None)])
def test_a_judge_steps_down_an_output_format_the_server_refuses(fake_openai, refused, sent):
    """llama.cpp's server takes only text and json_object: the judge asks for JSON mode with the same schema (then
    for no format at all), once for the whole run, instead of retrying a refusal for minutes."""
    fake_openai.refused_formats = refused
    with make_judge(fake_openai) as judge:
        first = judge.complete([_judge_req("a"), _judge_req("b")])
        later = judge.complete([_judge_req("c")])
        assert judge.stats()["retries"] == 0 and judge.stats()["errors"] == 0
    assert all(isinstance(g, Generation) for g in first + later)
    formats = [r.body.get("response_format") for r in fake_openai.requests]
    assert [f["type"] if f else None for f in formats] == [sent] * 3  # refused requests are not recorded
    if sent == "json_object":
        assert formats[0]["schema"]["required"] == ["result"]  # the schema goes along, for servers that use it


def test_a_refusal_that_names_no_format_is_not_a_format_step_down(fake_openai):
    fake_openai.queue(Reply.error(400, "temperature must be at most 2"))
    with make_judge(fake_openai) as judge:
        (answer,) = judge.complete([_judge_req("a")])
        assert isinstance(answer, ProviderError) and judge.format_level == 0


def test_a_cache_line_is_narrowed_when_read_back(tmp_path) -> None:
    """Lines of judge_cache.jsonl are JSON from disk: what is not a token count or a string reads as absent."""
    from rfteval.providers.judge import JudgeCache, answer_from_entry

    gen = answer_from_entry({"key": "k", "output_text": 3, "finish_reason": "stop",
                             "usage": {"input_tokens": 5, "output_tokens": "7", "reasoning_tokens": None}})
    assert isinstance(gen, Generation)
    assert (gen.output_text, gen.finish_reason, gen.call_id, gen.cached) == ("", "stop", "k", True)
    assert gen.usage == {"input_tokens": 5, "reasoning_tokens": None}
    refusal = answer_from_entry({"key": 9, "refusal": "no", "usage": "lots"})
    assert isinstance(refusal, ProviderError) and refusal.usage == {} and refusal.call_id is None
    cache = JudgeCache(tmp_path / "c.jsonl")
    with pytest.raises(TypeError, match="key must be a string"):
        cache.put({"key": 1, "model": "m"})
    cache.close()


# ---- failing fast (issue 27): the models' rules for every judge --------------------------------------------------


def _dev_req(text: str) -> GenerationRequest:
    """A label_model's request as docs/judges.md's example builds it: the instructions in a developer message."""
    return GenerationRequest(model="judge-m", messages=[{"role": "developer", "content": "Classify it"},
                                                        {"role": "user", "content": text}], sampling=Sampling())


def test_a_judge_stops_after_a_handful_of_alike_refusals_and_names_the_fix(fake_openai):
    """llama-cpp-python's server refuses a developer message with a 500 (retryable by kind): the judge no longer
    retries every cell for minutes; after REJECT_AFTER alike refusals it stops, naming --developer-as system."""
    from rfteval.providers.judge import judge_stopped
    from rfteval.providers.retry import REJECT_AFTER

    fake_openai.refused_roles = {"developer"}
    policy = RetryPolicy(max_retries=10, base_s=0.001, max_backoff_s=0.01)
    with make_judge(fake_openai, concurrency=2, retry_policy=policy) as judge:
        answers = judge.complete([_dev_req(f"item {i}") for i in range(12)])
        line = judge_stopped(judge)
        stats = judge.stats()
    assert all(isinstance(a, ProviderError) for a in answers)
    # before: 12 cells x 11 attempts; now the handful that showed the refusal, plus what was already in flight
    assert fake_openai.stats["invalid"] <= REJECT_AFTER + 2
    assert stats["calls"] <= REJECT_AFTER + 2 and stats["errors"] == stats["calls"]
    assert line is not None and "--developer-as system" in line and "\n" not in line
    assert "messages[0].role: Input should be 'system', 'user', 'assistant', 'tool' or 'function'" in line
    assert "(input: 'developer')" in line


def test_developer_as_system_sends_the_developer_message_as_system(fake_openai):
    fake_openai.refused_roles = {"developer"}
    with Judge(OpenAIProvider(fake_openai.base_url, developer_as="system"), retry_policy=FAST) as judge:
        (answer,) = judge.complete([_dev_req("x")])
    assert isinstance(answer, Generation) and judge.fatal_error is None
    assert [m["role"] for m in fake_openai.requests[0].body["messages"]] == ["system", "user"]


def test_an_input_audio_part_the_server_cannot_take_stops_the_judge(fake_openai):
    """A score_model with an input_audio part (OpenAI's grader format) on llama.cpp: refused alike, stopped."""
    from rfteval.providers.judge import judge_stopped

    fake_openai.refused_parts = {"input_audio"}
    audio = [{"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}}]
    reqs = [GenerationRequest(model="judge-m", messages=[{"role": "user", "content": [
        {"type": "text", "text": f"item {i}"}, *audio]}]) for i in range(8)]
    with make_judge(fake_openai, concurrency=1, retry_policy=RetryPolicy(base_s=0.001, max_backoff_s=0.01)) as judge:
        judge.complete(reqs)
        line = judge_stopped(judge)
    assert fake_openai.stats["invalid"] <= 4
    assert line is not None and "messages[0].content[1].type: Input should be 'text' or 'image_url' (input: " \
        "'input_audio')" in line


def test_a_judge_endpoint_that_is_not_there_stops_the_judge_in_a_few_attempts():
    import socket

    from rfteval.providers.judge import judge_stopped

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    policy = RetryPolicy(max_retries=10, base_s=0.001, max_backoff_s=0.01)
    with Judge(OpenAIProvider(f"http://127.0.0.1:{port}/v1"), retry_policy=policy, concurrency=2) as judge:
        judge.complete([req(f"q{i}") for i in range(10)])
        stats, line = judge.stats(), judge_stopped(judge)
    assert stats["retries"] <= 3 and stats["calls"] <= 3  # not 10 cells x 10 retries
    assert line is not None and "is not answering" in line and "connection refused" in line


def test_the_format_step_down_is_remembered_in_the_cache(fake_openai, tmp_path):
    """Issue 27: every invocation paid one refused json_schema request per call in flight before stepping down;
    the cache remembers the endpoint's level, so a second invocation sends no refused request."""
    fake_openai.refused_formats = {"json_schema"}
    cache = tmp_path / "judge.jsonl"
    with make_judge(fake_openai, cache_path=cache) as judge:
        judge.complete([_judge_req("a"), _judge_req("b")])
        assert judge.format_level == 1
    fake_openai.reset()
    fake_openai.refused_formats = set()  # were the memo ignored, the next call would go out as json_schema
    with make_judge(fake_openai, cache_path=cache) as judge:
        assert judge.format_level == 1
        (answer,) = judge.complete([_judge_req("c")])
    assert isinstance(answer, Generation)
    assert [r.body["response_format"]["type"] for r in fake_openai.requests] == ["json_object"]
    lines = [json.loads(x) for x in cache.read_text().splitlines()]
    assert [x["format"] for x in lines if str(x["key"]).startswith("format_level:")] == ["json_object"]
    with make_judge(fake_openai, cache_path=cache) as judge, \
            Judge(OpenAIProvider(fake_openai.base_url + "/other"), cache_path=cache) as other:
        assert judge.format_level == 1 and other.format_level == 0  # per endpoint


# ---- JudgeBudget: a cap on what one judge sends -------------------------------------------------------------------


def test_a_call_cap_sends_exactly_that_many_and_the_rest_end_capped_unsent(fake_openai, tmp_path):
    from rfteval.providers.judge import JudgeBudget

    cache = tmp_path / "judge.jsonl"
    with make_judge(fake_openai, cache_path=cache, concurrency=8) as judge:
        judge.budget = JudgeBudget(max_calls=3)
        out = judge.complete([req(f"q{i}") for i in range(7)])
        assert judge.stats()["calls"] == 3 and judge.usage()["judge-m"]["errors"] == 0
    assert len(fake_openai.requests) == 3
    capped = [a for a in out if isinstance(a, ProviderError)]
    assert len(capped) == 4 and {a.kind for a in capped} == {"capped"} and not any(a.sent for a in capped)
    assert judge.budget is not None and judge.budget.reached is not None and "--max-judge-calls 3" in judge.budget.reached
    assert len(cache.read_text().splitlines()) == 3  # a capped call is not an answer: never cached
    # cache hits are free: a new budget of 4 answers the 3 from the cache and sends the other 4
    with make_judge(fake_openai, cache_path=cache) as judge:
        judge.budget = JudgeBudget(max_calls=4)
        again = judge.complete([req(f"q{i}") for i in range(7)])
        assert judge.stats()["cache_hits"] == 3 and judge.stats()["calls"] == 4 and judge.budget.reached is None
    assert all(isinstance(a, Generation) for a in again)
    sent = sorted(r.last_user_text() for r in fake_openai.requests)
    assert sent == sorted(f"q{i}" for i in range(7))  # each question sent once over both


def test_a_cost_cap_stops_sending_once_the_answered_calls_cost_that_much(fake_openai):
    from rfteval.providers.judge import JudgeBudget

    # $1M per million input and output tokens: a call's cost in dollars is its token count
    prices = {"judge-m": (1e6, 1e6, 1e6, 1e6)}
    with make_judge(fake_openai, concurrency=1) as judge:
        judge.budget = JudgeBudget(max_cost_usd=25.0, prices=prices)
        out = judge.complete([req("a b c d e f")] + [req(f"x{i}") for i in range(5)])
    # the fake counts words and punctuation: "a b c d e f" is 6 in, "echo:judge-m:a b c d e f" 12 out; "xI" 1 in,
    # "echo:judge-m:xI" 7 out; one at a time: 18, then 26 >= 25, so the third call is not sent
    answered = [a for a in out if isinstance(a, Generation)]
    assert len(answered) == 2 and len(fake_openai.requests) == 2
    assert judge.budget is not None and judge.budget.cost_usd == pytest.approx(26.0)
    assert "--max-judge-cost 25" in (judge.budget.reached or "")


@pytest.mark.slow
def test_closing_a_judge_with_calls_in_flight_cancels_them_quietly(caplog):
    """Ctrl-C on `probe-grader`, `grade`, `validate grader` or `agree --regrade` with a judge left the caller's wait
    and closed the judge under its calls in flight: "Task was destroyed but it is pending!" and an "Event loop is
    closed" traceback per call waiting for the judge's concurrency. Closing cancels them first: nothing is printed,
    and a caller still waiting gets a cancellation, not a hang."""
    import concurrent.futures
    import gc
    import sys

    unraisable: list[str] = []
    hook = sys.unraisablehook
    sys.unraisablehook = lambda u: unraisable.append(f"{u.exc_type.__name__}: {u.exc_value}")
    outcome: list[BaseException] = []
    try:
        with FakeOpenAI(lambda r: "ok", delay_s=30.0) as server:
            judge = make_judge(server, concurrency=1)

            def wait() -> None:
                try:
                    judge.complete([req(f"q{i}") for i in range(4)])
                except BaseException as exc:  # noqa: BLE001 - what the waiting caller gets is the check
                    outcome.append(exc)

            waiter = threading.Thread(target=wait, daemon=True)
            waiter.start()
            for _ in range(1000):  # the first call is at the server, the other three wait for the semaphore
                if server.requests:
                    break
                time.sleep(0.01)
            judge.close()
            waiter.join(timeout=30)  # a guard, not a measurement
            gc.collect()
    finally:
        sys.unraisablehook = hook
    assert not waiter.is_alive() and len(outcome) == 1
    assert isinstance(outcome[0], concurrent.futures.CancelledError)
    assert unraisable == []
    assert not [r for r in caplog.records if "Task was destroyed" in r.getMessage()]
