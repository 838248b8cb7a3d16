"""`rfteval export-reward`: a grader as a module a TRL script imports or verl loads as its custom reward function."""

from __future__ import annotations

from enum import Enum
from pathlib import Path

import typer

from rfteval.commands.common import (
    JUDGE_API,
    JUDGE_API_KEY_ENV,
    JUDGE_BASE_URL,
    JUDGE_CONCURRENCY,
    JUDGE_MODEL,
    command,
)


class Target(str, Enum):
    trl = "trl"
    verl = "verl"


@command("export-reward")
def export_reward(
    grader: str = typer.Argument(..., help="Grader JSON (a grader, {\"grader\": ...} or a job), or FILE.py:FUNCTION."),
    target: Target = typer.Option(..., "--target", help="trl (a reward function) or verl (compute_score)."),
    out: Path = typer.Option(..., "--out", help="The module to write (FILE.py)."),
    reference_field: str = typer.Option("reference_answer", "--reference-field",
                                        help="verl: the item field that receives reward_model.ground_truth."),
    ground_truth_json: bool = typer.Option(False, "--ground-truth-json",
                                           help="verl: parse a ground truth held as JSON text first."),
    grader_timeout: float = typer.Option(120.0, "--grader-timeout", help="Seconds per python grader call."),
    grader_memory: int = typer.Option(2048, "--grader-memory", help="MB of memory per python grader worker."),
    judge_base_url: str | None = JUDGE_BASE_URL,
    judge_api_key_env: str = JUDGE_API_KEY_ENV,
    judge_api: str = JUDGE_API,
    judge_model: str | None = JUDGE_MODEL,
    judge_concurrency: int = JUDGE_CONCURRENCY,
) -> None:
    """Write a module holding the grader inline: TRL imports its `reward`, verl loads its `compute_score`
    (custom_reward_function.path=FILE.py, name=compute_score). It imports rfteval when first called."""
    from rfteval.errors import InputError
    from rfteval.graders.loader import reward_function_ref
    from rfteval.outfile import check_output, write_output
    from rfteval.reward import export_module, grader_config

    ref = reward_function_ref(grader)
    source = ref[0] if ref is not None else Path(grader)
    if out.suffix != ".py":
        raise InputError("must name a Python file (FILE.py): TRL imports it, verl loads it by path", field="--out")
    check_output(out, [source], flag="--out")
    config = grader_config(grader)
    options: dict[str, object] = {}
    defaults = {"grader_timeout": 120.0, "grader_memory": 2048, "judge_base_url": None,
                "judge_api_key_env": "OPENAI_API_KEY", "judge_api": "chat", "judge_model": None,
                "judge_concurrency": 16}
    given = {"grader_timeout": grader_timeout, "grader_memory": grader_memory, "judge_base_url": judge_base_url,
             "judge_api_key_env": judge_api_key_env, "judge_api": judge_api, "judge_model": judge_model,
             "judge_concurrency": judge_concurrency}
    options.update({k: v for k, v in given.items() if v != defaults[k]})  # the module shows only what was chosen
    if target is Target.verl:
        if reference_field != "reference_answer":
            options["reference_field"] = reference_field or None
        if ground_truth_json:
            options["ground_truth_json"] = True
    elif reference_field != "reference_answer" or ground_truth_json:
        raise InputError("--reference-field and --ground-truth-json are for --target verl", field="--target")
    text = export_module(config, target.value, str(grader), out, options)
    write_output(out, lambda tmp: tmp.write_text(text, encoding="utf-8"), [source], flag="--out")
    typer.echo(f"wrote {out}")
