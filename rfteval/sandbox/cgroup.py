"""Cgroups for the sandbox: where this process may create them (v1 or v2), and one cgroup per sandbox that
holds the memory and the processes of everything in it, and counts its OOM kills."""

from __future__ import annotations

import functools
import os
import time
from pathlib import Path

CGROUP_ROOT_ENV = "RFTEVAL_CGROUP_ROOT"  # tests only: where cgroups are mounted (a path that is not writable, say)


class Cgroup:
    """A cgroup for one sandbox (memory and process limits for everything in it), v1 or v2, or none.

    Its memory limit is the grader memory above what the template holds: set high while the supervisor imports a
    source's packages, then `fit` to the template's own resident memory + --grader-memory + a child's slack, so
    everything a unit's processes hold together (their /tmp and /dev/shm pages too) is held to --grader-memory."""

    def __init__(self, dirs: list[str], version: str = "v2"):
        self.dirs = dirs
        self.version = version

    @property
    def procs(self) -> list[str]:
        return [os.path.join(d, "cgroup.procs") for d in self.dirs]

    @property
    def oom_file(self) -> str | None:
        """The file whose `oom_kill N` line counts the OOM killer's kills here."""
        if not self.dirs:
            return None
        return os.path.join(self.dirs[0], "memory.oom_control" if self.version == "v1" else "memory.events")

    @classmethod
    def make(cls, name: str, memory_bytes: int | None, pids: int) -> Cgroup | None:
        made: list[str] = []
        parents = cgroup_parents()
        try:
            for controller, settings in cgroup_layout(memory_bytes, pids):
                path = os.path.join(controller, name)
                os.mkdir(path)
                made.append(path)
                for file, value in settings.items():
                    if file.startswith("memory.memsw.") and not os.path.exists(os.path.join(path, file)):
                        continue  # swap accounting off (a kernel option): swap is then not the cgroup's to give
                    with open(os.path.join(path, file), "w") as fh:
                        fh.write(value)
        except OSError:
            cls(made).remove()
            return None
        return cls(made, parents[0] if parents else "v2") if made else None

    def _read(self, name: str) -> str:
        return Path(self.dirs[0], name).read_text()

    def resident(self) -> int:
        """What the cgroup's processes hold that the kernel cannot simply drop: its usage without the file
        cache (the packages' files read at import), which reclaim takes back under the limit anyway."""
        v1 = self.version == "v1"
        usage = int(self._read("memory.usage_in_bytes" if v1 else "memory.current"))
        stat = dict(line.split() for line in self._read("memory.stat").splitlines() if line.count(" ") == 1)
        prefix = "total_" if v1 else ""
        cache = sum(int(stat.get(f"{prefix}{k}", 0)) for k in ("active_file", "inactive_file"))
        return max(0, usage - cache)

    def set_memory(self, limit: int) -> None:
        """The memory limit (and no swap beyond it). v1 wants memsw >= limit at every moment: when one order is
        refused, the other is right."""
        if self.version == "v1":
            files = ["memory.limit_in_bytes"]
            if os.path.exists(os.path.join(self.dirs[0], "memory.memsw.limit_in_bytes")):
                files.append("memory.memsw.limit_in_bytes")
        else:
            files = ["memory.max"]
        for order in (files, files[::-1]):
            try:
                for name in order:
                    with open(os.path.join(self.dirs[0], name), "w") as fh:
                        fh.write(str(limit))
                return
            except OSError:
                continue
        raise OSError(f"the sandbox's cgroup refused a memory limit of {limit} bytes")

    def fit(self, memory_bytes: int, room: int) -> int:
        """Set the limit to the template's resident memory + `room`; returns the limit."""
        limit = self.resident() + memory_bytes + room
        self.set_memory(limit)
        return limit

    def oom_kills(self) -> int:
        """How many processes the kernel's OOM killer has killed in this cgroup so far (memory.oom_control on v1,
        memory.events on v2; 0 where neither says)."""
        path = self.oom_file
        if path is None:
            return 0
        try:
            text = Path(path).read_text()
        except OSError:
            return 0
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                return int(value)
        return 0

    def remove(self) -> None:
        for path in reversed(self.dirs):
            for _ in range(50):
                try:
                    os.rmdir(path)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)  # its last processes are still being torn down


def cgroup_root() -> str:
    return os.environ.get(CGROUP_ROOT_ENV) or "/sys/fs/cgroup"


@functools.lru_cache(maxsize=1)
def cgroup_parents() -> tuple[str, str, str] | None:
    """('v1', memory dir, pids dir) or ('v2', dir, '') where this process may create child cgroups."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    own = {}
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) == 3:
            for controller in parts[1].split(",") if parts[1] else ["unified"]:
                own[controller] = parts[2]
    base = cgroup_root()
    if "memory" in own and "pids" in own:
        memory = os.path.join(base, "memory", own["memory"].lstrip("/"))
        pids = os.path.join(base, "pids", own["pids"].lstrip("/"))
        if writable_dir(memory) and writable_dir(pids):
            return "v1", memory, pids
    if "unified" in own:
        for unified in (os.path.join(base, own["unified"].lstrip("/")),
                        os.path.join(base, "unified", own["unified"].lstrip("/"))):
            try:
                enabled = Path(unified, "cgroup.subtree_control").read_text().split()
            except OSError:
                continue
            if {"memory", "pids"} <= set(enabled) and writable_dir(unified):
                return "v2", unified, ""
    return None


def writable_dir(path: str) -> bool:
    """A cgroup directory this process may create children in: os.access says yes to root on any directory, so
    a read-only mount (Docker's default /sys/fs/cgroup) is checked for too."""
    if not (os.path.isdir(path) and os.access(path, os.W_OK)):
        return False
    try:
        return not os.statvfs(path).f_flag & os.ST_RDONLY
    except OSError:
        return False


def cgroup_layout(memory_bytes: int | None, pids: int) -> list[tuple[str, dict[str, str]]]:
    parents = cgroup_parents()
    if parents is None:
        raise OSError("no cgroup")
    version, first, second = parents
    if version == "v1":
        memory = {"memory.limit_in_bytes": str(memory_bytes)} if memory_bytes else {}
        if memory_bytes:
            memory["memory.memsw.limit_in_bytes"] = str(memory_bytes)  # no escape into swap
        return [(first, memory), (second, {"pids.max": str(pids)})]
    settings = {"pids.max": str(pids)}
    if memory_bytes:
        settings.update({"memory.max": str(memory_bytes), "memory.swap.max": "0"})
    return [(first, settings)]

