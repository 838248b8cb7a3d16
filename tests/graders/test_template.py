import json

import pytest

from rfteval.errors import InputError
from rfteval.graders import load_grader
from rfteval.graders.template import (
    TemplateError,
    check_template,
    compile_template,
    parse_path,
    render_deep,
    to_text,
)

ITEM = {
    "reference_answer": "Paris",
    "nested": {"donors": {"count": 3, "names": ["Ann", "Bo"]}},
    "list": [10, 20, 30],
    "a b": "spaced key",
    "dotted.key": "dots",
    "digits": {"0": "zero as a string key"},
    "flag": True, "nothing": None, "ratio": 0.25, "big": 10**20,
    "obj": {"b": 1, "a": [1, 2], "é": "ü"},
    "unicode": "日本語 🎉",
}
SAMPLE = {
    "output_text": "hello",
    "output_json": {"name": "Ann", "email": None},
    "output_tools": [{"id": "c1", "type": "function",
                      "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}],
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hello"}}],
}


def render(text: str) -> str:
    return compile_template(text).render(ITEM, SAMPLE)


@pytest.mark.parametrize("text, expected", [
    ("{{item.reference_answer}}", "Paris"),
    ("{{ item.reference_answer }}", "Paris"),          # spaces inside the braces are optional
    ("{{   item.reference_answer}}", "Paris"),
    ("Answer: {{item.reference_answer}}!", "Answer: Paris!"),
    ("{{sample.output_text}}/{{item.reference_answer}}", "hello/Paris"),
    ("{{item.nested.donors.count}}", "3"),
    ("{{item.nested.donors.names[1]}}", "Bo"),
    ("{{item.list[0]}}", "10"),
    ("{{item.list[-1]}}", "30"),                       # negative index from the end
    ("{{ item.list[ 2 ] }}", "30"),
    ('{{item["a b"]}}', "spaced key"),                 # quoted keys
    ("{{item['dotted.key']}}", "dots"),
    ("{{item.digits[0]}}", "zero as a string key"),    # [0] on a dict falls back to the key "0"
    ("{{item.digits.0}}", "zero as a string key"),
    ("{{sample.output_tools[0].function.name}}", "get_weather"),
    ("{{sample.output_tools[0].function.arguments}}", '{"city": "Paris"}'),  # a string stays as it is
    ("{{sample.choices[0].message.content}}", "hello"),
    ("{{sample.output_json.name}}", "Ann"),
    ("{{item.unicode}}", "日本語 🎉"),
    ("no placeholders", "no placeholders"),
    ("", ""),
    ("{ item.x }", "{ item.x }"),                      # single braces are text
    ("{{item.reference_answer", "{{item.reference_answer"),  # unclosed: text, not a placeholder
])
def test_render(text, expected):
    assert render(text) == expected


@pytest.mark.parametrize("text, expected", [
    ("{{item.nested.donors.count}}", "3"),
    ("{{item.flag}}", "true"),
    ("{{item.nothing}}", "null"),
    ("{{sample.output_json.email}}", "null"),
    ("{{item.ratio}}", "0.25"),
    ("{{item.big}}", "100000000000000000000"),
    ("{{item.list}}", "[10, 20, 30]"),
    ("{{item.obj}}", '{"b": 1, "a": [1, 2], "é": "ü"}'),   # JSON, key order kept, non-ASCII kept
    ("{{sample.output_json}}", '{"name": "Ann", "email": null}'),
])
def test_non_strings_render_as_json(text, expected):
    assert render(text) == expected
    assert json.loads(render(text)) == json.loads(expected)


def test_to_text():
    assert to_text("x") == "x"
    assert to_text(1.0) == "1.0"
    assert to_text(False) == "false"
    assert to_text({"k": "é"}) == '{"k": "é"}'


@pytest.mark.parametrize("text, path, reason", [
    ("{{item.missing}}", "item.missing", "no key 'missing'"),
    ("{{item.nested.donors.age}}", "item.nested.donors.age", "no key 'age'"),
    ("{{item.list[3]}}", "item.list[3]", "index 3 out of range (length 3)"),
    ("{{item.list[-4]}}", "item.list[-4]", "index -4 out of range"),
    ("{{item.reference_answer.x}}", "item.reference_answer.x", "cannot look up 'x' in str"),
    ("{{item.nothing.x}}", "item.nothing.x", "cannot look up 'x' in null"),
    ("{{item.list.x}}", "item.list.x", "cannot look up 'x' in list"),
    ("{{sample.output_tools[1].function.name}}", "sample.output_tools[1].function.name", "out of range"),
    ("{{sample.output_audio}}", "sample.output_audio", "no key 'output_audio'"),
])
def test_missing_path_names_the_path(text, path, reason):
    with pytest.raises(TemplateError) as exc:
        render(text)
    assert exc.value.path == path
    assert f"{{{{ {path} }}}}" in str(exc.value)
    assert reason in str(exc.value)


@pytest.mark.parametrize("path, expected", [
    ("item.a", ("item", ("a",))),
    ("sample.output_tools[0].function.name", ("sample", ("output_tools", 0, "function", "name"))),
    ('item["a b"][2]', ("item", ("a b", 2))),
])
def test_parse_path(path, expected):
    assert parse_path(path) == expected


@pytest.mark.parametrize("text", [
    "{{ output_text }}",           # no namespace
    "{{ items.x }}",               # unknown namespace
    "{{ }}",                       # empty
    "{{ item.x[ }}",               # unclosed index
    "{{ item.x[a] }}",             # unquoted non-numeric index
    "{{ item..x }}",
    "{{ item.a b }}",
    "{{ item }}",                  # a bare namespace: OpenAI refuses it
    "{{ sample }}",
])
def test_malformed_templates_rejected(text):
    with pytest.raises(ValueError):
        check_template(text)


@pytest.mark.parametrize("field", ["input", "reference"])
def test_malformed_template_rejected_at_config_validation(tmp_path, field):
    grader = {"type": "string_check", "name": "s", "input": "{{sample.output_text}}",
              "reference": "{{item.answer}}", "operation": "eq"}
    grader[field] = "{{ answer }}"
    p = tmp_path / "g.json"
    p.write_text(json.dumps(grader, indent=2))
    with pytest.raises(InputError) as exc:
        load_grader(p)
    assert f": {field}: " in str(exc.value)
    assert "must start with item. or sample." in str(exc.value)


def test_render_deep_renders_every_string():
    value = [{"role": "user", "content": [{"type": "input_text", "text": "Q: {{item.reference_answer}}"}]},
             {"role": "system", "content": "plain"}, 3, None]
    assert render_deep(value, ITEM, SAMPLE) == [
        {"role": "user", "content": [{"type": "input_text", "text": "Q: Paris"}]},
        {"role": "system", "content": "plain"}, 3, None]


def test_compiled_template_lists_its_paths():
    assert compile_template("{{item.a}} and {{ sample.output_text }}").paths == ["item.a", "sample.output_text"]
