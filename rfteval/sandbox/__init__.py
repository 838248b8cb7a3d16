"""The python grader sandbox: each grading unit in a fresh process, inside bubblewrap, with limits for the unit.

A grader's source never runs in the rfteval process, nor in the process that frames its results. Each pool slot
starts one supervisor (`_worker.py`) inside bubblewrap: user, PID, mount, network, IPC and UTS namespaces, no
capabilities, no new privileges, a seccomp filter (seccomp.py), a read-only view of the interpreter and its
packages, a private size-limited /tmp, no home, no run directory, no host /proc; and, where rfteval can make one,
a cgroup that caps the memory and the processes of everything in it (cgroup.py). The supervisor forks a fresh
child for every grading unit, the samples of one (model, item) (callers declare units with `grading_units`;
without a declaration every sample is its own unit), reads back only that child's results, keeps the time, and
kills everything the unit started before the next one. This process checks and bounds every reply once more
(wire.py). docs/sandbox.md has the threat model and what each part guards against.

Where bubblewrap, the seccomp filter or the limits cannot be had (host_probe.py), the pool (pool.py) refuses to
run python graders (SandboxUnavailable, one line saying why) unless it was made with `unsafe=True`
(`--unsafe-python-graders`): then the same supervisor runs without bubblewrap, with the environment allow-list
and per-process limits only. The process-wide choices and grading units are policy.py's.

This module re-exports what the rest of rfteval and its users import.
"""

from rfteval.sandbox.cgroup import CGROUP_ROOT_ENV, Cgroup, cgroup_parents, cgroup_root
from rfteval.sandbox.host_probe import (
    HOST_FACTS_ENV,
    Host,
    HostFacts,
    bwrap_args,
    host,
    host_facts,
    no_cgroup_reason,
    probe_host,
    refusal_reason,
    sandbox_problem,
)
from rfteval.sandbox.policy import (
    POLICY,
    Policy,
    SandboxUnavailable,
    call_in_units,
    configure,
    declared_units,
    grading_units,
    group_units,
    worker_env,
)
from rfteval.sandbox.pool import CHILD_SLACK, WORKER_SCRIPT, WorkerPool, default_workers
from rfteval.sandbox.wire import (
    RESEND,
    STDOUT_CAP,
    Failure,
    Resend,
    compact_sample,
    decode_reply,
    encode,
    encode_whole,
)

__all__ = ["CGROUP_ROOT_ENV", "CHILD_SLACK", "HOST_FACTS_ENV", "POLICY", "RESEND", "STDOUT_CAP", "WORKER_SCRIPT",
           "Cgroup", "Failure", "Host", "HostFacts", "Policy", "Resend", "SandboxUnavailable", "WorkerPool",
           "bwrap_args", "call_in_units", "cgroup_parents", "cgroup_root", "compact_sample", "configure",
           "decode_reply", "declared_units", "default_workers", "encode", "encode_whole", "grading_units",
           "group_units", "host", "host_facts", "no_cgroup_reason", "probe_host", "refusal_reason",
           "sandbox_problem", "worker_env"]
