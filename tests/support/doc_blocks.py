"""The code blocks of the documentation (README.md and docs/**/*.md), parsed as Markdown, and the markers that say
why a shell or Python block is not run (tests/project/test_docs_examples.py runs the others; tests/README.md lists
the markers).

A marker is an HTML comment on the line right before the block's fence, invisible on GitHub and in the site:

    <!-- example: needs live endpoint -->
    ```sh
    rfteval run --base-url http://gpu-box:8000/v1 ...
    ```

Markdown is parsed with markdown-it-py (rich's own Markdown parser, so always installed with rfteval): a fence inside
a list item, indented, or a comment line holding a fence is read as a reader's Markdown renders it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from markdown_it import MarkdownIt

from tests.support import REPO

# The one list of markers: why a block is shown but not run. Anything else after `example:` is an error naming it.
MARKERS: dict[str, str] = {
    "needs live endpoint": "reaches a server, model or service the tests do not start (a vLLM endpoint, OpenAI's API, "
                           "a GPU trainer), or a host other than 127.0.0.1",
    "fragment": "not a whole command or program: a flag list, a synopsis, placeholders (D.jsonl, LABEL), or names a "
                "reader's own code defines",
    "installs": "installs or builds into the machine or the venv (make targets, pip install): `make` runs these",
    "interactive": "runs until stopped or opens a browser (`rfteval view` serving its pages)",
}
MARKER = re.compile(r"<!--\s*example:\s*(?P<name>[^>]*?)\s*-->")
RUNNABLE = ("sh", "bash", "console", "python")  # the languages a block runs in; ```text after one is its output
SHELLS = ("sh", "bash", "console")


@dataclass(frozen=True)
class Block:
    """A fenced code block: its file, the line of its opening fence (1-based), its language and text, the marker
    right before it (None without one), and the ```text block right after it (its printed output), if any."""

    path: Path
    line: int
    lang: str
    source: str
    marker: str | None
    output: str | None = None
    output_line: int | None = None

    @property
    def where(self) -> str:
        """`file:line` from the checkout, the block's id in test names and failure messages."""
        return f"{self.path.relative_to(REPO).as_posix()}:{self.line}"

    @property
    def runnable(self) -> bool:
        return self.lang in RUNNABLE


def doc_files(root: Path = REPO) -> list[Path]:
    """README.md and every docs/**/*.md: the documentation a reader runs examples from."""
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


@cache
def blocks(path: Path) -> tuple[Block, ...]:
    """Every fenced block of `path`, in order; a block's `output` is a ```text block following it with nothing but
    blank lines between."""
    tokens = MarkdownIt("commonmark").parse(path.read_text(encoding="utf-8"))
    out: list[Block] = []
    for i, token in enumerate(tokens):
        if token.type != "fence" or token.map is None:
            continue
        lang = token.info.split()[0] if token.info.strip() else ""
        previous = tokens[i - 1] if i else None
        found = MARKER.search(previous.content) if previous is not None and previous.type == "html_block" else None
        block = Block(path, token.map[0] + 1, lang, token.content, found["name"] if found else None)
        if (lang == "text" and out and out[-1].runnable and previous is not None and previous.type == "fence"
                and previous.map is not None and out[-1].line == previous.map[0] + 1):
            before = out[-1]
            out[-1] = Block(before.path, before.line, before.lang, before.source, before.marker, token.content,
                            token.map[0] + 1)
        out.append(block)
    return tuple(out)


def all_blocks(root: Path = REPO) -> list[Block]:
    return [b for path in doc_files(root) for b in blocks(path)]
