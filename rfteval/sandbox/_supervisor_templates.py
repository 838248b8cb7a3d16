"""The supervisor's third role: templates. A source's module-level code run once in a template process
(_template.py), kept only when that left nothing a forked unit would share (template_hazard), each unit's
child then forked from it; a template that fails or stops answering ends, and its source's units load it
themselves. The standard library only.
"""

from __future__ import annotations

import marshal
import mmap
import os
import select
import time
import types
from typing import TYPE_CHECKING

from rfteval.sandbox._child import Child
from rfteval.sandbox._supervisor_processes import SupervisorProcesses, Template, describe_exit
from rfteval.sandbox._supervisor_results import HEARTBEAT_S
from rfteval.sandbox._template import template_main
from rfteval.sandbox._worker_protocol import (
    ERROR_TYPES,
    HEADER,
    LOADED,
    MESSAGE_CHARS,
    PYTHON_MEMORY,
    PYTHON_RUNTIME,
    PYTHON_TIMEOUT,
    RECORD_SLACK,
    TEMPLATE_FD,
    WORD,
    Err,
    loading,
    send,
)

if TYPE_CHECKING:
    from rfteval.sandbox._tool_unit import Unit
    from rfteval.sandbox._worker_protocol import GradeUnit

MAX_TEMPLATES = 4  # sources loaded once per sandbox at a time; the oldest template ends when a fifth is loaded


class SupervisorTemplates(SupervisorProcesses):
    """Templates, one per source at most; Supervisor.__init__ (_supervisor.py) sets the state."""

    grace_s: float
    broken: dict[str, Err]  # by source key: why the source failed to load (every unit of it fails so)
    limits: dict[str, list[tuple[int, tuple[int, int]]]]  # by source key: a unit's per-process limits
    tool_keys: set[str]  # the sources that are tools modules
    null_fd: int  # a child's stdin
    baseline: dict[str, set[str]]  # what /tmp and /dev/shm held before any unit

    def start_template(self, key: str, code: types.CodeType) -> None:
        """Fork a template for this source and have it run the source's module-level code once; keep it when the
        load succeeded and left nothing a forked unit would share with the next (see template_hazard), else end
        it: a failed load fails the source as a unit's failed load does, a hazard makes this source's units load
        it themselves (the per-unit path), and the reason is kept in no_template."""
        import socket

        while len(self.templates) >= MAX_TEMPLATES:
            self.drop_template(next(iter(self.templates)))
        mine, theirs = (end.detach() for end in socket.socketpair())
        out_fd = self.output_file()
        loader = Child(None, self.timeout_s, self.cap, key in self.tool_keys)
        try:
            pid = os.fork()
        except OSError:  # out of processes or memory: units load the source themselves, as before
            pid = -1
        if pid == 0:
            template_main(loader, self.limits[key], code, key, self.null_fd, out_fd, theirs)
        os.close(theirs)
        os.close(out_fd)
        if pid < 0:
            os.close(mine)
            self.no_template[key] = "no template could be forked"
            return
        template = Template(key, pid, mine)
        failure, refused = self.template_loaded(template)
        if failure is None and refused is None:
            refused = self.template_hazard(template)
            if refused is None:
                self.templates[key] = template
                return
        if failure is not None:
            self.broken[key] = failure
        if refused is not None:
            self.no_template[key] = refused
        self.end_template(template)

    def template_loaded(self, template: Template) -> tuple[Err | None, str | None]:
        """How the template's load went: (the source's failure, as a unit's load would report it) or (None, why
        no template is kept) or (None, None) when it loaded."""
        limit = self.timeout_s + self.grace_s
        what = loading(template.key in self.tool_keys)
        head, ended = self.template_reply(template, HEADER.size, limit)
        body = None
        if head is not None:
            (length,) = HEADER.unpack(head)
            if length > self.cap * 4 + RECORD_SLACK:
                return None, "it garbled its report"
            body, ended = self.template_reply(template, length, limit)
        kills = self.oom_kills() if self.oom_file is not None else 0
        oomed, self.oom_seen = kills > self.oom_seen, max(self.oom_seen, kills)
        if body is None:
            if oomed:
                return (PYTHON_MEMORY, self.oom_message(what)), None
            if not ended:
                return (PYTHON_TIMEOUT, self.stuck_message(LOADED, what)), None
            self.kill(template.pid)
            status = self.reap(template.pid)
            template.pid = -1  # reaped
            return (PYTHON_RUNTIME, f"the {'tool' if template.key in self.tool_keys else 'grader'} process "
                                    f"{describe_exit(status)} while {what}"), None
        try:
            index, _, etype, message, _ = self.read_record(body)
        except BaseException:  # noqa: BLE001  (msgspec's errors, RecursionError, ...)
            return None, "it garbled its report"
        if index != LOADED:
            return None, "it garbled its report"
        if oomed:
            return (PYTHON_MEMORY, self.oom_message(what)), None
        if etype is not None:
            return (etype if etype in ERROR_TYPES else PYTHON_RUNTIME, (message or "")[:MESSAGE_CHARS]), None
        return None, None

    def template_hazard(self, template: Template) -> str | None:
        """Why a loaded template must not be kept, or None. Every unit would inherit what the load left behind, so
        the template must hold nothing another unit could reach or that could carry one unit's data to the next:
        no thread (a fork copies its state, maybe half-locked, and it would run on between units), no other
        process (a child started at import would outlive units and be shared by them), no fd beyond 0-3 (a socket,
        a pipe, a file: shared offsets and contents), no shared writable mapping, no file left in /tmp or
        /dev/shm (wiped after every unit, so a later unit would not find it). Read from /proc by this process,
        not believed from the template; then the template turns not dumpable (checked), so no unit can reach
        its memory."""
        pid = template.pid
        try:
            with open(f"/proc/{pid}/status") as fh:
                threads = next((line.split()[1] for line in fh if line.startswith("Threads:")), "?")
            fds = set(os.listdir(f"/proc/{pid}/fd"))
            with open(f"/proc/{pid}/maps") as fh:
                shared = any(len(f := line.split(maxsplit=2)) > 1 and f[1][1] == "w" and f[1][3] == "s" for line in fh)
        except (OSError, IndexError):
            return "its state could not be read"
        if threads != "1":
            return "its module-level code started a thread"
        if self.other_processes({pid} | {other.pid for other in self.templates.values()}):
            return "its module-level code started a process"
        if fds != {"0", "1", "2", str(TEMPLATE_FD)}:
            return "its module-level code left a file, pipe or socket open"
        if shared:
            return "its module-level code mapped shared memory"
        for directory in (self.workdir, "/dev/shm"):
            try:
                if set(os.listdir(directory)) - self.baseline.get(directory, set()):
                    return f"its module-level code left files in {directory}"
            except OSError:
                continue
        import socket

        try:
            with socket.socket(fileno=os.dup(template.fd)) as sock:
                sock.settimeout(5.0)
                sock.sendall(b"D")
                answered = sock.recv(1) == b"d"
                sock.settimeout(None)  # the socket's blocking mode is the template fd's too
        except OSError:
            answered = False
        try:  # its environ is open to a reader that may inspect its memory (the fd directory is not: root owns it)
            os.close(os.open(f"/proc/{pid}/environ", os.O_RDONLY))
        except PermissionError:
            return None if answered else "it did not answer"
        except OSError:
            return "it ended"
        return "it stayed dumpable"

    def fork_from(self, template: Template, size: int, out_fd: int,
                  unit: GradeUnit | Unit) -> tuple[int, int, mmap.mmap] | None:
        """A unit's child forked from the template: (pid, pidfd, result region), or None when the template fails.
        The child gets a fresh socket, result region and output file; the unit's samples go on that socket after
        the template has closed its copy, so they reach the child alone."""
        import socket

        while template.unread:  # statuses of earlier children, reported by now
            self.unit_status(template)
            if template.fd < 0:
                return None
        region_fd = self.output_file()  # an unnamed file in the sandbox's /dev/shm: mapped here and in the child
        mine, theirs = (end.detach() for end in socket.socketpair())
        region: mmap.mmap | None = None
        pidfd = -1
        try:
            os.ftruncate(region_fd, size)
            region = mmap.mmap(region_fd, size)
            with socket.socket(fileno=os.dup(template.fd)) as sock:
                socket.send_fds(sock, [b"F"], [theirs, region_fd, out_fd])
            os.close(theirs)
            theirs = -1
            reply, _ = self.template_reply(template, WORD.size, 5.0)
            if reply is None:
                raise OSError("no pid")
            (pid,) = WORD.unpack(reply)
            if pid <= 1 or pid in (os.getpid(), template.pid):
                raise OSError("a wrong pid")
            pidfd = os.pidfd_open(pid)
            send(mine, marshal.dumps(unit))
            return pid, pidfd, region
        except (OSError, ValueError):
            if region is not None:
                region.close()
            if pidfd >= 0:
                os.close(pidfd)
            return None
        finally:
            os.close(region_fd)
            os.close(mine)
            if theirs >= 0:
                os.close(theirs)

    def template_reply(self, template: Template, n: int, wait_s: float) -> tuple[bytes | None, bool]:
        """Exactly n bytes from the template within wait_s (beating meanwhile), or (None, whether it ended)."""
        buf = b""
        end = time.monotonic() + wait_s
        while len(buf) < n:
            left = end - time.monotonic()
            if left <= 0:
                return None, False
            if not select.select([template.fd], [], [], min(left, HEARTBEAT_S))[0]:
                self.beat()
                continue
            try:
                chunk = os.read(template.fd, n - len(buf))
            except OSError:
                chunk = b""
            if not chunk:
                return None, True
            buf += chunk
        return buf, False

    def wait_unit(self, template: Template, pidfd: int, wait: float) -> int | None:
        """A template's child's wait status once it has exited (the template reaps it), else None after `wait`."""
        if not select.select([pidfd], [], [], wait)[0]:
            return None
        template.unread += 1  # exited: its status waits in the socket, read when a failure needs it
        return 0

    def unit_status(self, template: Template) -> int:
        """The next wait status the template reports for a child; a template that does not report is ended."""
        template.unread = max(0, template.unread - 1)
        reply = self.template_reply(template, WORD.size, 5.0)[0] if template.fd >= 0 else None
        if reply is None:
            self.no_template[template.key] = "its template stopped answering"
            self.drop_template(template.key)
            return 0
        return WORD.unpack(reply)[0]

    def drop_template(self, key: str) -> None:
        template = self.templates.pop(key, None)
        if template is not None:
            self.end_template(template)

    def end_template(self, template: Template) -> None:
        """End a template and everything else but the other templates; wipe /tmp and /dev/shm."""
        if template.pid > 0:
            self.kill(template.pid)
            self.reap(template.pid)
            template.pid = -1
        if template.fd >= 0:
            os.close(template.fd)
            template.fd = -1
        self.clean_up()
