"""The supervisor's first role: its replies to rfteval (results batched into frames, a heartbeat while a unit
runs) and the results it reads from a child's region, checked and bounded (a region is written by grader code and
believed in nothing), with the cgroup's OOM kills charged to the unit they happened in. The standard library
only.
"""

from __future__ import annotations

import json
import math
import mmap
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from rfteval.sandbox._capture import truncation_marker
from rfteval.sandbox._worker_protocol import (
    COUNT,
    ERROR_TYPES,
    LIMITS,
    LOADED,
    MESSAGE_CHARS,
    PYTHON_MEMORY,
    PYTHON_RUNTIME,
    PYTHON_SERVER,
    RECORD,
    RECORD_SLACK,
    Err,
    Record,
    send,
)

if TYPE_CHECKING:
    from rfteval.sandbox._worker_protocol import Row

FLUSH_S = 0.05  # results go to rfteval at least this often while a request runs
HEARTBEAT_S = 1.0  # and something at least this often, so rfteval can tell a stopped supervisor (as in pool.py)


class SupervisorResults:
    """Replies to rfteval and a child's records read back. Supervisor.__init__ (_supervisor.py) sets the state."""

    reply_fd: int  # frames to rfteval
    timeout_s: float
    cap: int  # a call's output, at most
    pending: list[Row]  # results not sent yet
    sent_at: float  # when the last frame went
    encode: Callable[[object], bytes]
    decode_record: Callable[[bytes], Record]
    oom_file: str | None
    oom_fd: int
    oom_seen: int  # the OOM kills already charged

    def emit(self, results: list[Row]) -> None:
        self.pending += results
        self.flush(False)

    def flush(self, done: bool, heartbeat: bool = False, force: bool = False) -> None:
        now = time.monotonic()
        due = (self.pending and now - self.sent_at > FLUSH_S) or (heartbeat and now - self.sent_at > HEARTBEAT_S)
        if done or force or due:
            try:
                body = self.encode([done, self.pending])
            except (TypeError, ValueError):
                body = json.dumps([done, self.pending]).encode()
            send(self.reply_fd, body)
            self.pending = []
            self.sent_at = now

    def oom_kills(self) -> int:
        """How many processes of this sandbox the kernel's OOM killer has ended (the cgroup's own count); 0 where
        there is no cgroup. Read after a unit's results, so a kill is charged to the unit it happened in."""
        if self.oom_fd < 0:
            return 0
        try:
            text = os.pread(self.oom_fd, 4096, 0)  # a cgroup file is regenerated from offset 0 on every read
        except OSError:
            return 0
        at = text.find(b"oom_kill ")
        if at < 0:
            return 0
        try:
            return int(text[at + 9:].split(b"\n", 1)[0])
        except ValueError:
            return 0

    def records(self, region: mmap.mmap, read: int, offset: int, count: int, used: int, max_length: int,
                who: str = "grader") -> tuple[list[Record], int, int, str | None]:
        """The region's records read..count-1, decoded, each at most `max_length` bytes: (records, read, offset,
        why the reading stopped short or None). A child's region is not believed: bounds and shape are checked."""
        out: list[Record] = []
        end = min(COUNT.size + used, len(region))
        while read < count:
            if offset + RECORD.size > end:
                return out, read, offset, f"the {who} process garbled its results"
            (length,) = RECORD.unpack_from(region, offset)
            if length > max_length or offset + RECORD.size + length > end:
                return out, read, offset, f"the {who} process sent an oversized result"
            try:
                out.append(self.read_record(region[offset + RECORD.size:offset + RECORD.size + length]))
            except BaseException:  # noqa: BLE001  (msgspec's DecodeError, ValidationError, RecursionError, ...)
                return out, read, offset, f"the {who} process garbled its results"
            read += 1
            offset += RECORD.size + length
        return out, read, offset, None

    def charge_oom(self, results: list[Row]) -> list[Row]:
        """Results just read from a child, as memory errors when the cgroup's OOM killer ended a process since
        the last results were read: the unit's processes together went past the limit (each one alone may be
        under its own), and one of these samples did it. Only this unit's samples can be charged: the count is
        read again before the next unit starts."""
        if self.oom_file is None:
            return results
        kills = self.oom_kills()
        if kills <= self.oom_seen:
            return results
        self.oom_seen = kills
        message = self.oom_message("grade()")
        return [row if row[1] == PYTHON_MEMORY else [0.0, PYTHON_MEMORY, message, row[3]]
                for row in results]

    @staticmethod
    def oom_message(what: str) -> str:
        return (f"{what} ran out of memory: the unit's processes together went past its limit of "
                f"{LIMITS['memory']} and the kernel's OOM killer ended one")

    def stuck_message(self, expected: int, what: str | None = None) -> str:
        what = what or ("loading the grader source" if expected == LOADED else "grade()")
        return (f"{what} ran over the {self.timeout_s:g} s time limit and did not stop (alarm blocked or stuck "
                f"outside Python); its process was killed")

    def take(self, region: mmap.mmap, read: int, offset: int, count: int, used: int, expected: int,
             start: int, n: int) -> tuple[list[Row], int, int, int, Err | None]:
        """The new records of the region, checked: in order, well formed, within bounds. A bad one stops the
        child; it is charged to the sample it claims to be."""
        results: list[Row] = []
        cap = self.cap + 200
        records, read, offset, garbled = self.records(region, read, offset, count, used, self.cap * 4 + RECORD_SLACK)
        for index, score, etype, message, stdout in records:
            if index != expected or index >= n:
                return results, read, offset, expected, (PYTHON_SERVER, "the grader process sent results out of order")
            if index == LOADED:
                if etype is not None:
                    return results, read, offset, expected, (
                        etype if etype in ERROR_TYPES else PYTHON_RUNTIME, (message or "")[:MESSAGE_CHARS])
                expected = start
                continue
            if not math.isfinite(score):
                etype, message, score = PYTHON_RUNTIME, "grade() returned a score that is not a finite number", 0.0
            if etype is not None:
                etype = etype if etype in ERROR_TYPES else PYTHON_RUNTIME
                message = (message or "")[:MESSAGE_CHARS]
                score = 0.0
            else:
                message = None
            if stdout is not None and len(stdout) > cap:
                stdout = stdout[:self.cap] + truncation_marker(self.cap)
            results.append([score, etype, message, stdout])
            expected = index + 1
        return results, read, offset, expected, (PYTHON_SERVER, garbled) if garbled else None

    def read_record(self, body: bytes) -> Record:
        try:
            return self.decode_record(body)
        except ValueError:  # what msgspec refuses and json takes (a lone surrogate, escaped): the same shape
            row = json.loads(body)
            if not (type(row) is list and len(row) == 5 and type(row[0]) is int and type(row[1]) in (int, float)
                    and all(v is None or type(v) is str for v in row[2:])):
                raise ValueError("not a result") from None
            return row[0], float(row[1]), row[2], row[3], row[4]

    def beat(self) -> None:
        """A heartbeat if one is due: clean-up can take a while (a unit may leave 100,000 files in /tmp), and
        rfteval kills a sandbox that is silent for a few beats. (No thread beats for us: with the threading
        module in the template, every child would run its after-fork hook: more faults a unit, bench/README.md.)"""
        if time.monotonic() - self.sent_at > HEARTBEAT_S:
            self.flush(False, heartbeat=True)
