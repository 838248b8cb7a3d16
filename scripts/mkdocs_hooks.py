"""MkDocs hook (mkdocs.yml `hooks:`): the pages' links to files of the repository outside docs/ (datasets/, examples/,
bench/README.md, tests/README.md, ...).

The pages are written to read on GitHub too, so such a link is relative to the page's file (`../bench/README.md`).
MkDocs resolves links only among the files of docs_dir and reports every other relative link as not found, which
`--strict` turns into a failed build. Rather than silence that check (it is what catches a broken link between
pages), this hook gives each such file a place in the site: it checks that the target exists in the repository (a
missing one is a warning, so `mkdocs build --strict` fails on it as on any broken link), adds the file to the site
as a static copy under `_repo/` (a directory's README.md for a link to a directory), and points the link there.
MkDocs then validates the rewritten link like any other.
"""

from __future__ import annotations

import logging
import posixpath
import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

log = logging.getLogger("mkdocs.hooks.repo_links")  # under "mkdocs": --strict counts its warnings

LINK = re.compile(r"(!?\[[^\]]*\])\(([^)\s]+)\)")
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
PREFIX = "_repo"


class RepoFile(File):
    """A repository file copied into the site as it is, never rendered as a page (a README.md among them)."""

    def is_documentation_page(self) -> bool:
        return False

    def is_static_page(self) -> bool:
        return False


def _outside_target(page_src_uri: str, target: str, docs: Path) -> tuple[Path, str] | None:
    """(the repository file a relative link leaves docs_dir for, its anchor part), or None for any other link."""
    if SCHEME.match(target) or target.startswith(("#", "/")):
        return None
    path, _, anchor = target.partition("#")
    resolved = (docs / posixpath.dirname(page_src_uri) / path).resolve()
    if resolved == docs or docs in resolved.parents:
        return None  # among the documentation files: MkDocs checks it
    return resolved, anchor


def _links(markdown: str) -> list[tuple[int, re.Match[str]]]:
    """(line number, match) of each Markdown link outside fenced code blocks."""
    out, fence = [], False
    for number, line in enumerate(markdown.split("\n"), 1):
        if line.lstrip().startswith(("```", "~~~")):
            fence = not fence
        elif not fence:
            out += [(number, m) for m in LINK.finditer(line)]
    return out


def _site_path(resolved: Path, repo: Path) -> str | None:
    """The file's path under _repo/ (a directory's README.md), or None when the repository has no such file."""
    if resolved.is_dir():
        resolved = resolved / "README.md"
    if not resolved.is_file() or repo not in resolved.parents:
        return None
    return f"{PREFIX}/{resolved.relative_to(repo).as_posix()}"


def on_files(files: Files, config: Any) -> Files:
    docs = Path(config["docs_dir"]).resolve()
    repo = docs.parent
    added: set[str] = set()
    for file in list(files.documentation_pages()):
        markdown = Path(file.abs_src_path or "").read_text(encoding="utf-8")
        for number, m in _links(markdown):
            found = _outside_target(file.src_uri, m.group(2), docs)
            if found is None:
                continue
            site_path = _site_path(found[0], repo)
            if site_path is None:
                log.warning(f"Doc file '{file.src_uri}' line {number} links to '{m.group(2)}', "
                            "which is not a file of the repository")
            elif site_path not in added:
                added.add(site_path)
                target = repo / site_path.removeprefix(f"{PREFIX}/")
                files.append(RepoFile.generated(config, site_path, abs_src_path=str(target)))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    docs = Path(config["docs_dir"]).resolve()
    repo = docs.parent
    here = posixpath.dirname(page.file.src_uri)

    def rewrite(m: re.Match[str]) -> str:
        found = _outside_target(page.file.src_uri, m.group(2), docs)
        site_path = None if found is None else _site_path(found[0], repo)
        if found is None or site_path is None:
            return m.group(0)  # not an outside link, or a missing file on_files reported
        link = posixpath.relpath(site_path, here or ".")
        return f"{m.group(1)}({link}{'#' + found[1] if found[1] else ''})"

    lines = markdown.split("\n")
    for number in sorted({number for number, _ in _links(markdown)}):
        lines[number - 1] = LINK.sub(rewrite, lines[number - 1])
    return "\n".join(lines)
