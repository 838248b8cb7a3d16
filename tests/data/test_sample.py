"""The sample handed to graders: output_json is exactly json.loads of the stripped output, however it is parsed."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rfteval.data.sample import ParsedSample, make_sample, parse_output_json, rebuild_args


def reference_parse(output_text: str) -> object:
    """parse_output_json as it was written first: json.loads on the stripped text."""
    text = output_text.strip()
    if not text or text[0] not in "{[":
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def same(a: object, b: object) -> bool:
    """Equal value for value, types and key order included (repr tells 1 from 1.0 and -0.0 from 0.0)."""
    return repr(a) == repr(b)


surrogates = st.sampled_from(["\ud800", "\udfff", "\ud83d", "\ude00"])
texts = st.text(max_size=5) | st.builds(lambda a, s, b: a + s + b, st.text(max_size=2), surrogates,
                                        st.text(max_size=2))
numbers = (st.integers() | st.integers(min_value=2**62, max_value=2**70)
           | st.integers(min_value=-(2**70), max_value=-(2**62))
           | st.floats(allow_nan=False) | st.floats(allow_nan=False, allow_infinity=False, width=32))
json_values = st.recursive(
    st.none() | st.booleans() | numbers | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=8)
noise = st.sampled_from(["", " ", "\n\t", "\u00a0", "\ufeff", "x", "}", "]", ",", "{", "[", "\r\n", "\x1c", "1"])


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(value=json_values, before=noise, after=noise, cut=st.integers(0, 3), indent=st.sampled_from([None, 2]))
def test_parse_output_json_is_json_loads_on_the_stripped_text(value: object, before: str, after: str, cut: int,
                                                              indent: int | None) -> None:
    text = before + json.dumps(value, indent=indent, ensure_ascii=bool(cut % 2)) + after
    for candidate in (text, text[:-cut] if cut else text, "NaN" + text, text.replace("1", "Infinity", 1)):
        assert same(parse_output_json(candidate), reference_parse(candidate)), candidate


# Number literals as a model may write them: any digits, fractions and exponents, valid or not.
literals = st.from_regex(r"-?(0|[1-9][0-9]{0,40}|0[0-9]{1,3})(\.[0-9]{0,40})?([eE][+-]?[0-9]{1,4})?", fullmatch=True)


@pytest.mark.slow
@settings(max_examples=600, deadline=None)
@given(literal=literals)
def test_every_number_literal_parses_as_json_loads_parses_it(literal: str) -> None:
    for text in (f"[{literal}]", f'{{"n": {literal}, "m": [{literal}, -{literal}]}}'):
        assert same(parse_output_json(text), reference_parse(text)), text


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(keys=st.lists(st.sampled_from(["a", "b", "c", "\u00e9"]), min_size=1, max_size=6),
       values=st.lists(st.integers(-3, 3), min_size=6, max_size=6))
def test_duplicate_keys_keep_the_last_value_at_the_first_place(keys: list[str], values: list[int]) -> None:
    text = "{" + ", ".join(f"{json.dumps(k)}: {v}" for k, v in zip(keys, values)) + "}"
    assert same(parse_output_json(text), json.loads(text))


def test_parse_output_json_on_tricky_texts() -> None:
    for text in ['{"a": NaN}', "[1e400]", "[-1e400]", "[1e-400]", '{"a": 1, "a": 2}', '["\\ud800"]', '["\udc80"]',
                 "[18446744073709551616]", "[-9223372036854775809]", "[123456789012345678901234567890]",
                 "[0.1, 1e23, 5e-324, 1.7976931348623157e308, 2.2250738585072014e-308, -0.0, -0]",
                 '["\\ud83d\\ude00", "\\u00e9", "\\/"]', "[" * 50 + "]" * 50, '{"a": 1}\x00', "\ufeff{}", "{}\ufeff",
                 "  {}\u2028", '{"a": 1} {"b": 2}', "[1,]", "{'a': 1}", "[0" + "0" * 10 + "]", '["\x1f"]',
                 '["a\x7fb"]', "[.5]", "[1.]", "[01]", "[true, false, null]", "[Infinity, -Infinity]"]:
        assert same(parse_output_json(text), reference_parse(text)), text


def test_nesting_too_deep_for_json_loads_is_not_json() -> None:
    assert parse_output_json("[" * 100_000 + "]" * 100_000) is None
    assert parse_output_json("[" * 500 + "]" * 500) == json.loads("[" * 500 + "]" * 500)


def test_non_finite_numbers_come_through_as_json_loads_gives_them() -> None:
    value = parse_output_json('{"a": NaN, "b": Infinity, "c": 1e999}')
    assert math.isnan(value["a"]) and value["b"] == math.inf and value["c"] == math.inf


def test_make_sample_shapes_a_chat_completion() -> None:
    sample = make_sample('{"x": 1}')
    assert type(sample) is ParsedSample and sample["output_json"] == {"x": 1}
    assert sample["choices"] == [{"index": 0, "finish_reason": "stop",
                                  "message": {"role": "assistant", "content": '{"x": 1}'}}]
    tools = [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
    with_tools = make_sample("", tools)
    assert with_tools["output_json"] is None and with_tools["choices"][0]["finish_reason"] == "tool_calls"
    assert with_tools["choices"][0]["message"]["tool_calls"] is tools
    assert list(sample) == ["output_text", "output_json", "output_tools", "choices", "output_audio"]
    assert sample["output_audio"] is None and with_tools["output_audio"] is None


def test_rebuild_args_sees_replaced_fields() -> None:
    sample = make_sample('{"x": 1}')
    assert rebuild_args(sample) == ('{"x": 1}', None, True)
    sample["output_json"] = {"x": 2}  # replaced: no longer the text's parse
    assert rebuild_args(sample) is None
    plain = make_sample("hello")
    assert rebuild_args(plain) == ("hello", None, False)
    plain["choices"][0]["message"]["content"] = "edited"
    assert rebuild_args(plain) is None
    audio = make_sample("hello")
    audio["output_audio"] = {"data": "", "transcript": "hello"}  # not what make_sample builds: travels whole
    assert rebuild_args(audio) is None
