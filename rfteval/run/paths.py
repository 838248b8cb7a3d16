"""`rfteval run` as one library call: the spec built from the file and the flags, every check made before a
request is sent, then the run."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rfteval.data.json_types import JSONObject
from rfteval.errors import InputError

if TYPE_CHECKING:
    from rfteval.graders.base import GraderConfig
    from rfteval.graders.loader import GraderFile
    from rfteval.readiness.report import ReadinessReport
    from rfteval.run.monitor import RunMonitor
    from rfteval.run.runner import RunOptions, RunResult
    from rfteval.run.spec import RunSpec

SERVICE_TIERS = ("auto", "default", "flex", "priority")


def check_run_options(options: RunOptions) -> None:
    """The invocation flags that are wrong on their own or together: one line (exit 2) naming the flag."""
    if options.service_tier is not None and options.service_tier not in SERVICE_TIERS:
        raise InputError(f"expected auto, default, flex or priority, got {options.service_tier!r}",
                         field="--service-tier")
    if options.batch_tail not in ("batch", "sync"):
        raise InputError(f"expected batch or sync, got {options.batch_tail!r}", field="--batch-tail")
    modes = [flag for flag, on in (("--batch", options.batch), ("--export-requests", options.export_requests is not None),
                                   ("--import-responses", options.import_responses is not None)) if on]
    if options.batch_judge and not options.batch:
        raise InputError("needs --batch (the judge phase follows the generation batches)", field="--batch-judge")
    if len(modes) > 1:
        raise InputError(f"{' and '.join(modes)} cannot be combined: pick one", field=modes[1])
    if options.dry_run and (options.export_requests is not None or options.import_responses is not None):
        other = "--export-requests" if options.export_requests is not None else "--import-responses"
        raise InputError(f"cannot be combined with {other} (that one writes into the run directory): pick one",
                         field="--dry-run")
    # the hidden test hooks too: a wait below 0 or a batch of no lines would only fail later, mid-run
    for flag, value, least in (("--retry-base-delay", options.backoff_base_s, 0.0),
                               ("--checkpoint-interval", options.checkpoint_s, 0.0),
                               ("--batch-poll-interval", options.batch_poll_s, 0.0),
                               ("--batch-max-lines", options.batch_max_lines, 1)):
        if not value >= least:
            raise InputError(f"must be >= {least:g}, got {value:g}", field=flag)


def check_run_outputs(run_spec: RunSpec, spec: Path | None, options: RunOptions,
                      grader: GraderFile | None = None) -> None:
    """--export-requests is written whole, over what is there: never over one of the run's inputs (it once replaced
    the grader with request lines and exited 0). With several models it writes FILE.LABEL.jsonl for each."""
    if options.export_requests is None:
        return
    from rfteval.data.outfile import check_output
    from rfteval.run.spec import resolve_models

    runs = resolve_models(run_spec, grader)
    inputs = [spec, run_spec.dataset, run_spec.grader, run_spec.sampling.response_format, options.import_responses,
              *(run.settings.get("path") for run in runs if run.provider == "replay"),
              *(m.response_format for m in run_spec.models.values())]
    path = Path(options.export_requests)
    check_output(path, inputs, "--export-requests")
    for run in runs if len(runs) > 1 else []:
        check_output(path.with_name(f"{path.stem}.{run.label}{path.suffix or '.jsonl'}"), inputs, "--export-requests")


def _stderr(line: str) -> None:
    import sys

    print(line, file=sys.stderr)


def check_run_inputs(run_spec: RunSpec, warn: Callable[[str], None], grader: GraderFile | None = None) -> GraderConfig:
    """The grader and the dataset a run (or `validate spec`) would use, checked before any request: the grader's
    lint (graders/lint.py), its templates against every item, and the RFT format of every line; the warnings go
    to `warn`, the problems are raised together (one line, the rest counted). `grader`: the spec's grader file as
    the command read it (read here when not given)."""
    from rfteval.data.dataset import iter_items
    from rfteval.errors import InputErrors
    from rfteval.graders.checks import preflight_stream
    from rfteval.graders.lint import load_checked_grader
    from rfteval.graders.paths import dataset_format

    config = load_checked_grader(grader if grader is not None else run_spec.grader, warn,
                                 allow_without_sample=bool(run_spec.allow_grader_without_sample),
                                 judge_model=run_spec.judge.model)
    problems = preflight_stream(config, run_spec.dataset, run_spec.grader, rollout=run_spec.tools is not None)
    items = iter_items(run_spec.dataset, skip_invalid=True, check_duplicates=False)
    problems += dataset_format(config, items, run_spec.dataset, bool(run_spec.allow_trailing_assistant), warn,
                               problems)
    if problems:  # a template no item can fill, or a line holding its own answer: say so before spending
        raise InputErrors(problems)
    return config


def run_paths(spec: Path | None, overrides: JSONObject, options: RunOptions,
              start: Callable[[RunSpec], RunMonitor], unsafe_python_graders: bool = False,
              warn: Callable[[str], None] | None = None) -> RunResult:
    """Build the spec (the file, then the flags), check the options, the grader against every item and the python
    sandbox, then run (or resume) it; `warn` (default: stderr) gets the checks' warnings. `start` gets the spec
    once it is known good and returns the monitor; raises InputError before any request, FatalRunError when an
    endpoint refuses the run."""
    from rfteval.graders.loader import GraderFile
    from rfteval.graders.paths import require_sandbox
    from rfteval.run.runner import run_eval
    from rfteval.run.spec import build_spec

    run_spec = build_spec(spec, overrides)
    check_run_options(options)
    grader = GraderFile(run_spec.grader)  # read once, when first needed: every step below gets this one
    check_run_outputs(run_spec, spec, options, grader)
    config = check_run_inputs(run_spec, warn or _stderr, grader)
    policy = run_spec.sandbox_policy(unsafe_python_graders)
    require_sandbox(config, policy)
    return run_eval(run_spec, start(run_spec), options, sandbox=policy, grader_file=grader)


@dataclass(frozen=True)
class RunReadiness:
    """The baseline model's readiness after a run: its report, or why it was not assessed (nothing graded yet)."""

    label: str
    out_dir: Path
    report: ReadinessReport | None = None
    reason: str | None = None


def run_readiness(result: RunResult, run_spec: RunSpec) -> RunReadiness:
    """The RFT-readiness verdict of the baseline model (statistics.md §3): will RFT learn from this dataset?"""
    from rfteval.data.records import read_records, records_frame
    from rfteval.data.rundir import baseline_label
    from rfteval.data.sampling_check import NotSampling
    from rfteval.graders import load_grader
    from rfteval.readiness.assessment import assess

    label = baseline_label(list(result.totals))
    path = result.out_dir / f"{label}.jsonl"
    # the run's own check of its epochs (summary.json's not_sampling), not a second read of the records
    flat = next((NotSampling.from_json(c) for c in result.summary.not_sampling or [] if c["label"] == label), None)
    try:
        # the records the run holds, as written; the file only for a result that holds none
        records = (records_frame(result.baseline_records) if result.baseline_records else read_records(path))
        # the grader the run graded with: its file is not read again
        grader = result.grader if result.grader is not None else load_grader(run_spec.grader)
        report = assess(records, grader, dataset=run_spec.dataset, label=label,
                        not_sampling=flat)
    except InputError as exc:  # nothing graded yet: no verdict, not a failure
        return RunReadiness(label, result.out_dir, reason=exc.message)
    return RunReadiness(label, result.out_dir, report=report)
