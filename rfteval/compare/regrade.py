"""`rfteval agree A --regrade GRADER`: side B made by grading A's outputs again with another grader (or A's grader
with another judge), judge answers cached beside A's records.

The judge is opened as every command opens one (`providers.judge.open_judge`), from the `JudgeEndpoint` `Regrade`
carries.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from rfteval.compare.graded import GradedSide, graded_side
from rfteval.data import rundir
from rfteval.errors import InputError
from rfteval.providers.endpoint import JudgeEndpoint
from rfteval.sandbox.policy import SandboxPolicy

if TYPE_CHECKING:
    import pandas as pd

    from rfteval.data.records import Record
    from rfteval.graders.base import GraderConfig
    from rfteval.providers.judge import Judge


class JudgeUsage(TypedDict):
    calls: int
    cache_hits: int
    shared: int  # answered by an identical request's call in flight
    errors: int
    input_tokens: int
    output_tokens: int
    cost_usd: float | None


@dataclass
class Regrade:
    """What --regrade needs: the grader, the dataset the outputs answer, and where judge answers are cached."""

    grader: str | Path
    dataset: str | Path | None = None
    judge: JudgeEndpoint = JudgeEndpoint()  # the judge's endpoint, developer_as included (--judge-*, --developer-as)
    judge_cache: str | Path | None = None
    out: str | Path | None = None  # B's records, written when given
    allow_grader_without_sample: bool = False  # the grader lint's way out (graders/lint.py)
    sandbox: SandboxPolicy = field(default_factory=SandboxPolicy)  # a python grader's (--unsafe-python-graders)
    config: GraderConfig | None = None  # the grader, loaded and linted, when the caller read it (once per command)


SAME = "same"  # --regrade same: A's own grader (from its run directory's spec), usually with --judge-model


def regrade_grader_path(value: str | Path, a_path: str | Path) -> Path:
    """The grader file --regrade names: the path given, or for `same` the grader A's run directory was graded with."""
    if str(value) != SAME:
        return Path(value)
    a = Path(a_path)
    source = a if a.is_dir() else a.parent
    grader = rundir.spec_paths(source)[1] if (source / rundir.RESOLVED_SPEC).is_file() else None
    if grader is None:
        raise InputError("--regrade same needs A to be a run directory whose spec.resolved.toml names its grader; "
                         "give the grader file instead", a, field="--regrade")
    return grader


def agree_inputs(a: str | Path, b: str | Path | None = None, grader: str | Path | None = None,
                 dataset: str | Path | None = None) -> list[Path]:
    """Every file `agree` reads, which none of its outputs (--out, --judge-cache, --html) may be: the paths given, a
    run directory's record files, and the dataset and grader its spec names (what --regrade reads without
    --dataset). A run directory's judge cache is not among them: --regrade appends to it by default. Checking only
    the paths as given let `--out RUN/base.jsonl` overwrite A's records and `--judge-cache` append to the dataset
    the run's spec names."""
    out: list[Path] = []
    for given in (a, b):
        if given is None:
            continue
        p = Path(given)
        out.append(p)
        if p.is_dir():
            out += [f for pattern in ("*.jsonl", "*.parquet") for f in sorted(p.glob(pattern))
                    if f.stem not in rundir.NOT_RECORDS]
        source = p if p.is_dir() else p.parent
        if (source / rundir.RESOLVED_SPEC).is_file():
            out += [f for f in rundir.spec_paths(source) if f is not None]
    out += [Path(f) for f in (grader, dataset) if f is not None]
    return out


def load_regrade_grader(path: str | Path, warn: Callable[[str], None] | None = None, *,
                        allow_without_sample: bool = False, judge_model: str | None = None) -> GraderConfig:
    """The --regrade grader, loaded and linted (graders/lint.py) as every grading command's is; the lint's
    warnings go to `warn` (dropped without one)."""
    from rfteval.graders import load_grader
    from rfteval.graders.lint import check_grader

    try:
        config = load_grader(path)
    except InputError:
        raise
    except Exception as exc:  # noqa: BLE001 - a grader that cannot load is bad input, one line
        raise InputError(f"cannot load the grader ({type(exc).__name__}: {exc})", path, field="--regrade") from None
    check_grader(config, path, warn or (lambda _line: None), allow_without_sample=allow_without_sample,
                 judge_model=judge_model)
    return config


def default_judge_cache(a_path: str | Path) -> Path:
    """Beside A's records: DIR/judge_cache.jsonl of A's run directory (the run's own cache) or A's folder."""
    p = Path(a_path)
    return (p if p.is_dir() else p.parent) / rundir.JUDGE_CACHE


# Opens --regrade's judge for a grader, its answers cached in the given file: the command's, which checks the judge
# model against the endpoint's list before the first call (cli.commands.common.make_judge, as grade's and validate's)
JudgeOpener = Callable[["GraderConfig", Path], "Judge | None"]


def regrade_side(a: GradedSide, spec: Regrade, judge: Judge | None = None, *, config: GraderConfig | None = None,
                 open_judge: JudgeOpener | None = None) -> tuple[GradedSide, dict[str, JudgeUsage]]:
    """B: A's outputs graded again with another grader (`config`: spec.grader loaded, when the caller has it) or A's
    grader with another judge; judge calls cached. Without `judge`, the judge is opened by `open_judge` (default:
    providers.judge.open_judge on spec.judge) once every input is checked, and closed here.

    A sample whose generation failed or was refused is not graded again, as `rfteval run` grades neither: B holds
    the same generation error for it, so the error policy treats both sides of that pair alike."""
    from rfteval.data.dataset import load_dataset
    from rfteval.data.outputs import Output
    from rfteval.data.records import error_kinds, records_frame, write_jsonl
    from rfteval.errors import InputErrors
    from rfteval.graders import GradeOptions
    from rfteval.graders.checks import preflight
    from rfteval.graders.grading import grade_outputs

    dataset = spec.dataset or a.dataset
    if dataset is None:
        raise InputError("--regrade needs the dataset the outputs answer: give --dataset (A is not a run directory "
                         "whose spec names one)", a.path, field="--dataset")
    if config is None:  # agree_paths loaded it to check the gate first
        config = load_regrade_grader(spec.grader, allow_without_sample=spec.allow_grader_without_sample,
                                     judge_model=spec.judge.model)
    data = load_dataset(dataset)
    problems = preflight(config, data, spec.grader)  # a template no item fills would score every sample 0
    if problems:
        raise InputErrors(problems)
    known = {it.id for it in data}
    answered = ~error_kinds(a.frame).isin(["generate", "refusal"]).to_numpy(dtype=bool)
    rows = a.frame[answered]
    missing = sorted(set(a.frame["item_id"]) - known)
    if missing:
        raise InputError(f"{len(missing)} item(s) of A are not in the dataset (first: {missing[0]!r})", dataset,
                         field="item_id")
    if rows["output_text"].isna().all():
        raise InputError("no output_text on A's records: nothing to re-grade", a.path, field="output_text")
    outs = [Output(item_id=str(r.item_id), epoch=int(r.epoch), model=str(r.model),
                   output_text=r.output_text if isinstance(r.output_text, str) else "", model_label=str(r.model_label))
            for r in rows.itertuples(index=False)]
    own = judge is None
    if own:
        cache = Path(spec.judge_cache) if spec.judge_cache is not None else default_judge_cache(a.path)
        if open_judge is None:
            from rfteval.providers import judge as judges

            judge = judges.open_judge(spec.judge, config, cache)
        else:
            judge = open_judge(config, cache)
    try:
        records = grade_outputs(data, config, outs, GradeOptions(sandbox=spec.sandbox), judge=judge)
        usage = judge_usage(judge)
        records += _not_answered(a.frame[~answered], records[0].run_id if records else "regrade")
    finally:
        if own and judge is not None:
            judge.close()
    from rfteval.providers.judge import raise_if_stopped

    raise_if_stopped(judge, "nothing was compared (--regrade)")
    if spec.out is not None:
        from rfteval.data.outfile import write_output

        write_output(spec.out, lambda tmp: write_jsonl(records, tmp),
                     inputs=agree_inputs(a.path, None, spec.grader, dataset), flag="--out")
    side = graded_side(records_frame(records), "B", f"A's outputs re-graded (--regrade {spec.grader})")
    side.grader = f"{spec.grader}, judge {spec.judge.model}" if spec.judge.model else str(spec.grader)
    side.score_range = config.score_range()[:2]
    if not spec.judge.model:  # side.grader is the file as is (with a judge named, it names no file)
        side.config = config
    return side, usage


def _not_answered(rows: pd.DataFrame, run_id: str) -> list[Record]:
    """B's records of A's samples that have no answer to grade: A's generation error, kept (apply_grade's rule)."""
    from rfteval.data.records import error_dict, make_record
    from rfteval.graders.base import GradeResult
    from rfteval.graders.grading import apply_grade

    out = []
    for r in rows.itertuples(index=False):
        e = r.error if isinstance(r.error, dict) else {}
        rec = make_record(run_id=run_id, model_label=str(r.model_label), model=str(r.model),
                          item_id=str(r.item_id), epoch=int(r.epoch),
                          output_text=r.output_text if isinstance(r.output_text, str) else None,
                          error=error_dict(str(e.get("stage") or "generate"), str(e.get("type") or "error"),
                                           str(e.get("message") or "")))
        out.append(apply_grade(rec, GradeResult(0.0)))
    return out


def judge_usage(judge: Judge | None) -> dict[str, JudgeUsage]:
    """Per judge model: calls sent, cache hits, shared calls, errors, tokens and cost (pricing's table; None when
    unpriced). The agree table's `shared` column read a key this left out: it said 0 whatever was shared."""
    if judge is None:
        return {}
    from rfteval.providers.pricing import cost_usd, price_table

    prices = price_table()
    out: dict[str, JudgeUsage] = {}
    for model, u in judge.usage().items():
        tin, tout = int(u.get("input_tokens") or 0), int(u.get("output_tokens") or 0)
        out[model] = {"calls": int(u.get("calls") or 0), "cache_hits": int(u.get("cache_hits") or 0),
                      "shared": int(u.get("shared") or 0), "errors": int(u.get("errors") or 0),
                      "input_tokens": tin, "output_tokens": tout, "cost_usd": cost_usd(model, tin, tout, prices)}
    return out
