"""Each grader type describes itself (range, judge, python, groups): callers ask the config, never `type ==`."""

from __future__ import annotations

import pytest

from rfteval.graders.base import REGISTRY, judge_types, needs_groups, runs_locally, uses_python, walk
from rfteval.graders.loader import parse_config

SC = {"type": "string_check", "name": "s", "input": "{{ sample.output_text }}", "reference": "x", "operation": "eq"}
PY = {"type": "python", "name": "p", "source": "def grade(sample, item):\n    return 1.0"}
SCORE = {"type": "score_model", "name": "j", "model": "m", "range": [0, 10],
         "input": [{"role": "user", "content": "{{ sample.output_text }}"}]}
GROUP = {"type": "group_judge", "name": "g", "model": "m"}


def test_every_registered_type_answers_for_itself():
    import rfteval.graders  # noqa: F401  (every built-in type registers itself on import)

    for name, entry in REGISTRY.items():
        for attr in ("calls_judge", "runs_python", "grades_groups"):
            assert isinstance(getattr(entry.config, attr), bool), (name, attr)
        assert all(callable(getattr(entry.config, m)) for m in (
            "score_range", "sub_graders", "compared_templates", "python_source", "judge_prompt", "needs_env"))


def test_a_type_builds_only_from_its_own_config_class():
    from rfteval.graders.base import BuildContext

    ctx = BuildContext()
    assert REGISTRY["string_check"].build(parse_config(SC), ctx).grade_batch  # its own class: built
    with pytest.raises(TypeError, match="builds from a StringCheckConfig, not a PythonConfig"):
        REGISTRY["string_check"].build(parse_config(PY), ctx)


@pytest.mark.parametrize("grader, judges, python, groups, range_", [
    (SC, set(), False, False, (0.0, 1.0)),
    (PY, set(), True, False, (0.0, 1.0)),
    (SCORE, {"score_model"}, False, False, (0.0, 10.0)),
    (GROUP, {"group_judge"}, False, True, (0.0, 1.0)),
    # a multi's range: its formula at the corners of its graders' ranges (1 + 1 + 10)
    ({"type": "multi", "name": "m", "graders": {"a": SC, "b": PY, "c": SCORE}, "calculate_output": "a + b + c"},
     {"score_model"}, True, False, (0.0, 12.0)),
])
def test_what_a_config_needs_is_asked_of_it(grader, judges, python, groups, range_):
    config = parse_config(grader)
    assert judge_types(config) == judges and runs_locally(config) is (not judges)
    assert uses_python(config) is python and needs_groups(config) is groups
    assert config.score_range()[:2] == range_
    assert [c.name for c in walk(config)][0] == config.name


def test_what_probes_and_label_checks_read_is_asked_of_each_type():
    sc, py, score = parse_config(SC), parse_config(PY), parse_config(SCORE)
    assert sc.compared_templates() == ("{{ sample.output_text }}", "x") and sc.python_source() is None
    assert py.python_source() == PY["source"] and py.compared_templates() is None and py.judge_prompt() == []
    assert score.judge_prompt()[0]["content"] == "{{ sample.output_text }}" and score.compared_templates() is None
    multi = parse_config({"type": "multi", "name": "m", "graders": {"a": SC, "b": PY}, "calculate_output": "a + b"})
    assert multi.compared_templates() is None and multi.python_source() is None  # its sub-graders answer (walk)
    assert [c.compared_templates() for c in walk(multi)][1] == sc.compared_templates()
