"""Config shapes shared by the model graders (score_model, label_model): input messages, sampling params."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, field_validator

from rfteval.graders.template import check_template


class InputMessage(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    role: Literal["user", "assistant", "system", "developer"]
    content: str | dict[str, Any] | list[Any]
    type: Literal["message"] | None = None

    @field_validator("content")
    @classmethod
    def _templates_parse(cls, value: Any) -> Any:
        def walk(v: Any) -> None:
            if isinstance(v, str):
                check_template(v)
            elif isinstance(v, list):
                for x in v:
                    walk(x)
            elif isinstance(v, dict):
                for x in v.values():
                    walk(x)

        walk(value)
        return value


class SamplingParams(BaseModel):
    """The grader's sampling params; both spellings of the token limit exist in OpenAI's material."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    max_completions_tokens: int | None = None
    max_completion_tokens: int | None = None
    reasoning_effort: str | None = None
    seed: int | None = None
    temperature: float | None = None
    top_p: float | None = None

    @property
    def max_tokens(self) -> int | None:
        return self.max_completions_tokens or self.max_completion_tokens
