"""sandbox/wire.py, no processes: requests encoded as plain data, samples sent as their text, and a
supervisor's replies decoded, checked and capped (a garbled one is refused)."""

from __future__ import annotations

import json
import marshal

import pytest

from rfteval.data.sample import make_sample
from rfteval.graders.base import (
    PYTHON_RUNTIME,
    PYTHON_SERVER,
    GradeError,
)
from rfteval.sandbox import (
    RESEND,
    STDOUT_CAP,
    Failure,
    Resend,
    compact_sample,
    decode_reply,
    encode,
)
from tests.support.sandbox_samples import TOOLS, compact_pairs


@pytest.mark.parametrize("reply", [
    b"not json",
    json.dumps([True, [[1.0, None, None, None]]]).encode(),  # too few
    json.dumps([True, [[1.0, None, None, None], ["x", None, None, None]]]).encode(),
    json.dumps([True, [[1.0, None, None, None], [1.0, None, None, None], [1.0, None, None, None]]]).encode(),
    b'[true, [[1.0, null, null, null], [NaN, null, null, null]]]',
    json.dumps([True, [[1.0, None, None, None], [1.0, 5, None, None]]]).encode(),
    json.dumps({"done": True}).encode(),
    b"[" * 200_000 + b"]" * 200_000,
    b"[true, [" + b"[" * 200_000,
])
def test_garbled_replies_are_refused(reply: bytes) -> None:
    with pytest.raises(Failure) as info:
        decode_reply(reply, 0, 2)
    assert info.value.error.type == PYTHON_SERVER


def test_a_reply_in_parts() -> None:
    part1 = [False, [[0.5, None, None, "hi"]]]
    part2 = [True, [[0.0, "made_up_type", "boom", None]]]
    first, done1 = decode_reply(json.dumps(part1).encode(), 0, 2)
    second, done2 = decode_reply(json.dumps(part2).encode(), 1, 2)
    assert (done1, done2) == (False, True)
    assert first[0].score == 0.5 and first[0].stdout == "hi"
    assert second[0].error == GradeError(PYTHON_RUNTIME, "boom")  # unknown types are not believed


def test_a_request_to_resend_is_not_a_result() -> None:
    """The child's 'send this sample again whole' is a Resend, never a GradeResult with an error type."""
    (outcome, result), _ = decode_reply(json.dumps([True, [[0.0, RESEND, "limit", None], [1.0, None, None, None]]])
                                        .encode(), 0, 2)
    assert outcome == Resend("limit") and not isinstance(result, Resend) and result.score == 1.0


def test_reply_text_is_capped() -> None:
    (result,), _ = decode_reply(json.dumps([True, [[0.0, PYTHON_RUNTIME, "m" * 10**6, "o" * 10**6]]]).encode(), 0, 1)
    assert len(result.error.message) <= 8000 and len(result.stdout) <= STDOUT_CAP + 100


def test_encode_sends_plain_data_only() -> None:
    data = {"a": [1, "x", (2, 3), None, True, 1.5]}
    assert marshal.loads(encode(data)) == data  # marshal keeps it exactly

    class Sub(dict):
        pass

    decoded = marshal.loads(encode(Sub(a=Sub(b=1), c={2, 3})))
    assert decoded == {"a": {"b": 1}, "c": [2, 3]} and type(decoded) is dict and type(decoded["a"]) is dict
    assert marshal.loads(encode([object])) == [str(object)]  # what marshal refuses arrives as text


def test_samples_make_sample_built_are_sent_as_their_text() -> None:
    kinds = [type(compact_sample(s)) for s, _ in compact_pairs()]
    assert kinds == [str, str, tuple, tuple, tuple, tuple, str] + [tuple] * 3 + [tuple] * 2
    assert compact_sample(make_sample('{"a": 1}')) == '{"a": 1}'
    assert compact_sample(make_sample("hi")) == ("hi", None, False)
    text, tools, parse = compact_sample(make_sample("[1]", TOOLS))
    assert (text, marshal.loads(tools), parse) == ("[1]", TOOLS, True)


def test_copies_of_a_sample_keep_its_text_path() -> None:
    import copy
    import pickle

    sample = make_sample('{"a": [1, 2]}', TOOLS)
    for twin in (copy.copy(sample), copy.deepcopy(sample), pickle.loads(pickle.dumps(sample))):
        assert twin == sample and compact_sample(twin)[0] == '{"a": [1, 2]}'


def test_a_tool_turns_rows_are_decoded_in_shape_and_size() -> None:
    from rfteval.sandbox.wire import TURN_CONTENT_CAP, decode_turn_reply

    frame = json.dumps([True, [[0.0, None, None, "3 hits"], [0.0, "ValueError", "bad", None], [0.0, None, None, "{}"]]])
    assert decode_turn_reply(frame.encode()) == ([(None, None, "3 hits"), ("ValueError", "bad", None),
                                                  (None, None, "{}")], True)
    for bad in ([True, [[0.0, "not a type", "m", None]]], [True, [[0.0, None, None, "x" * (TURN_CONTENT_CAP + 1)]]],
                [True, [[0.0, None]]], {"done": True}):
        with pytest.raises(Failure, match="unreadable reply from the tool sandbox"):
            decode_turn_reply(json.dumps(bad).encode())
