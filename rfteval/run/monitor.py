"""What a run reports while it runs (RunMonitor): the runner calls it, the terminal's progress bars implement it."""

from __future__ import annotations


class RunMonitor:
    """What the runner reports while it runs; the terminal's progress bars implement it. No-ops here."""

    def start(self, totals: dict[str, int]) -> None: ...

    def advance(self, label: str, error: str | None = None, cached: bool = False) -> None: ...

    def retry(self, label: str, kind: str, reason: str = "") -> None: ...

    def concurrency(self, label: str, limit: int) -> None:
        """The adaptive limit of a model's endpoint changed."""

    def batch(self, chunk: str, label: str, status: str, counts: dict[str, int]) -> None:
        """A batch changed status or request counts."""

    def message(self, text: str) -> None:
        """One line worth telling the user while the run goes on (a failed batch, an adopted one)."""

    def stop(self) -> None: ...
