"""A source made ready in the supervisor before any child exists, never running a line of it: the packages it
imports imported (read from its syntax tree), their first-use work done (pydantic's), and the per-process
limits of its units computed. The standard library only.
"""

from __future__ import annotations

import ast
import os
import resource
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rfteval.sandbox._worker_protocol import WorkerConfig

MAX_PREIMPORTS = 64


def imported_modules(source: str) -> list[str]:
    """The absolute module names the source imports anywhere (top level or inside functions), read from its
    syntax tree without running it: the supervisor imports them once, so each unit's child starts with them."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
            names += [f"{node.module}.{alias.name}" for alias in node.names if alias.name != "*"]
    seen: dict[str, None] = {}
    for name in names:
        if all(part.isidentifier() for part in name.split(".")):
            seen.setdefault(name, None)
    return list(seen)[:MAX_PREIMPORTS]


def preimport(names: list[str]) -> None:
    """Import what a source will import (installed, read-only packages: trusted code), ignoring what fails;
    a submodule name that is really an attribute (`from collections import Counter`) fails quietly too."""
    import importlib

    for name in names:
        if name in sys.modules:
            continue
        try:
            importlib.import_module(name)
        except BaseException:  # noqa: BLE001, S110
            pass


WARMED: set[str] = set()  # the packages warm_up has done


def warm_up() -> None:
    """Do, once in the template, the first-use work of packages a grader imported (trusted code of ours, never the
    grader's): pydantic imports most of itself and builds its schema machinery when the first model class is
    defined, which a grader defining models would otherwise pay in every unit's child. Failures are ignored."""
    if "pydantic" in sys.modules and "pydantic" not in WARMED:
        WARMED.add("pydantic")
        try:
            from typing import Optional

            import pydantic

            class Part(pydantic.BaseModel):
                name: str = pydantic.Field(description="a name", examples=["x"])
                value: Optional[float] = None  # noqa: UP045  (the spelling graders use)

            class Whole(pydantic.BaseModel):
                parts: list[Part] = pydantic.Field(default_factory=list)
                tags: Optional[list[str]] = pydantic.Field(default=None, description="tags")  # noqa: UP045
                extra: dict[str, Any] = {}  # Any: the spelling graders use, whose schema path this warms
                flag: bool = False
                count: int = 0

            Whole.model_validate({"parts": [{"name": "a", "value": 1}], "tags": ["t"]}).model_dump()
        except BaseException:  # noqa: BLE001, S110
            pass


def vm_size() -> int:
    """This process's mapped address space in bytes (what RLIMIT_AS counts)."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def child_limits(config: WorkerConfig, vsize: int) -> list[tuple[int, tuple[int, int]]]:
    """Per-process limits of the unit (the cgroup, when rfteval has one, limits the whole unit's memory and
    processes on top): address space beyond what the template maps, file size, process count, no core files.
    Computed once per source in the supervisor; a child only applies them."""
    limits: list[tuple[int, tuple[int, int]]] = []
    memory_mb = config.get("memory_mb")
    if memory_mb:
        want = vsize + int(memory_mb) * 1024 * 1024
        limits.append((resource.RLIMIT_AS, (want, want)))
    fsize = config.get("file_bytes")
    if fsize:
        limits.append((resource.RLIMIT_FSIZE, (int(fsize), int(fsize))))  # SIGXFSZ is ignored: EFBIG instead
    nproc = config.get("nproc")
    if nproc:
        limits.append((resource.RLIMIT_NPROC, (int(nproc), int(nproc))))
    limits.append((resource.RLIMIT_CORE, (0, 0)))
    return limits
