"""`rfteval export-environment`: an RFT dataset and its grader as an environment package a trainer installs (prime-rl
loads verifiers 0.4 tasksets by id from installed packages)."""

from __future__ import annotations

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


@command("export-environment", cls=TargetCommand.for_export("environment"))
@judge_flags()
def export_environment(
    grader: str = typer.Argument(..., help="Grader JSON (a grader, {\"grader\": ...} or a job), or FILE.py:FUNCTION."),
    dataset: Path = typer.Option(..., "--dataset", "-d", help="The RFT dataset (JSONL, OpenAI's format)."),
    target: str = target_option("environment"),
    out: Path = typer.Option(..., "--out", help="The package folder to write (new or empty)."),
    name: str | None = typer.Option(None, "--name", metavar="NAME",
                                    help="The taskset id and package name (default rfteval-<dataset name>)."),
    reference_field: str = typer.Option("reference_answer", "--reference-field",
                                        help="The item field shown as the task's answer (logs only)."),
    reasoning: str = REWARD_REASONING,
    think_tags: list[str] | None = REWARD_THINK_TAGS,
    grader_timeout: float = GRADER_TIMEOUT,
    grader_memory: int = GRADER_MEMORY,
    judge_endpoint: JudgeEndpoint = DEFAULT_JUDGE,
    allow_grader_without_sample: bool = ALLOW_GRADER_WITHOUT_SAMPLE,
) -> None:
    """Write a package holding the dataset, the grader and the classes the trainer loads: for prime-rl a verifiers
    taskset (`pip install -e DIR`, then `id = "NAME"` under the env's taskset) scored as `rfteval grade` scores."""
    from rfteval.data.json_types import JSONValue
    from rfteval.graders.lint import check_grader
    from rfteval.graders.loader import reward_function_ref
    from rfteval.reward import grader_config
    from rfteval.reward.export_environment import export_environment as write
    from rfteval.reward.options import RewardOptions, judge_keywords

    ref = reward_function_ref(grader)
    source = ref[0] if ref is not None else Path(grader)
    config = grader_config(grader)
    check_grader(config, source, lambda line: typer.echo(line, err=True),
                 allow_without_sample=allow_grader_without_sample, judge_model=judge_endpoint.model)
    given: dict[str, JSONValue] = {
        "reasoning": reasoning, "think_tags": list(think_tags) if think_tags else None,
        "grader_timeout": grader_timeout, "grader_memory": grader_memory, **judge_keywords(judge_endpoint)}
    defaults = RewardOptions()  # the package shows only what was chosen
    options = {k: v for k, v in given.items() if v != getattr(defaults, k)}
    done = write(config, dataset, target, out, grader_source=str(source), name=name,
                 reference_field=reference_field, options=options)
    typer.echo(f"wrote {done.path} (taskset {done.name!r}, module {done.module}, {done.tasks} tasks): "
               f"pip install -e {done.path}")
