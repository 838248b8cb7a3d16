"""The defaults the command line shares with the library: each held here once, and read by every flag (its default
and its help text), request, option, spec table and dataclass that has it.

A module of constants (and one table of them) importing only the standard library, at the bottom of the layers: the
CLI builds its option defaults and help texts from it when it starts, which importing rfteval.graders (every grader
type), rfteval.run (pydantic's spec tables) or rfteval.readiness would slow down.
"""

from __future__ import annotations

from dataclasses import dataclass

PYTHON_TIMEOUT_S = 120.0  # seconds per python grader call (--grader-timeout)
PYTHON_MEMORY_MB = 2048  # MB of memory per python grader worker (--grader-memory)
PYTHON_MIN_MEMORY_MB = 16  # the least --grader-memory taken: an interpreter needs that much to start
PYTHON_BATCH_SIZE = 256  # samples handed to a python worker per call

# An agent's rollout (rfteval run --tools): what Agent RFT called max_episode_steps, and a tool call's limits
MAX_TURNS = 10  # model calls per rollout (--max-turns)
TOOL_TIMEOUT_S = 30.0  # seconds per turn's tool calls, run together in one sandbox unit (--tool-timeout)
TOOL_MEMORY_MB = 1024  # MB of memory per tool unit (--tool-memory)
ENDPOINT_TIMEOUT_S = 600.0  # seconds per Agent RFT endpoint call, its own wait (--tool-endpoint-timeout)
TOOL_OUTPUT_CHARS = 20_000  # characters of one tool result shown to the model; the rest is cut, marked (--tool-output-limit)

# A run's defaults (rfteval.run.spec_tables.RunSpec, and the judge's requests: rfteval.providers.endpoint)
EPOCHS = 3  # generations per item and model (--epochs)
CONCURRENCY = 32  # requests in flight (--concurrency)
MAX_RETRIES = 10  # retries of one request on 429/5xx/timeouts (--max-retries)
REQUEST_TIMEOUT_S = 600.0  # seconds per request (--timeout)
# the share of cells (run), records (grade) or either side's error records (compare's and agree's gates) in error
# above which the command exits 3 or the gate fails (--max-error-rate)
MAX_ERROR_RATE = 0.05

# The readiness verdict (rfteval readiness, rfteval run's verdict)
GROUP_SIZE = 8  # the training group size G (samples per prompt) the zero-signal share is worked out for
JUDGE_SD_THRESHOLD = 0.1  # sd of a repeated score, on a 0..1 scale, above which a judge is flagged (--threshold)


@dataclass(frozen=True)
class ThresholdDefaults:
    """Where the readiness verdict turns by default: the fields and defaults of rfteval.readiness.Thresholds, which
    extends this table, and of the flags of `rfteval readiness`. Heuristics (statistics.md §3.4), not sourced
    numbers: tune them per team."""

    zero_signal_not_ready: float = 0.6  # expected zero-signal share at G above this: not ready
    zero_signal_risky: float = 0.4
    min_position: float = 0.05  # base mean below 5% of the grader's range: risky (little success to learn from)
    max_position: float = 0.95
    max_floor_share: float = 0.5  # items whose every sample scored the minimum
    max_ceiling_share: float = 0.5
    label_skew_risky: float = 0.7  # majority reference label share
    prediction_skew_risky: float = 0.8  # majority share of the model's answers
    max_flip_rate: float = 0.05  # re-graded outputs whose score changed: above this, not ready; any, risky
    max_grade_error_share: float = 0.2
    max_generate_error_share: float = 0.2
