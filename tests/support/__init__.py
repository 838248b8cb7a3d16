"""What the tests share: the OpenAI-compatible test server, the real server, records, runs and trainer cases; and
where the checkout and the fixtures are, so no test counts its own folder's depth."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]  # the checkout: rfteval/, graders/, datasets/, scripts/, docs/
FIXTURES = REPO / "tests" / "fixtures"  # files written by earlier code: what reads them must read them the same
