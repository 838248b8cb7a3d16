"""run/paths.py: the invocation flags checked on their own and together, before any request."""

from __future__ import annotations

from pathlib import Path

import pytest

from rfteval.errors import InputError
from rfteval.run.paths import check_run_options
from rfteval.run.runner import RunOptions


@pytest.mark.parametrize(("options", "field"), [
    (RunOptions(service_tier="cheap"), "--service-tier"),
    (RunOptions(batch_tail="later"), "--batch-tail"),
    (RunOptions(batch_judge=True), "--batch-judge"),
    (RunOptions(batch=True, import_responses=Path("o.jsonl")), "--import-responses"),
    (RunOptions(export_requests=Path("r.jsonl"), import_responses=Path("o.jsonl")), "--import-responses"),
    (RunOptions(dry_run=True, export_requests=Path("r.jsonl")), "--dry-run"),
    (RunOptions(dry_run=True, import_responses=Path("o.jsonl")), "--dry-run"),
])
def test_a_bad_flag_or_combination_is_one_input_error(options, field):
    with pytest.raises(InputError) as exc:
        check_run_options(options)
    assert exc.value.field == field


@pytest.mark.parametrize("options", [RunOptions(), RunOptions(service_tier="flex", batch=True, batch_judge=True,
                                                              batch_tail="sync"),
                                     RunOptions(export_requests=Path("r.jsonl")),
                                     RunOptions(dry_run=True, batch=True, service_tier="flex", fresh=True)])
def test_good_flags_pass(options):
    check_run_options(options)
