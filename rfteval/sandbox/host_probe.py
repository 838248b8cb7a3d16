"""What this host offers the sandbox: bubblewrap's arguments, the seccomp program, and the once-per-process
probe that says whether the whole sandbox can be built here, or one line naming the step that fails and its remedy."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rfteval.sandbox.cgroup import cgroup_parents, cgroup_root
from rfteval.sandbox.policy import SANDBOX_TMP, UNSAFE_HINT, SandboxPolicy, worker_env

SHM_BYTES = 64 << 20
TMP_MARGIN = 64 << 20  # under a cgroup, /tmp is this much smaller than --grader-memory less /dev/shm
HOST_FACTS_ENV = "RFTEVAL_HOST_FACTS_ROOT"  # tests only: what stands for / when a refusal is explained (sysctls)


@functools.lru_cache(maxsize=1)
def seccomp_program() -> bytes:
    from rfteval.sandbox.seccomp import compile_filter

    return compile_filter()


def _ro_paths(also: Sequence[str] = ()) -> list[str]:
    """What the sandbox sees, read-only: the interpreter, its packages and rfteval's own package (and `also`),
    nothing of the working tree, home or run directory around them."""
    import rfteval

    wanted = [sys.base_prefix, sys.prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable)),
              os.path.dirname(os.path.abspath(rfteval.__file__)), *also]
    wanted += [p for p in sys.path if p and ("site-packages" in p or "dist-packages" in p)]
    out: list[str] = []
    files = {q for p in also for q in (os.path.realpath(p), os.path.abspath(p)) if os.path.isfile(q)}
    for path in sorted({os.path.realpath(p) for p in wanted} | {os.path.abspath(p) for p in wanted}):
        if not (os.path.isdir(path) or path in files) or path == "/":
            continue
        if any(path == o or path.startswith(o.rstrip("/") + "/") for o in out):
            continue
        out.append(path)
    return out


SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
ETC_FILES = ("/etc/ld.so.cache", "/etc/localtime", "/etc/passwd", "/etc/group", "/etc/nsswitch.conf",
             "/etc/mime.types")


OOM_FILE = "/.rfteval-oom"  # inside the sandbox: the cgroup's OOM-kill count, bound read-only


NETWORK_ETC = ("/etc/resolv.conf", "/etc/hosts", "/etc/ssl")  # what a process given the network needs to use it


def bwrap_args(tmp_bytes: int, seccomp_fd: int, oom_file: str | None = None, *, also_ro: Sequence[str] = (),
               network: bool = False) -> list[str]:
    """bubblewrap's arguments: every namespace, no capabilities, a read-only root of system directories, the
    interpreter and packages; a size-limited /tmp and /dev/shm; a fresh /proc of the sandbox's own processes;
    the cgroup's OOM-kill count (read-only: the supervisor charges a kill to the unit it happened in). `also_ro`:
    more paths seen read-only (an MCP server's own virtualenv, rfteval.tools.mcp); `network`: the host's network
    namespace kept (an MCP server its spec allows it), every other namespace still new."""
    args = ["--unshare-all", "--unshare-user", "--die-with-parent", "--new-session", "--disable-userns",
            "--cap-drop", "ALL"]
    if network:
        args.append("--share-net")
    for path in SYSTEM_DIRS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    for path in ETC_FILES + (NETWORK_ETC if network else ()):
        if os.path.exists(path):
            args += ["--ro-bind", path, path]
    under_tmp = []  # an interpreter or checkout under /tmp (a CI clone, say): bound after the private /tmp is made
    for path in _ro_paths(also_ro):
        if any(path == d or path.startswith(d + "/") for d in SYSTEM_DIRS if not os.path.islink(d)):
            continue
        if path == SANDBOX_TMP or path.startswith(SANDBOX_TMP.rstrip("/") + "/"):
            under_tmp += ["--ro-bind", path, path]
        else:
            args += ["--ro-bind", path, path]
    if oom_file is not None:
        args += ["--ro-bind", oom_file, OOM_FILE]
    args += ["--proc", "/proc", "--dev", "/dev", "--size", str(SHM_BYTES), "--tmpfs", "/dev/shm",
             "--remount-ro", "/dev", "--size", str(tmp_bytes), "--tmpfs", SANDBOX_TMP, *under_tmp,
             "--remount-ro", "/", "--chdir", SANDBOX_TMP, "--seccomp", str(seccomp_fd)]
    return args


@dataclass(frozen=True)
class Host:
    """What this host gives the sandbox: None in `refused` when the whole sandbox can be built."""

    bwrap: str | None
    cgroup: bool
    refused: str | None


_HOST: Host | None = None
_HOST_LOCK = threading.Lock()


def host() -> Host:
    """Checked once per process: bubblewrap runs with every namespace and the seccomp filter, and the unit's
    processes can be limited (a cgroup, or RLIMIT_NPROC, which binds only a user other than root)."""
    global _HOST
    with _HOST_LOCK:
        if _HOST is None:
            _HOST = probe_host()
        return _HOST


def probe_host() -> Host:
    """Each step the sandbox needs, in order; the first that fails is the one line's reason, with its remedy."""
    if not sys.platform.startswith("linux"):
        return Host(None, False, f"the python grader sandbox needs Linux (this is {sys.platform})")
    bwrap = shutil.which("bwrap")
    cgroup = cgroup_parents() is not None
    if bwrap is None:
        return Host(None, cgroup, "bubblewrap (bwrap) is not installed: install it as root with `apt-get install "
                                  "bubblewrap` (or `make sandbox`)")
    try:
        program = seccomp_program()
    except Exception as exc:  # noqa: BLE001
        return Host(bwrap, cgroup, f"seccomp is unavailable: the filter could not be built ({exc}); install "
                                   "libseccomp2 as root (`apt-get install libseccomp2`)")
    if os.getuid() == 0 and not cgroup:
        return Host(bwrap, cgroup, no_cgroup_reason())
    read_fd, write_fd = os.pipe()
    os.write(write_fd, program)
    os.close(write_fd)
    try:
        proc = subprocess.run([bwrap, *bwrap_args(1 << 20, read_fd), "--", sys.executable, "-I", "-c", "pass"],
                              pass_fds=(read_fd,), env=worker_env(), capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Host(bwrap, cgroup, f"bubblewrap could not start: {exc}")
    finally:
        os.close(read_fd)
    if proc.returncode != 0:
        text = (proc.stderr or proc.stdout).decode("utf-8", "replace").strip().splitlines()
        return Host(bwrap, cgroup, refusal_reason(text[-1] if text else f"exit code {proc.returncode}",
                                                  host_facts()))
    return Host(bwrap, cgroup, None)


@dataclass(frozen=True)
class HostFacts:
    """What decides which remedy a refusal gets: the sysctls that restrict user namespaces, and a container."""

    apparmor_restricts_userns: bool = False  # Ubuntu 23.10+: kernel.apparmor_restrict_unprivileged_userns=1
    userns_clone_off: bool = False  # Debian's older kernels: kernel.unprivileged_userns_clone=0
    no_user_namespaces: bool = False  # user.max_user_namespaces=0 (RHEL-likes' switch)
    container: bool = False  # Docker (/.dockerenv) or podman (/run/.containerenv)


def host_facts() -> HostFacts:
    root = os.environ.get(HOST_FACTS_ENV) or "/"

    def sysctl(name: str) -> str | None:
        try:
            return Path(root, "proc", "sys", *name.split(".")).read_text().strip()
        except OSError:
            return None

    return HostFacts(apparmor_restricts_userns=sysctl("kernel.apparmor_restrict_unprivileged_userns") == "1",
                     userns_clone_off=sysctl("kernel.unprivileged_userns_clone") == "0",
                     no_user_namespaces=sysctl("user.max_user_namespaces") == "0",
                     container=any(os.path.exists(os.path.join(root, p)) for p in (".dockerenv", "run/.containerenv")))


DOCKER_REMEDY = ("run the container with `--security-opt seccomp=unconfined --security-opt apparmor=unconfined` "
                 "(Docker's default seccomp and AppArmor profiles refuse new namespaces and mounts)")
APPARMOR_REMEDY = ("allow them with `sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0`, or load an "
                   "AppArmor profile that lets /usr/bin/bwrap create them (docs/sandbox.md, \"CI hosts\")")


def refusal_reason(message: str, facts: HostFacts) -> str:
    """One line for bubblewrap's refusal (`message`, its last line of stderr): which step failed and the remedy
    for this host. A pure function of the message and the host's facts, so each cause is tested on its own."""
    said = f"(bwrap: {message.removeprefix('bwrap: ').strip()[:300]})"
    low = message.lower()
    if "seccomp" in low:
        return (f"seccomp is unavailable: the kernel refused the sandbox's seccomp filter {said}; run on a kernel "
                "with CONFIG_SECCOMP_FILTER" + (f", and {DOCKER_REMEDY}" if facts.container else ""))
    namespace = any(word in low for word in ("namespace", "uid map", "uid_map", "gid map", "setgroups"))
    if namespace:
        if facts.apparmor_restricts_userns:
            return f"user namespaces are refused by AppArmor (Ubuntu 24.04's default) {said}: {APPARMOR_REMEDY}"
        if facts.userns_clone_off:
            return (f"user namespaces are refused by the kernel {said}: allow them with "
                    "`sudo sysctl -w kernel.unprivileged_userns_clone=1`")
        if facts.no_user_namespaces:
            return (f"user namespaces are refused by the kernel {said}: allow them with "
                    "`sudo sysctl -w user.max_user_namespaces=15000`")
        if facts.container:
            return f"user namespaces are refused in this container {said}: {DOCKER_REMEDY}"
        return (f"user namespaces are refused by the kernel or a security module {said}: allow unprivileged user "
                "namespaces (docs/sandbox.md, \"CI hosts\")")
    if any(word in low for word in ("mount", "pivot_root", "remount", "make / slave")):
        where = "in this container" if facts.container else "on this host"
        remedy = DOCKER_REMEDY if facts.container else "allow mounts in new user namespaces (docs/sandbox.md)"
        return f"bubblewrap cannot mount the sandbox's filesystem {where} {said}: {remedy}"
    return f"bubblewrap refused here {said}"


def no_cgroup_reason() -> str:
    """Root with no cgroup it may create: RLIMIT_NPROC does not bind root, so a unit's processes are unbounded."""
    base = cgroup_root()
    return (f"no writable cgroup under {base} (memory and pids controllers), and as root the unit's process "
            "count cannot be limited otherwise (RLIMIT_NPROC does not bind root): run rfteval as a normal user "
            "(RLIMIT_NPROC binds then; in Docker `--user 1000`), or give root a writable, delegated cgroup "
            "(`systemd-run --scope -p Delegate=yes rfteval ...`)")


def sandbox_problem(policy: SandboxPolicy) -> str | None:
    """None when python graders may run under `policy`: the sandbox holds here, or the policy is unsafe. Else one
    line."""
    if policy.unsafe:
        return None
    refused = host().refused
    return None if refused is None else f"{refused}; {UNSAFE_HINT}"


_NOTED: set[str] = set()


def note_once(text: str) -> None:
    """One line on stderr, once per process (logging's last resort prints it when no handler is configured)."""
    if text not in _NOTED:
        _NOTED.add(text)
        import logging

        logging.getLogger("rfteval.sandbox").warning(text)


# ---------------------------------------------------------------- one supervisor

