"""Process exit codes, one enum (as httpie's `status.py`), so every command and test agrees."""

from enum import IntEnum


class ExitStatus(IntEnum):
    SUCCESS = 0
    GATE_FAILED = 1  # a CI gate (compare thresholds, probe-grader --strict) did not hold
    BAD_INPUT = 2  # bad input or usage: one line naming the file, line and field
    INCOMPLETE = 3  # the run finished, but more cells ended in error than allowed
    INTERRUPTED = 130  # Ctrl-C: stopped cleanly, resumable
