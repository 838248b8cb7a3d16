"""The supervisor: trusted, it never runs grader code. It serves rfteval's requests one unit at a time: a source
compiled and made ready once (_preload.py), each unit's child forked (from the source's template where there is
one) and watched with the supervisor's own clock, its results read back and forwarded, everything it started
ended. Its roles are the classes it builds on: replies and results (_supervisor_results.py), processes and files
(_supervisor_processes.py), templates (_supervisor_templates.py). The standard library only at import.
"""

from __future__ import annotations

import gc
import mmap
import os
import time
import types
from typing import TYPE_CHECKING, cast

from rfteval.sandbox._capture import read_output
from rfteval.sandbox._child import Child, child_main
from rfteval.sandbox._preload import child_limits, imported_modules, preimport, vm_size, warm_up
from rfteval.sandbox._supervisor_processes import Template, describe_exit
from rfteval.sandbox._supervisor_results import HEARTBEAT_S
from rfteval.sandbox._supervisor_templates import SupervisorTemplates
from rfteval.sandbox._worker_protocol import (
    COUNT,
    ERROR_TYPES,
    LOADED,
    MESSAGE_CHARS,
    PYTHON_MEMORY,
    PYTHON_RUNTIME,
    PYTHON_SERVER,
    PYTHON_TIMEOUT,
    RECORD,
    RECORD_SLACK,
    Err,
    loading,
)

if TYPE_CHECKING:
    from rfteval.sandbox._tool_unit import Unit
    from rfteval.sandbox._worker_protocol import GradeUnit, Row, Sent, WorkerConfig


class Supervisor(SupervisorTemplates):
    """Trusted: never runs grader code, never maps a child's memory but its result region. One unit at a time."""

    def __init__(self, config: WorkerConfig, reply_fd: int):
        import msgspec

        self.config = config
        self.reply_fd = reply_fd
        self.timeout_s = float(config["timeout_s"])
        self.grace_s = float(config["grace_s"])
        self.cap = int(config["stdout_cap"])
        self.workdir = config["workdir"]
        self.outdir = config.get("outdir") or self.workdir  # apart from /tmp: a full disk still shows the output
        self.pid_namespace = bool(config.get("pid_namespace"))
        self.codes: dict[str, types.CodeType | Err] = {}
        self.broken = {}
        self.limits = {}
        # a source loaded once in a template process, units forked from it (in the PID namespace alone, where
        # everything but the templates can be found and killed after a unit); sources that may not have one
        self.templates = {}
        self.no_template = {}
        self.tool_keys = set()  # sources that are tools modules
        self.use_templates = self.pid_namespace and hasattr(os, "pidfd_open")
        # what /tmp and /dev/shm hold before any unit: the directories bubblewrap made for read-only binds under
        # /tmp (an interpreter or a checkout there), which no wipe removes and no template put there
        self.baseline = {}
        for directory in (self.workdir, "/dev/shm") if self.pid_namespace else ():
            try:
                self.baseline[directory] = set(os.listdir(directory))
            except OSError:
                continue
        self.null_fd = os.open(os.devnull, os.O_RDONLY)  # a child's stdin
        self.decode_record = msgspec.json.Decoder(tuple[int, float, str | None, str | None, str | None]).decode
        self.encode = msgspec.json.encode
        self.pending = []
        self.sent_at = time.monotonic()
        self.oom_file = config.get("oom_file")  # the cgroup's OOM-kill count, bound in read-only
        self.oom_fd = -1  # kept open: one pread per look (a child closes it with every fd above 2)
        if self.oom_file is not None:
            try:
                self.oom_fd = os.open(self.oom_file, os.O_RDONLY)
            except OSError:
                self.oom_file = None
        self.oom_seen = self.oom_kills()

    # -- a source

    def code_for(self, key: str, source: str | None, kind: str = "grade") -> types.CodeType | Err:
        """The source compiled, its imports done and its limits set, once per source. `kind` "tools": a tools
        module (_tool_unit.py), which the template loads as its functions, not as a grade()."""
        code = self.codes.get(key)
        if code is not None:
            return code
        if source is None:
            return PYTHON_SERVER, "internal: the pool did not send the grader source"
        filename = f"<grader {key[:8]}>"
        if kind == "tools":
            import rfteval.sandbox._tool_unit  # noqa: F401  (before any template forks: units find it loaded)

            self.tool_keys.add(key)
            filename = f"<tools {key[:8]}>"
        try:
            code = compile(source, filename, "exec", dont_inherit=True)  # no __future__ flags leak from here
        except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
            failed = self.codes[key] = (PYTHON_RUNTIME, f"the grader source does not compile: {exc}"[:MESSAGE_CHARS])
            return failed  # kept: the grade request after "prepare" comes without the source
        import linecache

        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)  # tracebacks show lines
        preimport(imported_modules(source))  # silent: rfteval allows a "prepare" request PREPARE_TIMEOUT_S
        warm_up()
        gc.collect()
        gc.freeze()  # a child's collections then never touch (and copy) the template's objects
        self.limits[key] = child_limits(self.config, vm_size())
        self.codes[key] = code
        return code

    # -- a request

    def grade(self, request: tuple[str, str, str | None, list[tuple[bytes, list[Sent]]]] | tuple[
            str, str, str | None, list[Unit]]) -> None:
        """A "grade" request (pool._Sandbox.request): the source's key, the source unless sent before, and
        the units, each (item as marshal, its samples as sent); or a "tools" request (sandbox/turns.py), whose
        units are tool turns (_tool_unit.py)."""
        kind, key, source, units = request
        code = self.code_for(key, source, kind)
        if (self.use_templates and not isinstance(code, tuple) and key not in self.broken
                and key not in self.templates and key not in self.no_template):
            self.start_template(key, code)
        if kind == "tools":
            for turn in cast("list[Unit]", units):
                self.emit(self.run_turn(code, key, turn))
            self.flush(True)
            return
        for item_blob, samples in cast("list[tuple[bytes, list[Sent]]]", units):
            start = 0
            while start < len(samples):
                if isinstance(code, tuple) or key in self.broken:  # did not compile, or its loading failed
                    failed = code if isinstance(code, tuple) else self.broken[key]
                    self.emit([[0.0, failed[0], failed[1], None] for _ in range(start, len(samples))])
                    break
                start = self.run_unit(code, key, item_blob, samples, start)
        self.flush(True)

    def run_unit(self, code: types.CodeType, key: str, item_blob: bytes, samples: list[Sent], start: int) -> int:
        """Fork a child for samples[start:], forward its results; returns where the next child must start
        (len(samples) when the unit is done). A child that dies, hangs or garbles costs the sample it was in."""
        if self.pending:  # what earlier units earned is safe in rfteval before this one's code runs
            self.flush(False, force=True)
        size = COUNT.size + (len(samples) - start + 1) * (self.cap + RECORD_SLACK + RECORD.size)
        out_fd = self.output_file()
        pid, pidfd, region, template = self.spawn(code, key, size, out_fd, (item_blob, samples, start))
        status: int | None = None
        read = 0  # records taken from the region
        offset = COUNT.size
        expected = LOADED if template is None else start  # the index the next record must have (a template's
        # child has the source loaded already: what it writes can never be blamed on the source)
        failure: Err | None = None
        limit = self.timeout_s + self.grace_s
        started = deadline_from = time.monotonic()
        cap_at = started + (len(samples) - start + 1) * limit  # the whole unit's budget, whatever it claims
        try:
            while True:
                now = time.monotonic()
                deadline = min(deadline_from + limit, cap_at)
                wait = max(0.0, min(deadline - now, HEARTBEAT_S))
                exited = self.wait_exit(pid, pidfd, wait) if template is None else self.wait_unit(template, pidfd, wait)
                if exited is not None:
                    status = exited
                count, used = COUNT.unpack_from(region, 0)
                if count > read:
                    results, read, offset, expected, failure = self.take(region, read, offset, count, used,
                                                                         expected, start, len(samples))
                    if results:
                        self.emit(self.charge_oom(results))
                    deadline_from = time.monotonic()
                    if failure is not None:
                        break
                if status is not None:
                    break
                if time.monotonic() >= deadline:
                    failure = (PYTHON_TIMEOUT, self.stuck_message(expected))
                    break
                self.flush(False, heartbeat=True)
        finally:
            status = self.end_unit(pid, pidfd, region, template, status)
        done = start if expected == LOADED else expected
        kills = self.oom_kills() if self.oom_file is not None else 0
        if done >= len(samples) and failure is None:
            self.oom_seen = kills  # an orphan's kill after the last result: never charged to the next unit
            os.close(out_fd)
            return done
        output = read_output(out_fd, self.cap)
        os.close(out_fd)
        if failure is None:
            if template is not None and template.unread:
                status = self.unit_status(template)
            where = "while loading the grader source" if expected == LOADED else "during grade()"
            failure = (PYTHON_RUNTIME, f"the grader process {describe_exit(status)} {where}")
        if kills > self.oom_seen:  # a process of the unit was OOM-killed: that, not what followed, is the cause
            failure = (PYTHON_MEMORY, self.oom_message("loading the grader source" if expected == LOADED
                                                       else "grade()"))
        self.oom_seen = kills
        if expected == LOADED:  # the source itself: no sample has run in this child yet
            self.broken[key] = failure
            return start
        self.emit([[0.0, failure[0], failure[1], output]])
        return done + 1

    def spawn(self, code: types.CodeType, key: str, size: int, out_fd: int,
              unit: GradeUnit | Unit) -> tuple[int, int, mmap.mmap, Template | None]:
        """A unit's child, with a fresh result region of `size` bytes and `out_fd` as its output: forked from the
        source's template (which then reports its exit), else from here, loading the source itself.
        (pid, pidfd, region, the template or None)."""
        template = self.templates.get(key)
        forked = self.fork_from(template, size, out_fd, unit) if template is not None else None
        if forked is not None:
            pid, pidfd, region = forked
            return pid, pidfd, region, template
        if template is not None:  # the template failed: this source's units load it themselves from now on
            self.no_template[key] = "its template stopped answering"
            self.drop_template(key)
        region = mmap.mmap(-1, size)  # shared with the child alone; fresh for every child
        child = Child(region, self.timeout_s, self.cap, key in self.tool_keys)
        pid = os.fork()
        if pid == 0:
            child_main(child, self.limits[key], code, key, unit, self.null_fd, out_fd)
        pidfd = os.pidfd_open(pid) if hasattr(os, "pidfd_open") else -1
        return pid, pidfd, region, None

    def end_unit(self, pid: int, pidfd: int, region: mmap.mmap, template: Template | None,
                 status: int | None) -> int | None:
        """After a unit: its child killed unless it has exited, and reaped; everything it started killed and its
        files wiped (clean_up). The child's wait status."""
        if status is None:
            self.kill(pid)
            status = self.reap(pid) if template is None else self.unit_status(template)
        self.clean_up()
        if pidfd >= 0:
            os.close(pidfd)
        region.close()
        return status

    def run_turn(self, code: types.CodeType | Err, key: str, turn: Unit) -> list[Row]:
        """One tool turn (_tool_unit.py) in a fresh child: rows for rfteval, one per call that ran (or was running
        when the unit failed), then the state row. A unit that overruns its time, runs out of memory or dies ends
        the turn there; a module that does not load fails it whole (and every later turn: `broken`)."""
        from rfteval.sandbox._tool_unit import TOOL_CRASH, TOOL_MEMORY, TOOL_TIMEOUT, TurnCheck, load_failed_rows

        failed = code if isinstance(code, tuple) else self.broken.get(key)
        if failed is not None:
            return load_failed_rows(failed)
        if self.pending:  # what earlier units earned is safe in rfteval before this one's code runs
            self.flush(False, force=True)
        check = TurnCheck(len(turn[2]), turn[3])
        out_fd = self.output_file()
        pid, pidfd, region, template = self.spawn(cast("types.CodeType", code), key,
                                                  COUNT.size + check.region_bytes(RECORD.size + RECORD_SLACK),
                                                  out_fd, turn)
        loaded = template is not None  # a template's child has the module loaded already
        status: int | None = None
        failure: Err | None = None
        read, offset = 0, COUNT.size
        deadline = time.monotonic() + self.timeout_s + self.grace_s
        try:
            while not check.done and failure is None and key not in self.broken:
                wait = max(0.0, min(deadline - time.monotonic(), HEARTBEAT_S))
                exited = self.wait_exit(pid, pidfd, wait) if template is None else self.wait_unit(template, pidfd, wait)
                if exited is not None:
                    status = exited
                count, used = COUNT.unpack_from(region, 0)
                if count > read:
                    records, read, offset, garbled = self.records(region, read, offset, count, used, len(region),
                                                                  "tool")
                    before = len(check.rows)
                    for index, _, etype, message, content in records:
                        if loaded and check.add(index, etype, message, content):
                            continue
                        if not loaded and index == LOADED and etype is None:
                            loaded = True
                            continue
                        if not loaded and index == LOADED:  # the module did not load: no call can run
                            self.broken[key] = (etype if etype in ERROR_TYPES else PYTHON_RUNTIME,
                                                (message or "")[:MESSAGE_CHARS])
                        else:
                            garbled = "the tool process garbled its results"
                        break
                    if garbled:
                        failure = TOOL_CRASH, garbled
                    if self.oom_file is not None and (kills := self.oom_kills()) > self.oom_seen:
                        self.oom_seen = kills  # the unit's processes went past the limit together: these calls did
                        del check.rows[before:]
                        check.done, check.state = False, None
                        failure = TOOL_MEMORY, self.oom_message("the call")
                if status is not None:
                    break
                if time.monotonic() >= deadline:
                    failure = TOOL_TIMEOUT, self.stuck_message(LOADED, "the turn's tool calls" if loaded
                                                               else loading(True))
                    break
                self.flush(False, heartbeat=True)
        finally:
            status = self.end_unit(pid, pidfd, region, template, status)
        kills = self.oom_kills() if self.oom_file is not None else 0
        oomed, self.oom_seen = kills > self.oom_seen, max(kills, self.oom_seen)
        os.close(out_fd)
        if key in self.broken:
            return load_failed_rows(self.broken[key])
        if not check.done and (failure is None or oomed):  # an OOM kill, not what followed it, is the cause
            if status is not None and template is not None and template.unread:
                status = self.unit_status(template)
            what = "the call" if loaded else loading(True)
            failure = (TOOL_MEMORY, self.oom_message(what)) if oomed else (
                TOOL_CRASH, f"the tool process {describe_exit(status)} during {what}")
        if not loaded:  # the child ended before it said whether the module loaded: the module is charged
            assert failure is not None
            kind = {TOOL_MEMORY: PYTHON_MEMORY, TOOL_TIMEOUT: PYTHON_TIMEOUT}.get(failure[0], PYTHON_RUNTIME)
            self.broken[key] = kind, failure[1]
            return load_failed_rows(self.broken[key])
        return check.finish(failure)
