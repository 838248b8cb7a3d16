"""A template process: forked from the supervisor for one source, it runs the source's module-level code once,
reports how that went, and then forks a fresh child for every unit on the supervisor's word (each child gets
its samples on a socket only it holds). The supervisor's side of it is _supervisor_templates.py. The standard
library only.
"""

from __future__ import annotations

import gc
import marshal
import mmap
import os
import resource
import signal
import sys
from typing import TYPE_CHECKING

from rfteval.sandbox._child import ITIMER_REAL, SIGALRM, Child
from rfteval.sandbox._worker_protocol import (
    LOADED,
    PR_SET_DUMPABLE,
    REGION_FD,
    TEMPLATE_FD,
    UNIT_FD,
    WORD,
    encode_record,
    prctl,
    recv,
    send,
)

if TYPE_CHECKING:
    import types

    from rfteval.sandbox._worker_protocol import Loaded


def template_main(loader: Child, limits: list[tuple[int, tuple[int, int]]], code: types.CodeType, key: str,
                  null_fd: int, out_fd: int, sock_fd: int) -> None:
    """In a template, forked from the supervisor for one source: the unit's limits, fds 0-3 only, then the
    grader's module-level code, run once, under the unit's time limit. It reports how the load went (a record
    as a child commits it), then forks one child per unit on the supervisor's word and reports that child's pid
    and wait status. Never returns.

    It is dumpable while the supervisor inspects it after the load (its threads, fds and mappings, read from
    /proc), and not dumpable again, on the supervisor's word, before any unit exists, so no unit can read or
    write its memory. It never receives a model output: those go to each child on a socket only that child
    holds (unit_main)."""
    try:
        os.setsid()
        os.dup2(null_fd, 0)
        os.dup2(out_fd, 1)
        os.dup2(out_fd, 2)
        os.dup2(sock_fd, TEMPLATE_FD)
        os.closerange(TEMPLATE_FD + 1, 1 << 20)
        for which, value in limits:
            resource.setrlimit(which, value)
        prctl(PR_SET_DUMPABLE, 1)
        sys.stdout = sys.stderr = loader.capture
        signal.signal(SIGALRM, loader.on_alarm)
        signal.setitimer(ITIMER_REAL, loader.timeout_s)
        fn = loader.load(code, key)
        signal.setitimer(ITIMER_REAL, 0)
        loader.take_output()  # what the import printed: a unit's output starts empty, as when it loads itself
        failed = fn if isinstance(fn, tuple) else None
        etype, message = failed if failed is not None else (None, None)
        send(TEMPLATE_FD, encode_record([LOADED, 0.0, etype, message, None]))
        if not isinstance(fn, tuple):
            gc.collect()
            gc.freeze()  # the units' collections then never touch (and copy) what the load made
            serve_units(fn, loader.timeout_s, loader.cap, loader.tools)
    except BaseException:  # noqa: BLE001, S110  (a failure shows as the template's end; the supervisor copes)
        pass
    os._exit(0)


def serve_units(fn: Loaded, timeout_s: float, cap: int, tools: bool) -> None:
    """A template's loop: on "D" become not dumpable; on "F" with (a socket, a result region, an output file)
    fork a unit's child, keep none of the three, report the child's pid, wait for it, report its status."""
    import socket

    sock = socket.socket(fileno=TEMPLATE_FD)
    while True:
        message, fds, _, _ = socket.recv_fds(sock, 16, 3)
        if not message:
            return
        if message == b"D":
            prctl(PR_SET_DUMPABLE, 0)
            sock.sendall(b"d")
            continue
        if message != b"F" or len(fds) != 3:
            return
        pid = os.fork()
        if pid == 0:
            unit_main(fn, timeout_s, cap, fds, tools)
        for fd in fds:
            os.close(fd)
        sock.sendall(WORD.pack(pid))
        sock.sendall(WORD.pack(os.waitpid(pid, 0)[1]))


def unit_main(fn: Loaded, timeout_s: float, cap: int, fds: list[int], tools: bool) -> None:
    """In a child forked from a template: its own session, fds 0-2 and its two channels only (the template's
    socket is closed), then the unit's samples, read from a socket only this process holds. Never returns."""
    try:
        unit_fd, region_fd, out_fd = fds
        os.setsid()
        os.dup2(out_fd, 1)
        os.dup2(out_fd, 2)
        os.dup2(unit_fd, UNIT_FD)  # replaces the template's socket
        os.dup2(region_fd, REGION_FD)
        os.closerange(REGION_FD + 1, 1 << 20)
        region = mmap.mmap(REGION_FD, 0)
        os.close(REGION_FD)
        data = recv(UNIT_FD)
        os.close(UNIT_FD)
        if data is None:
            os._exit(0)
        child = Child(region, timeout_s, cap, tools)
        sys.stdout = sys.stderr = child.capture
        signal.signal(SIGALRM, child.on_alarm)
        signal.setitimer(ITIMER_REAL, timeout_s)
        child.work(fn, marshal.loads(data), loaded=False)
    except BaseException:  # noqa: BLE001, S110  (a failure here shows as a missing result; the supervisor reports it)
        pass
    os._exit(0)

