"""rfteval.report.console: the consoles commands print to."""

from __future__ import annotations

import pytest


def test_a_note_on_a_piped_stderr_stays_one_line(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A log or CI reads stderr piped: rich's default 80 columns cut a long note into several lines."""
    from rfteval.report.console import stderr_console

    monkeypatch.delenv("COLUMNS", raising=False)
    note = "note: " + " ".join(f"word{i}" for i in range(60))  # about 400 characters
    stderr_console().print(note, highlight=False)
    assert capsys.readouterr().err.splitlines() == [note]
