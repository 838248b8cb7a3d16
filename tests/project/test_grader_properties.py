"""Property tests (hypothesis) for the F1-style ready-made graders, through the real grading engine:
scores lie in [0, 1], a perfect answer scores 1, and the order of the answer's entries does not matter."""

import json
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rfteval.data.sample import make_sample
from rfteval.graders import GradeOptions, GradingEngine, load_grader
from tests.support import REPO

GRADERS = REPO / "graders"
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def engines() -> Iterator[dict[str, GradingEngine]]:
    built = {case: GradingEngine(load_grader(GRADERS / f"{case}.json"), GradeOptions(python_workers=1))
             for case in ("chipstack", "harvey", "ambience", "safetykit")}
    yield built
    for engine in built.values():
        engine.close()


def score(engine: GradingEngine, output: object, reference: object) -> float:
    result = engine.grade(make_sample(json.dumps(output)), {"reference_answer": reference})
    assert result.error is None, result.error
    return result.score


names = st.sampled_from(["DATA_WIDTH", "ADDR_WIDTH", "ID_WIDTH", "MODE", "BURST", "CLK_HZ"])
values = st.sampled_from(["0", "1", "32", "64", "MASTER", "SLAVE", "100000000"])
pairs = st.lists(st.fixed_dictionaries({"name": names, "value": values}), max_size=8)
passages = st.lists(st.text(alphabet="abcdefgh §.,", min_size=0, max_size=40), max_size=5)
codes = st.lists(st.sampled_from(["E11.9", "E11.65", "I10", "J45.909", "Z79.4", "N18.3", "E78.5"]), max_size=5,
                 unique=True)
labels = st.lists(st.sampled_from(["spam", "harassment", "hate", "self_harm", "sexual", "violence", "fraud",
                                   "illegal_goods"]), min_size=1, max_size=4, unique=True)

# (answers, references, answer → output_json, reference → item.reference_answer); Harvey refuses an item with
# no reference passages (a broken item, reported as an error), so its references are non-empty.
CASES = {
    "chipstack": (pairs, pairs, lambda x: {"predicted": x}, lambda x: x),
    "harvey": (passages, passages.filter(bool), lambda x: {"passages": x}, lambda x: {"passages": x}),
    "ambience": (codes, codes, lambda x: {"codes": x}, lambda x: {"codes": x}),
    "safetykit": (labels, labels, lambda x: {"labels": x}, lambda x: {"labels": x}),
}


@pytest.mark.parametrize("case", [sorted(CASES)[0], *(pytest.param(c, marks=pytest.mark.slow) for c in sorted(CASES)[1:])])
def test_range_perfect_and_order(engines, case):
    answers, references, as_output, as_reference = CASES[case]
    engine = engines[case]

    @SETTINGS
    @given(answer=answers, reference=references, seed=st.randoms(use_true_random=False))
    def check(answer, reference, seed):
        s = score(engine, as_output(answer), as_reference(reference))
        assert 0.0 <= s <= 1.0
        if reference:
            assert score(engine, as_output(reference), as_reference(reference)) == 1.0
        shuffled = list(answer)
        seed.shuffle(shuffled)
        assert score(engine, as_output(shuffled), as_reference(reference)) == pytest.approx(s, abs=1e-12)

    check()
