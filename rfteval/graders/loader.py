"""Load a grader config in OpenAI's format from JSON, validated, errors naming file, line and field."""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError

from rfteval.errors import InputError, read_input_text
from rfteval.graders.base import REGISTRY, GraderConfig, pass_rule_note
from rfteval.typos import curly_quotes, did_you_mean, typo_first, unknown_key

if TYPE_CHECKING:
    from rfteval.data.json_types import JSONInput, JSONObject, JSONValue


def line_of(text: str | None, field: str) -> int | None:
    """The line where the field's last key appears in the JSON text, when that is unambiguous."""
    if not text or not field:
        return None
    key = re.split(r"[.\[\]]", field.rstrip("]"))[-1] or field
    hits = [m.start() for m in re.finditer(rf'"{re.escape(key)}"\s*:', text)]
    if len(hits) != 1:
        return None
    return text.count("\n", 0, hits[0]) + 1


def _format_loc(prefix: str, loc: tuple[int | str, ...]) -> str:
    out = prefix
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def parse_config(obj: JSONInput, source: str | Path | None = None, prefix: str = "", text: str | None = None) -> GraderConfig:
    """Validate one grader object (any registered type); raise InputError naming the bad field."""
    def fail(message: str, field: str) -> InputError:
        return InputError(message, source, line_of(text, field), field or None)

    if not isinstance(obj, dict):
        raise fail(f"a grader must be a JSON object, got {type(obj).__name__}", prefix)
    gtype = obj.get("type")
    if gtype not in REGISTRY:
        known = ", ".join(sorted(REGISTRY))
        hint = did_you_mean(gtype, REGISTRY) if isinstance(gtype, str) else ""
        raise fail(f"unknown grader type {gtype!r} ({hint + ' ' if hint else ''}known: {known})",
                   _format_loc(prefix, ("type",)))
    model = REGISTRY[gtype].config
    notes: list[str] = []
    try:
        context = {"source": source, "prefix": prefix, "text": text, "notes": notes}
        config = model.model_validate(obj, context=context)
        config._notes.extend(notes)  # the defaults filled in (base.load_notes)
        return config
    except ValidationError as exc:
        err = typo_first(model, exc.errors())
        loc = err["loc"]
        # Literal errors on a discriminator-like union add the tag to the location; drop non-field parts.
        loc = tuple(p for p in loc if not (isinstance(p, str) and p.startswith("function-")))
        message = unknown_key(model, loc) if err["type"] == "extra_forbidden" else err["msg"]
        raise fail(message, _format_loc(prefix, loc)) from None


JOB_REFUSES = ("label_model",)  # RFT's grader union has no label_model at the top (it is allowed inside multi)


def unwrap_grader(obj: JSONInput) -> tuple[JSONInput, str]:
    """The grader object inside the shapes people paste: bare, {"grader"}, or a fine-tuning job."""
    if isinstance(obj, dict):
        if "type" in obj:  # a bare grader (`name` may be missing: OpenAI's own examples leave it out)
            return obj, ""
        grader = obj.get("grader")
        if isinstance(grader, dict):
            return grader, "grader."
        method = obj.get("method")
        if isinstance(method, dict):
            rl = method.get("reinforcement")
            grader = rl.get("grader") if isinstance(rl, dict) else None
            if isinstance(grader, dict):
                return grader, "method.reinforcement.grader."
    return obj, ""


def read_json_file(path: str | Path) -> tuple[JSONValue, str]:
    text = read_input_text(path, "a JSON file")
    try:
        return json.loads(text), text
    except json.JSONDecodeError as exc:
        curly = curly_quotes(text)
        raise InputError(f"invalid JSON: {exc.msg} (column {exc.colno})" + (f"; {curly}" if curly else ""), path,
                         exc.lineno) from None


# `--grader FILE.py:FUNCTION`: a TRL-style reward function as a grader (graders/reward_function.py)
_REWARD_REF = re.compile(r"^(?P<file>.+\.py):(?P<function>[A-Za-z_][A-Za-z0-9_]*)$", re.DOTALL)


def reward_function_ref(path: str | Path) -> tuple[Path, str] | None:
    """(file, function) when `path` names a reward function as FILE.py:FUNCTION, else None."""
    match = _REWARD_REF.match(str(path))
    return (Path(match["file"]), match["function"]) if match else None


def load_reward_function(file: Path, function: str) -> GraderConfig:
    """The `reward_function` grader config for FUNCTION in FILE.py (the file's text travels in the config)."""
    text = read_input_text(file, "a Python file")
    obj = {"type": "reward_function", "name": function, "source": text, "function": function, "path": str(file)}
    return parse_config(obj, file, "")


def python_grader_file(path: str | Path) -> GraderConfig:
    """A python grader written as a plain .py file defining grade(sample, item): wrapped into OpenAI's JSON form
    (`validate grader FILE.py --emit-json` prints it for upload), named after the file, so nobody escapes Python
    into a JSON string by hand."""
    path = Path(path)
    text = read_input_text(path, "a Python file")
    return parse_config({"type": "python", "name": path.stem, "source": text}, path, "")


def load_grader(path: str | Path) -> GraderConfig:
    """A grader config from a file holding a grader, {"grader": ...} or a fine-tuning job; a python grader as a
    .py file defining grade(sample, item); or, given as FILE.py:FUNCTION, a TRL-style reward function."""
    return GraderFile(path).config


def _grader_config(path: str | Path, obj: JSONValue, text: str) -> GraderConfig:
    """The grader config of a JSON grader file's contents (load_grader's, for a file already read)."""
    grader, prefix = unwrap_grader(obj)
    method = obj.get("method") if isinstance(obj, dict) and "type" not in obj else None
    if not prefix and isinstance(method, dict):
        kind = method.get("type")
        raise InputError(f"a fine-tuning job whose method is {kind!r} has no grader (only a reinforcement job's "
                         "method.reinforcement.grader is one)", path, line_of(text, "method"),
                         "method.reinforcement.grader")
    if prefix == "method.reinforcement.grader." and isinstance(grader, dict) and grader.get("type") in JOB_REFUSES:
        field = f"{prefix}type"
        raise InputError(f"a fine-tuning job's grader cannot be {grader['type']} (RFT takes string_check, "
                         f"text_similarity, python, score_model and multi); put it inside a multi grader",
                         path, line_of(text, "type"), field)
    config = parse_config(grader, path, prefix.rstrip("."), text)
    if (rule := pass_rule_note(config)) is not None:
        config._notes.append(rule)
    if prefix == "method.reinforcement.grader.":
        note = _job_settings(obj).note()
        if note:
            config._notes.append(note)
    return config


# A job's hyperparameters that only steer training (openai-python: ReinforcementHyperparameters): nothing in an
# eval run corresponds to them. reasoning_effort is the one that is a sampling setting.
JOB_EFFORT_DEFAULT = "default"  # RFT's own value: the model's default effort, i.e. not set


@dataclass(frozen=True)
class JobSettings:
    """What a fine-tuning job's method.reinforcement.hyperparameters say that a run can use, and what it cannot."""

    reasoning_effort: str | None = None  # the models' sampling effort, unless the run sets its own
    ignored: list[str] = field(default_factory=list)  # set, but training settings only

    def note(self) -> str | None:
        """One line on the job's hyperparameters, or None when it sets none."""
        parts = []
        if self.reasoning_effort is not None:
            parts.append(f"reasoning_effort {self.reasoning_effort!r} is the models' sampling reasoning_effort in "
                         "`rfteval run` (a --reasoning-effort or [sampling] reasoning_effort wins)")
        if self.ignored:
            parts.append(f"{', '.join(self.ignored)} ignored (training settings; rfteval's --epochs is its own "
                         "samples per item)")
        return f"method.reinforcement.hyperparameters: {'; '.join(parts)}" if parts else None


def load_job_settings(path: str | Path) -> JobSettings:
    """The job's hyperparameters when the grader file is a fine-tuning job; empty settings for any other file."""
    return GraderFile(path).job


def _job_settings(obj: JSONValue) -> JobSettings:
    method = obj.get("method") if isinstance(obj, dict) else None
    rl = method.get("reinforcement") if isinstance(method, dict) else None
    hyper = rl.get("hyperparameters") if isinstance(rl, dict) else None
    if not isinstance(hyper, dict):
        return JobSettings()
    from rfteval.graders.judged import REASONING_EFFORTS

    effort = hyper.get("reasoning_effort")
    usable = isinstance(effort, str) and effort in REASONING_EFFORTS
    ignored = sorted(k for k, v in hyper.items() if v is not None and not (k == "reasoning_effort" and (
        usable or v == JOB_EFFORT_DEFAULT)))
    return JobSettings(effort if usable and isinstance(effort, str) else None, ignored)


def load_response_format(path: str | Path) -> JSONObject | None:
    """The job's method.reinforcement.response_format when the grader file is a fine-tuning job."""
    return GraderFile(path).response_format


def _response_format(obj: JSONValue) -> JSONObject | None:
    if isinstance(obj, dict):
        method = obj.get("method")
        rl = method.get("reinforcement") if isinstance(method, dict) else None
        response_format = rl.get("response_format") if isinstance(rl, dict) else None
        if isinstance(response_format, dict):
            return response_format
    return None


def has_response_format(path: str | Path) -> bool:
    """Whether samples graded with this grader file get an output_json, as OpenAI fills it (GraderFile's)."""
    return GraderFile(path).has_response_format


class GraderFile:
    """A grader file (or FILE.py:FUNCTION), read at most once: its grader config, and what a fine-tuning job in it
    says beside the grader (hyperparameters, response_format). A command makes one at its edge and hands it down,
    so that the lint, the sampling, the grading and the readiness verdict all see the one text read; each part is
    read when first asked for, so a file's errors come where they always came (a JSON error at the first look, a
    grader's own at its config)."""

    def __init__(self, path: str | Path) -> None:
        self.path = path
        self._json: tuple[JSONValue, str] | None = None

    @classmethod
    def of(cls, grader: str | Path | GraderFile) -> GraderFile:
        """A path's file, or the file already read."""
        return grader if isinstance(grader, GraderFile) else cls(grader)

    @property
    def is_json(self) -> bool:
        """A JSON file: not a python grader (FILE.py) nor a reward function (FILE.py:FUNCTION)."""
        return reward_function_ref(self.path) is None and not str(self.path).endswith(".py")

    def _read(self) -> tuple[JSONValue, str]:
        if self._json is None:
            self._json = read_json_file(self.path)
        return self._json

    @functools.cached_property
    def config(self) -> GraderConfig:
        ref = reward_function_ref(self.path)
        if ref is not None:
            return load_reward_function(*ref)
        if str(self.path).endswith(".py"):
            return python_grader_file(self.path)
        return _grader_config(self.path, *self._read())

    @functools.cached_property
    def job(self) -> JobSettings:
        """The job's hyperparameters when the file is a fine-tuning job; empty settings for any other file."""
        return _job_settings(self._read()[0]) if self.is_json else JobSettings()

    @functools.cached_property
    def response_format(self) -> JSONObject | None:
        """The job's method.reinforcement.response_format when the file is a fine-tuning job."""
        return _response_format(self._read()[0]) if self.is_json else None

    @property
    def has_response_format(self) -> bool:
        """Whether samples graded with this grader file get an output_json, as OpenAI fills it.

        A fine-tuning job fills `sample.output_json` only when it sets `response_format`; a bare grader file says
        nothing about the job, so its samples are taken to have one (the run's --response-format decides).
        """
        if not self.is_json:
            return True
        obj = self._read()[0]
        if isinstance(obj, dict) and isinstance(obj.get("method"), dict):
            return self.response_format is not None
        return True
