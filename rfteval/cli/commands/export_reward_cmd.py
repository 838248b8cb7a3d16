"""`rfteval export-reward`: a grader as a module a TRL script imports, verl loads as its custom reward function and
OpenRLHF loads with --reward.remote_url."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from rfteval.cli.commands.common import (
    ALLOW_GRADER_WITHOUT_SAMPLE,
    DEFAULT_JUDGE,
    GRADER_MEMORY,
    GRADER_TIMEOUT,
    REWARD_REASONING,
    REWARD_THINK_TAGS,
    command,
    judge_flags,
)
from rfteval.cli.commands.targets import TargetCommand, target_option

if TYPE_CHECKING:
    from rfteval.providers.endpoint import JudgeEndpoint


class OnError(str, Enum):
    zero = "zero"
    none = "none"


@command("export-reward", cls=TargetCommand.for_export("reward"))
@judge_flags()
def export_reward(
    grader: str = typer.Argument(..., help="Grader JSON (a grader, {\"grader\": ...} or a job), or FILE.py:FUNCTION."),
    target: str = target_option("reward"),
    out: Path = typer.Option(..., "--out", help="The module to write (FILE.py)."),
    reference_field: str = typer.Option("reference_answer", "--reference-field",
                                        help="verl, openrlhf: the item field that receives the ground truth (label)."),
    ground_truth_json: bool = typer.Option(False, "--ground-truth-json",
                                           help="verl: parse a ground truth held as JSON text first."),
    on_error: OnError | None = typer.Option(None, "--on-error",
                                            help="A grading error scores 0 (zero) or None (none); default: none "
                                                 "for trl (TRL leaves it out of the baseline), zero otherwise; "
                                                 "openrlhf scores none as 0 (it stores no missing reward); verl "
                                                 "refuses none (its float tensor cannot hold it)."),
    reasoning: str = REWARD_REASONING,
    think_tags: list[str] | None = REWARD_THINK_TAGS,
    eos_token: list[str] | None = typer.Option(None, "--eos-token", metavar="TOKEN",
                                               help="openrlhf: one more end-of-turn token stripped from the end of a "
                                                    "response (besides the common models' own); repeatable."),
    tokenizer: str | None = typer.Option(None, "--tokenizer", metavar="TOKENIZER",
                                         help="openrlhf: also strip the end-of-turn tokens this Hugging Face "
                                              "tokenizer's chat template writes (loaded at the first call)."),
    grader_timeout: float = GRADER_TIMEOUT,
    grader_memory: int = GRADER_MEMORY,
    judge_endpoint: JudgeEndpoint = DEFAULT_JUDGE,
    allow_grader_without_sample: bool = ALLOW_GRADER_WITHOUT_SAMPLE,
) -> None:
    """Write a module holding the grader inline: TRL imports its `reward` (or `reward_async`), verl loads its
    `compute_score` (reward.custom_reward_function.path=FILE.py or pkg://MODULE; name=compute_score,
    compute_score_async or compute_score_batch), OpenRLHF its `reward_func`. It imports rfteval when first called."""
    from rfteval.data.outfile import check_output, write_output
    from rfteval.errors import InputError
    from rfteval.graders.lint import check_grader
    from rfteval.graders.loader import reward_function_ref
    from rfteval.reward import export_module, grader_config
    from rfteval.reward.export import module_options
    from rfteval.reward.options import judge_keywords

    ref = reward_function_ref(grader)
    source = ref[0] if ref is not None else Path(grader)
    if out.suffix != ".py":
        raise InputError("must name a Python file (FILE.py): TRL imports it, verl and OpenRLHF load it by path",
                         field="--out")
    check_output(out, [source], flag="--out")
    config = grader_config(grader)
    check_grader(config, source, lambda line: typer.echo(line, err=True),
                 allow_without_sample=allow_grader_without_sample, judge_model=judge_endpoint.model)
    options = module_options(target, {
        "grader_timeout": grader_timeout, "grader_memory": grader_memory, **judge_keywords(judge_endpoint),
        "on_error": on_error.value if on_error else None,
        "reasoning": reasoning, "think_tags": think_tags, "reference_field": reference_field,
        "ground_truth_json": ground_truth_json, "eos_tokens": eos_token, "tokenizer": tokenizer})
    text = export_module(config, target, str(grader), out, options)
    write_output(out, lambda tmp: tmp.write_text(text, encoding="utf-8"), [source], flag="--out")
    typer.echo(f"wrote {out}")
