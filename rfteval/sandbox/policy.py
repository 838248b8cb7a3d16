"""The sandbox's policy: unsafe mode, the environment that may pass, the time grace, and grading units.

What the command line decides once per process (`configure`), which pairs may share a process (`grading_units`,
`group_units`), and what reaches grader code from rfteval's environment (`worker_env`).
"""

from __future__ import annotations

import contextlib
import contextvars
import os
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar, TypeVarTuple

if TYPE_CHECKING:
    from rfteval.data.grades import Pair

R = TypeVar("R")
Ts = TypeVarTuple("Ts")

THREAD_ENV = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS",
              "VECLIB_MAXIMUM_THREADS")
# What reaches grader code from rfteval's environment: locale, time zone and search path, nothing else.
ENV_ALLOWED = ("PATH", "LANG", "LANGUAGE", "TZ", "PYTHONHASHSEED", "PYTHONIOENCODING")
ENV_ALLOWED_PREFIXES = ("LC_",)
SANDBOX_TMP = "/tmp"
UNSAFE_HINT = ("or pass --unsafe-python-graders, which gives up the namespaces, seccomp and filesystem isolation "
               "(grader code sees this machine's files and network, and its processes can outlive a unit)")

_UNITS: contextvars.ContextVar[list[Hashable] | None] = contextvars.ContextVar("rfteval_grading_units", default=None)


class SandboxUnavailable(RuntimeError):
    """The sandbox cannot be built as promised here, and unsafe mode was not asked for."""


@dataclass
class Policy:
    """Process-wide choices the command line makes: unsafe mode, and variable names that must never pass even
    if the allow-list would let them (the ones --api-key-env and --judge-api-key-env name)."""

    unsafe: bool = False
    never_pass: set[str] = field(default_factory=set)


POLICY = Policy(unsafe=os.environ.get("RFTEVAL_UNSAFE_PYTHON_GRADERS") == "1")


def configure(unsafe: bool | None = None, never_pass: Iterable[str | None] = ()) -> None:
    """Set the process-wide policy (the CLI calls this once, from its flags)."""
    if unsafe is not None:
        POLICY.unsafe = unsafe
    POLICY.never_pass.update(name for name in never_pass if name)


@contextlib.contextmanager
def grading_units(keys: Sequence[Hashable]) -> Iterator[None]:
    """Declare, for the python graders called inside, which pairs may share a process: pairs whose keys are
    equal (use (model label, item id)). Without it every sample is graded in a process of its own."""
    token = _UNITS.set(list(keys))
    try:
        yield
    finally:
        _UNITS.reset(token)


def call_in_units(keys: Sequence[Hashable], fn: Callable[[*Ts], R], *args: *Ts) -> R:
    """fn(*args) with `keys` declared as grading units (for asyncio.to_thread and other callers of a function)."""
    with grading_units(keys):
        return fn(*args)


def declared_units(n: int) -> list[Hashable] | None:
    keys = _UNITS.get()
    return keys if keys is not None and len(keys) == n else None


def worker_env() -> dict[str, str]:
    """The sandbox's environment: an allow-list (locale, time zone, PATH), never a name the policy forbids,
    one thread per numeric library, and a HOME and TMPDIR inside the unit's /tmp."""
    env = {k: v for k, v in os.environ.items()
           if (k in ENV_ALLOWED or k.startswith(ENV_ALLOWED_PREFIXES)) and k not in POLICY.never_pass}
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


