"""`rfteval export-environment`: an RFT dataset and its grader as an environment package a trainer installs (prime-rl
loads verifiers 0.4 tasksets by id from installed packages)."""

from __future__ import annotations

from pathlib import Path

import typer

from rfteval.cli.commands.common import (
    ALLOW_GRADER_WITHOUT_SAMPLE,
    JUDGE_API,
    JUDGE_API_KEY_ENV,
    JUDGE_BASE_URL,
    JUDGE_CONCURRENCY,
    JUDGE_MODEL,
    REWARD_REASONING,
    REWARD_THINK_TAGS,
    command,
)
from rfteval.cli.commands.targets import TargetCommand, target_option


@command("export-environment", cls=TargetCommand.for_export("environment"))
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
    grader_timeout: float = typer.Option(120.0, "--grader-timeout", help="Seconds per python grader call."),
    grader_memory: int = typer.Option(2048, "--grader-memory", help="MB of memory per python grader worker."),
    judge_base_url: str | None = JUDGE_BASE_URL,
    judge_api_key_env: str = JUDGE_API_KEY_ENV,
    judge_api: str = JUDGE_API,
    judge_model: str | None = JUDGE_MODEL,
    judge_concurrency: int = JUDGE_CONCURRENCY,
    allow_grader_without_sample: bool = ALLOW_GRADER_WITHOUT_SAMPLE,
) -> None:
    """Write a package holding the dataset, the grader and the classes the trainer loads: for prime-rl a verifiers
    taskset (`pip install -e DIR`, then `id = "NAME"` under the env's taskset) scored as `rfteval grade` scores."""
    from rfteval.data.json_types import JSONValue
    from rfteval.graders.lint import check_grader
    from rfteval.graders.loader import reward_function_ref
    from rfteval.reward import grader_config
    from rfteval.reward.core import RewardOptions
    from rfteval.reward.export_environment import export_environment as write

    ref = reward_function_ref(grader)
    source = ref[0] if ref is not None else Path(grader)
    config = grader_config(grader)
    check_grader(config, source, lambda line: typer.echo(line, err=True),
                 allow_without_sample=allow_grader_without_sample, judge_model=judge_model)
    given: dict[str, JSONValue] = {
        "reasoning": reasoning, "think_tags": list(think_tags) if think_tags else None,
        "grader_timeout": grader_timeout, "grader_memory": grader_memory, "judge_base_url": judge_base_url,
        "judge_api_key_env": judge_api_key_env, "judge_api": judge_api, "judge_model": judge_model,
        "judge_concurrency": judge_concurrency}
    defaults = RewardOptions()  # the package shows only what was chosen
    options = {k: v for k, v in given.items() if v != getattr(defaults, k)}
    done = write(config, dataset, target, out, grader_source=str(source), name=name,
                 reference_field=reference_field, options=options)
    typer.echo(f"wrote {done.path} (taskset {done.name!r}, module {done.module}, {done.tasks} tasks): "
               f"pip install -e {done.path}")
