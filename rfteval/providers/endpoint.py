"""Where a judge is reached and how hard it is driven (`JudgeEndpoint`): the one value every command, the run's
spec, agree and the reward adapters carry, each default held once. `providers.judge.open_judge` opens a judge
client from it, only for a grader that calls one.

The key itself never appears here: only the NAME of the environment variable that holds it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, cast

from rfteval.limits import MAX_RETRIES, REQUEST_TIMEOUT_S

if TYPE_CHECKING:
    from rfteval.providers.openai_provider import OpenAIProvider

JudgeApi = Literal["chat", "responses"]
DEFAULT_KEY_ENV = "OPENAI_API_KEY"
DEFAULT_API: JudgeApi = "chat"
JUDGE_CONCURRENCY = 16  # judge requests in flight at once
JUDGE_TIMEOUT_S = REQUEST_TIMEOUT_S  # seconds per judge request, as per model request
JUDGE_MAX_RETRIES = MAX_RETRIES  # retries of one judge request, as of a model request
# The fields as keywords spell them (the --judge-* flags, the reward adapters' options) → the field; the run's
# [judge] table spells them as the fields.
JUDGE_KEYWORDS = {"judge_base_url": "base_url", "judge_api_key_env": "api_key_env", "judge_api": "api",
                  "judge_model": "model", "judge_concurrency": "concurrency"}


@dataclass(frozen=True)
class JudgeEndpoint:
    """A judge endpoint for model graders (score_model, label_model, group_judge), OpenAI-compatible."""

    base_url: str | None = None  # None: OpenAI's
    api_key_env: str = DEFAULT_KEY_ENV  # the variable holding the key, never the key
    api: str = DEFAULT_API  # chat | responses (OpenAIProvider refuses anything else, one line)
    model: str | None = None  # replaces every judge model the grader names (--judge-model)
    concurrency: int = JUDGE_CONCURRENCY
    timeout_s: float = JUDGE_TIMEOUT_S
    max_retries: int = JUDGE_MAX_RETRIES
    developer_as: str | None = None  # "system": developer messages go as system (servers without the role)

    def provider(self, transport: str | None = None) -> OpenAIProvider:
        """The client of this endpoint (providers.judge.open_judge wraps it in a judge; the preflight asks it)."""
        from rfteval.providers.openai_provider import OpenAIProvider

        return OpenAIProvider(self.base_url, self.api_key_env, cast("JudgeApi", self.api), transport=transport,
                              developer_as=self.developer_as)
