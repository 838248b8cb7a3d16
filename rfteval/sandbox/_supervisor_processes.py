"""The supervisor's second role: the processes and files of a unit. A unit's child waited for, killed and
reaped; after each unit everything it started killed (in the sandbox's PID namespace: every process but the
supervisor, bubblewrap's init and the templates) and what it wrote in /tmp and /dev/shm wiped; a fresh output
file for each child. The standard library only.
"""

from __future__ import annotations

import os
import select
import signal
import stat
import time
from collections.abc import Callable

from rfteval.sandbox._supervisor_results import SupervisorResults


def describe_exit(status: int | None) -> str:
    if status is None:
        return "stopped answering"
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = f"signal {number}"
        hint = " (the system may be out of memory)" if number == signal.SIGKILL else ""
        return f"was killed by {name}{hint}"
    return f"exited with code {os.WEXITSTATUS(status)}" if os.WIFEXITED(status) else "ended"


class Template:
    """In the supervisor: a template process that has loaded one source (pid -1 once reaped) and its socket. Here
    rather than in _supervisor_templates.py: the clean-up after a unit spares the templates and reaps an ended one."""

    def __init__(self, key: str, pid: int, fd: int):
        self.key = key
        self.pid = pid
        self.fd = fd
        self.unread = 0  # wait statuses of exited children not read yet (read when a failure needs one)


class SupervisorProcesses(SupervisorResults):
    """Processes and files of a unit; Supervisor.__init__ (_supervisor.py) sets the state."""

    pid_namespace: bool  # in the sandbox's own PID namespace (not the unsafe mode)
    workdir: str  # /tmp in the sandbox
    outdir: str  # where output files are made
    templates: dict[str, Template]  # by source key: the templates alive
    no_template: dict[str, str]  # by source key: why its units load it themselves

    def other_processes(self, keep: set[int]) -> list[int]:
        """Live processes of this PID namespace but bubblewrap's init, this one and `keep` (zombies are left to
        their parents, which reap them)."""
        found = []
        me = os.getpid()
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            pid = int(name)
            if pid == 1 or pid == me or pid in keep:
                continue
            try:
                with open(f"/proc/{pid}/stat", "rb") as fh:
                    state = fh.read().rsplit(b")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if state not in (b"Z", b"X"):
                found.append(pid)
        return found

    def kill_all_but(self, keep: set[int]) -> None:
        """With templates alive, kill(-1) would end them too: find every other process in /proc and kill it,
        until none is left (a unit forking as fast as it can is bounded by the cgroup's pids.max); reap ours."""
        while True:
            self.reap_orphans()
            victims = self.other_processes(keep)
            if not victims:
                return
            for pid in victims:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            self.beat()

    def reap_orphans(self) -> None:
        """Reap what has ended among this process's children (orphans of units come here: a subreaper); a
        template among them has ended, and its units load the source themselves from now on."""
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            for key, template in list(self.templates.items()):
                if template.pid == pid:  # reaped: only its socket is left to close
                    template.pid = -1
                    os.close(template.fd)
                    template.fd = -1
                    self.no_template[key] = "its template ended"
                    del self.templates[key]

    def output_file(self) -> int:
        """A fresh unnamed file for the child's fds 1 and 2 (in a tmpfs of the sandbox, so its size is bounded)."""
        try:
            return os.open(self.outdir, os.O_TMPFILE | os.O_RDWR, 0o600)
        except (OSError, AttributeError):
            path = os.path.join(self.outdir, f".rfteval-output-{os.getpid()}")
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
            os.unlink(path)
            return fd

    @staticmethod
    def wait_exit(pid: int, pidfd: int, wait: float) -> int | None:
        """The child's wait status once it has exited (reaped), else None after up to `wait` seconds."""
        if pidfd >= 0:
            ready = select.select([pidfd], [], [], wait)[0]
            if not ready:
                return None
        else:  # pragma: no cover - kernels before 5.3
            end = time.monotonic() + wait
            while True:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    return status
                if time.monotonic() >= end:
                    return None
                time.sleep(0.005)
        done, status = os.waitpid(pid, 0)
        return status

    def kill(self, pid: int) -> None:
        try:
            os.killpg(pid, signal.SIGKILL)  # the child's own session
        except (ProcessLookupError, PermissionError):
            pass
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    @staticmethod
    def reap(pid: int) -> int | None:
        try:
            return os.waitpid(pid, 0)[1]
        except ChildProcessError:
            return None

    def clean_up(self) -> None:
        """After a unit: nothing it started lives on, nothing it wrote stays. In the sandbox's PID namespace every
        process but this one and bubblewrap's init is the unit's (it may have left its session): kill(-1) ends
        them all; orphans come to this supervisor (a subreaper) to be reaped. Outside a PID namespace (the
        unsafe mode) kill(-1) would reach the user's own processes, so only the child's session is killed there.
        With templates alive, every process but them is found in /proc and killed instead (kill_all_but)."""
        if self.pid_namespace and self.templates:
            self.kill_all_but({template.pid for template in self.templates.values()})
        while not (self.pid_namespace and self.templates):
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break  # no process of the unit is left
            if not self.pid_namespace:
                if pid == 0:
                    break  # a process that left the child's session: beyond reach without a PID namespace
                continue
            if pid == 0:
                try:
                    os.kill(-1, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                try:
                    os.waitpid(-1, 0)
                except ChildProcessError:
                    break
            self.beat()
        for directory in (self.workdir, "/dev/shm") if self.pid_namespace else (self.workdir,):
            try:
                clear_directory(directory, os.stat(directory).st_dev, self.beat)
            except OSError:
                continue


def clear_directory(path: str, device: int, beat: Callable[[], None] = lambda: None) -> None:
    """Remove what a unit left in `path`, staying on its filesystem: a read-only bind inside it (the interpreter
    or a checkout that lives under /tmp, as a CI clone may) is another device and is neither walked nor touched."""
    for entry in os.scandir(path):
        beat()
        try:
            info = entry.stat(follow_symlinks=False)
            if stat.S_ISDIR(info.st_mode):
                if info.st_dev != device:
                    continue
                clear_directory(entry.path, device, beat)
                os.rmdir(entry.path)  # refused while it still holds a bind: the directories above it stay
            else:
                os.unlink(entry.path)
        except OSError:
            pass
