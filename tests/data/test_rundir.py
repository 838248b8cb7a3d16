"""rfteval.data.rundir: the one label rule (run, series and readiness choose the baseline the same way)."""

import pytest

from rfteval.data import rundir
from rfteval.data.rundir import baseline_label, choose_label
from rfteval.errors import InputError


def test_the_label_asked_for_must_be_there():
    assert choose_label(["base", "tuned"], "tuned", "--baseline") == "tuned"
    with pytest.raises(InputError, match="no records for label 'nope' \\(labels: base, tuned\\)") as exc:
        choose_label(["base", "tuned"], "nope", "--baseline")
    assert exc.value.field == "--baseline"


def test_else_the_only_one_else_base_else_the_first():
    assert choose_label([], None, "--label") is None
    assert choose_label(["solo"], None, "--label", guess_first=False) == "solo"
    assert choose_label(["ckpt-1", "base"], None, "--baseline") == "base" == baseline_label(["ckpt-1", "base"])
    assert choose_label(["ckpt-1", "ckpt-2"], None, "--baseline") == "ckpt-1" == baseline_label(["ckpt-1", "ckpt-2"])
    assert choose_label(["tuned", "base"], None, "--label", guess_first=False) == "base"


def test_without_a_guess_several_labels_ask_for_one():
    with pytest.raises(InputError, match="several labels \\(a, b\\); choose one") as exc:
        choose_label(["b", "a"], None, "--label", guess_first=False)
    assert exc.value.field == "--label"


def test_the_pricing_a_run_directory_names(tmp_path):
    """spec.resolved.toml's [pricing] as the price table's overrides; an entry without numbers is left out."""
    assert rundir.spec_pricing(tmp_path) is None
    (tmp_path / rundir.RESOLVED_SPEC).write_text(
        'dataset = "d.jsonl"\n\n[pricing."acme/agent"]\ninput = 1.5\noutput = 6\n\n[pricing.bad]\ninput = "x"\n',
        encoding="utf-8")
    assert rundir.spec_pricing(tmp_path) == {"acme/agent": {"input": 1.5, "output": 6.0}}
    (tmp_path / rundir.RESOLVED_SPEC).write_text('dataset = "d.jsonl"\n', encoding="utf-8")
    assert rundir.spec_pricing(tmp_path) is None
