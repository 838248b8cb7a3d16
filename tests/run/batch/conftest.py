"""The run files (dataset and grader) every batch test runs over."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.batch_cli import N_ITEMS
from tests.support.cli_run_files import write_run_files


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    return write_run_files(tmp_path, N_ITEMS)
