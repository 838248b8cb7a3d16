"""sandbox/cgroup.py, no cgroup touched: the limits a unit's cgroup is given under cgroup v1 and v2 (the
cgroups themselves are made and removed by the pool's and the attacks' tests, as root)."""

from __future__ import annotations

import pytest

from rfteval.sandbox import cgroup


def test_the_layout_caps_memory_without_swap_and_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cgroup, "cgroup_parents", lambda: ("v2", "/cg/rfteval", "/cg/rfteval"))
    assert cgroup.cgroup_layout(1 << 30, 64) == [
        ("/cg/rfteval", {"pids.max": "64", "memory.max": str(1 << 30), "memory.swap.max": "0"})]
    assert cgroup.cgroup_layout(None, 8) == [("/cg/rfteval", {"pids.max": "8"})]
    monkeypatch.setattr(cgroup, "cgroup_parents", lambda: ("v1", "/cg/memory/rfteval", "/cg/pids/rfteval"))
    assert cgroup.cgroup_layout(100, 8) == [
        ("/cg/memory/rfteval", {"memory.limit_in_bytes": "100", "memory.memsw.limit_in_bytes": "100"}),
        ("/cg/pids/rfteval", {"pids.max": "8"})]
    assert cgroup.cgroup_layout(None, 8) == [("/cg/memory/rfteval", {}), ("/cg/pids/rfteval", {"pids.max": "8"})]
    monkeypatch.setattr(cgroup, "cgroup_parents", lambda: None)
    with pytest.raises(OSError, match="no cgroup"):
        cgroup.cgroup_layout(100, 8)
