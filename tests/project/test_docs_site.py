"""The documentation site's link rule (mkdocs.yml, scripts/mkdocs_hooks.py): a page's link to a repository file
outside docs/ works on GitHub as written and in the site as a copy, and a link to a file the repository does not
have fails `mkdocs build --strict` as a broken link between pages does. `make docs` builds the real site in CI."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tests.support import REPO


def build(root: Path, page: str) -> subprocess.CompletedProcess[str]:
    """`mkdocs build --strict` of a one-page site in root, with the project's hook, the page's text as given."""
    (root / "docs").mkdir(parents=True, exist_ok=True)
    (root / "docs" / "index.md").write_text(page, encoding="utf-8")
    (root / "scripts").mkdir(exist_ok=True)
    shutil.copy(REPO / "scripts" / "mkdocs_hooks.py", root / "scripts" / "mkdocs_hooks.py")
    (root / "mkdocs.yml").write_text(
        "site_name: t\nhooks:\n  - scripts/mkdocs_hooks.py\nnav:\n  - index.md\n"
        "validation:\n  links:\n    not_found: warn\n    anchors: warn\n", encoding="utf-8")
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", "site"], cwd=root,
                          capture_output=True, text=True, timeout=120)


def test_a_link_out_of_docs_is_copied_into_the_site(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "x.jsonl").write_text('{"id": 1}\n', encoding="utf-8")
    (tmp_path / "data" / "README.md").write_text("# data\n", encoding="utf-8")
    done = build(tmp_path, "# t\n\n[a file](../data/x.jsonl) and [a folder](../data/)\n\n"
                           "```sh\ncat [not a link](../data/missing.txt)\n```\n")
    assert done.returncode == 0, done.stderr
    html = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    assert 'href="_repo/data/x.jsonl"' in html and 'href="_repo/data/README.md"' in html
    assert (tmp_path / "site" / "_repo" / "data" / "x.jsonl").read_text() == '{"id": 1}\n'
    assert not (tmp_path / "site" / "_repo" / "data" / "README" / "index.html").exists()  # copied, not rendered


def test_a_link_to_a_file_the_repository_lacks_fails_the_strict_build(tmp_path: Path) -> None:
    done = build(tmp_path, "# t\n\n[gone](../data/missing.jsonl)\n")
    assert done.returncode != 0
    assert "links to '../data/missing.jsonl', which is not a file of the repository" in done.stderr
