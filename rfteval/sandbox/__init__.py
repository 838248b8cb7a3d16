"""The python grader sandbox: each grading unit in a fresh process, inside bubblewrap, with limits for the unit.

A grader's source never runs in the rfteval process, nor in the process that frames its results. Each pool slot
starts one supervisor (`_worker.py`) inside bubblewrap: user, PID, mount, network, IPC and UTS namespaces, no
capabilities, no new privileges, a seccomp filter (seccomp.py), a read-only view of the interpreter and its
packages, a private size-limited /tmp, no home, no run directory, no host /proc; and, where rfteval can make one,
a cgroup that caps the memory and the processes of everything in it (cgroup.py). The supervisor forks a fresh
child for every grading unit, the samples of one (model, item) (callers pass units with each batch,
`WorkerPool.grade(source, pairs, units)`; without them every sample is its own unit), reads back only that
child's results, keeps the time, and kills everything the unit started before the next one. This process checks
and bounds every reply once more (wire.py). docs/sandbox.md has the threat model and what each part guards against.

Where bubblewrap, the seccomp filter or the limits cannot be had (host_probe.py), the pool (pool.py) refuses to
run python graders (SandboxUnavailable, one line saying why) unless it was given an unsafe policy
(`--unsafe-python-graders`): then the same supervisor runs without bubblewrap, with the environment allow-list
and per-process limits only. What a pool may do is the SandboxPolicy it is given (policy.py): nothing is set for
the whole process, so pools of different policies live side by side.

This module re-exports what the rest of rfteval and its users import, lazily: rfteval.graders.base holds a
SandboxPolicy in every GradeOptions, and importing it must not load the pool, the wire or the host probe.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rfteval import lazy_reexport

if TYPE_CHECKING:
    from rfteval.sandbox.cgroup import *  # noqa: F403
    from rfteval.sandbox.host_probe import *  # noqa: F403
    from rfteval.sandbox.policy import *  # noqa: F403
    from rfteval.sandbox.pool import *  # noqa: F403
    from rfteval.sandbox.wire import *  # noqa: F403

_EXPORTS = {
    "rfteval.sandbox.cgroup": "CGROUP_ROOT_ENV Cgroup cgroup_parents cgroup_root",
    "rfteval.sandbox.host_probe": "HOST_FACTS_ENV Host HostFacts bwrap_args host host_facts no_cgroup_reason probe_host "
                                  "refusal_reason sandbox_problem",
    "rfteval.sandbox.policy": "UNSAFE_ENV SandboxPolicy SandboxUnavailable group_units unsafe_from_env worker_env",
    "rfteval.sandbox.pool": "CHILD_SLACK WORKER_SCRIPT WorkerPool default_workers",
    "rfteval.sandbox.wire": "RESEND STDOUT_CAP Failure Resend compact_sample decode_reply encode encode_whole",
}
_MODULES = {name: module for module, names in _EXPORTS.items() for name in names.split()}
__all__ = sorted(_MODULES)

# a name of none of them: policy's attribute lookup refuses it (and `from rfteval.sandbox import pool` imports pool)
__getattr__ = lazy_reexport(globals(), lambda name: _MODULES.get(name, "rfteval.sandbox.policy"))
