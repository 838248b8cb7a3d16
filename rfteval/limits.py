"""The python grader's limits: each default held here once, and read by every flag, request, option and the sandbox.

A module of constants with no imports, at the bottom of the layers: the CLI builds its option defaults and help
texts from it when it starts, which importing rfteval.graders (every grader type) would slow down.
"""

from __future__ import annotations

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
