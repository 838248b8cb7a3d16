"""The sandbox's policy: what a pool's sandboxes may do (unsafe mode, the unit's limits, the variables that never
pass), the environment that reaches code in them, the time grace, and which pairs share a grading unit.

A policy is a value each WorkerPool is given when it is made: two pools in one process may hold different ones,
and nothing sets one for the whole process. Where the flags are read (the commands' options, RunSpec,
RewardOptions) the policy is built. Which pairs may share a process is said with each batch (its grading units,
`group_units`); what reaches grader code from rfteval's environment is `worker_env`'s.
"""

from __future__ import annotations

import math
import os
from collections.abc import Collection, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rfteval.limits import PYTHON_MEMORY_MB, PYTHON_MIN_MEMORY_MB, PYTHON_TIMEOUT_S

if TYPE_CHECKING:
    from rfteval.data.grades import Pair

THREAD_ENV = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS",
              "VECLIB_MAXIMUM_THREADS")
# What reaches grader code from rfteval's environment: locale, time zone and search path, nothing else.
ENV_ALLOWED = ("PATH", "LANG", "LANGUAGE", "TZ", "PYTHONHASHSEED", "PYTHONIOENCODING")
ENV_ALLOWED_PREFIXES = ("LC_",)
SANDBOX_TMP = "/tmp"
UNSAFE_HINT = ("or pass --unsafe-python-graders, which gives up the namespaces, seccomp and filesystem isolation "
               "(grader code sees this machine's files and network, and its processes can outlive a unit)")
UNSAFE_ENV = "RFTEVAL_UNSAFE_PYTHON_GRADERS"


class SandboxUnavailable(RuntimeError):
    """The sandbox cannot be built as promised here, and unsafe mode was not asked for."""


def unsafe_from_env() -> bool:
    """RFTEVAL_UNSAFE_PYTHON_GRADERS=1: unsafe mode for a policy whose maker does not say (a library caller's, a
    reward's without unsafe_python_graders=True), read when the policy is built. The commands' policy is their flag."""
    return os.environ.get(UNSAFE_ENV) == "1"


@dataclass(frozen=True)
class SandboxPolicy:
    """What a pool's sandboxes may do, fixed when the pool is made.

    `unsafe`: run the supervisor without bubblewrap where the sandbox cannot be built (--unsafe-python-graders;
    default: RFTEVAL_UNSAFE_PYTHON_GRADERS=1). `never_pass`: variable names that never reach the sandbox even when
    the allow-list would let them (the ones --api-key-env and --judge-api-key-env name). The limits of a unit:
    wall time per call (--grader-timeout), memory in MB (--grader-memory; None: none), the size of its /tmp in MB,
    and its processes.
    """

    unsafe: bool = field(default_factory=unsafe_from_env)
    never_pass: frozenset[str] = frozenset()
    timeout_s: float = PYTHON_TIMEOUT_S
    memory_mb: int | None = PYTHON_MEMORY_MB
    disk_mb: int = 1024
    processes: int = 128

    def __post_init__(self) -> None:
        if not self.timeout_s > 0:
            raise ValueError("timeout_s must be positive")
        object.__setattr__(self, "timeout_s", float(self.timeout_s))
        object.__setattr__(self, "never_pass", frozenset(self.never_pass))

    @classmethod
    def from_flags(cls, unsafe: bool, key_envs: Iterable[str | None] = (), timeout_s: float = PYTHON_TIMEOUT_S,
                   memory_mb: int = PYTHON_MEMORY_MB) -> SandboxPolicy:
        """The policy a command's flags give: --unsafe-python-graders as given, the variables the key flags name
        (unset ones left out) kept from grader code, --grader-timeout and --grader-memory, each checked as the flag
        names it (one line, exit 2) before any sample is graded or judge call paid for."""
        from rfteval.errors import InputError

        if not (math.isfinite(timeout_s) and timeout_s > 0):
            raise InputError(f"must be a number of seconds > 0, got {timeout_s:g}", field="--grader-timeout")
        if memory_mb < PYTHON_MIN_MEMORY_MB:
            raise InputError(f"must be at least {PYTHON_MIN_MEMORY_MB} (MB), got {memory_mb}", field="--grader-memory")
        return cls(unsafe=unsafe, never_pass=frozenset(name for name in key_envs if name), timeout_s=timeout_s,
                   memory_mb=memory_mb)


def worker_env(never_pass: Collection[str] = ()) -> dict[str, str]:
    """The sandbox's environment: an allow-list (locale, time zone, PATH), never a name in `never_pass` (the
    policy's), one thread per numeric library, and a HOME and TMPDIR inside the unit's /tmp."""
    env = {k: v for k, v in os.environ.items()
           if (k in ENV_ALLOWED or k.startswith(ENV_ALLOWED_PREFIXES)) and k not in never_pass}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.update({name: "1" for name in THREAD_ENV})
    env.update(HOME=SANDBOX_TMP, TMPDIR=SANDBOX_TMP, PYTHONDONTWRITEBYTECODE="1")
    return env


def grace_s(timeout_s: float) -> float:
    """How long past the limit the supervisor waits for the child's own alarm before it kills the child."""
    return 1.0 + 0.05 * timeout_s


def group_units(pairs: Sequence[Pair], keys: Sequence[Hashable] | None) -> list[list[int]]:
    """Indices of `pairs` by grading unit, units in order of first appearance: with no keys every pair is its own
    unit; with keys, pairs of one key and one item object share a unit."""
    if keys is None:
        return [[i] for i in range(len(pairs))]
    groups: dict[tuple[Hashable, int], list[int]] = {}
    for i, ((_, item), key) in enumerate(zip(pairs, keys, strict=True)):
        groups.setdefault((key, id(item)), []).append(i)
    return list(groups.values())
