"""A module's test is found from its path: rfteval/<package>/<module>.py is tested in tests/<package>/test_<module>.py
(rfteval/<module>.py in tests/test_<module>.py), a command (rfteval/cli/commands/<name>_cmd.py) end to end in
tests/cli/test_<name>.py. A module tested elsewhere is in ELSEWHERE with the test that covers it and why; a package's
__init__.py only re-exports or registers, so its names are tested where they live (the public import
paths in tests/project/test_aliases.py). Test folders other than cli/, project/ and support/ mirror a package of rfteval/."""

from __future__ import annotations

from pathlib import Path

from tests.support import REPO

PACKAGE = REPO / "rfteval"
TESTS = REPO / "tests"
OWN_FOLDERS = {"cli", "project", "support", "fixtures"}  # tests/ folders that mirror no package

# module under rfteval/ -> (the test that covers it, why it has no test file of its own)
ELSEWHERE: dict[str, tuple[str, str]] = {
    "__main__.py": ("tests/graders/test_python.py", "`python -m rfteval`: two lines, run by a subprocess there"),
    "errors.py": ("tests/data/test_dataset.py", "the one-line error: every bad-input test reads its line"),
    "cli/commands/common.py": ("tests/cli/test_run.py", "options the commands share, end to end through them"),
    "cli/commands/batches_cmd.py": ("tests/run/batch/test_phase.py", "end to end, beside the batches it lists"),
    "cli/commands/export_environment_cmd.py": ("tests/reward/test_taskset.py", "end to end: verifiers loads its output"),
    "cli/commands/graders_cmd.py": ("tests/cli/test_grade.py", "end to end, with grade and validate"),
    "compare/agree.py": ("tests/cli/test_agree.py", "end to end only"),
    "compare/regrade.py": ("tests/cli/test_agree.py", "`agree --regrade`, end to end through a scripted judge"),
    "compare/gate_types.py": ("tests/compare/test_gate.py", "the gate's data: what the gate's tests build and read"),
    "compare/samples.py": ("tests/view/test_model.py", "the samples the viewer shows"),
    "compare/result.py": ("tests/compare/test_comparison.py", "the result compare_sides builds, and its JSON"),
    "compare/measure.py": ("tests/compare/test_comparison.py", "the comparison's statistics, through compare_sides"),
    "compare/ranges.py": ("tests/cli/test_score_range.py", "a 0..10 judge's range through compare, run and agree"),
    "compare/passing.py": ("tests/stats/test_passk.py", "the pass rule and pass@k, through compare_sides"),
    "compare/hardest.py": ("tests/compare/test_comparison.py", "the hardest slice, through compare_sides"),
    "providers/openai_request.py": ("tests/providers/test_openai_provider.py", "the request bodies the provider "
                                    "sends, asserted on the fake server's side"),
    "providers/openai_response.py": ("tests/providers/test_openai_provider.py", "answers, headers and statuses read, "
                                     "through the provider against the fake server"),
    "readiness/probe_outputs.py": ("tests/readiness/test_probes.py", "each probe's output, through run_probes"),
    "readiness/reference_template.py": ("tests/readiness/test_probes.py", "the reference rendered as an output"),
    "reward/base.py": ("tests/reward/test_core.py", "Reward and its error rule, through every adapter's factory"),
    "reward/items.py": ("tests/reward/test_core.py", "the item found again exactly, through the adapters"),
    "reward/options.py": ("tests/reward/test_adapters.py", "the factories' keywords, through each for_* factory"),
    "sandbox/_capture.py": ("tests/sandbox/test__worker.py",
        "a unit's output captured and capped, through the pool's graders that print"),
    "sandbox/_child.py": ("tests/sandbox/test__worker.py",
        "a unit's child: scores, errors and rebuilt samples checked in-process"),
    "sandbox/_preload.py": ("tests/sandbox/test__worker.py",
        "a source's imports done without running it, through the pool's start-ups"),
    "sandbox/_supervisor.py": ("tests/sandbox/test__worker.py",
        "the supervisor, through the in-process supervisor the tests build"),
    "sandbox/_supervisor_processes.py": ("tests/sandbox/test__worker.py",
        "a unit's files cleared as it goes, and its processes through the pool"),
    "sandbox/_supervisor_results.py": ("tests/sandbox/test__worker.py",
        "OOM kills charged to the results read after them"),
    "sandbox/_supervisor_templates.py": ("tests/sandbox/test__worker.py",
        "templates forked per unit, through the pool's tests"),
    "sandbox/_template.py": ("tests/sandbox/test__worker.py",
        "a source's module-level code run once, through the pool's tests"),
    "sandbox/_worker_protocol.py": ("tests/sandbox/test__worker.py", "frames and result regions read in-process"),
    "data/json_types.py": ("tests/project/test_architecture.py", "type names, no code (mypy checks their use)"),
    "graders/engine.py": ("tests/graders/test_string_check.py", "every grader type's test grades through it"),
    "graders/grading.py": ("tests/cli/test_grade.py", "the library behind `rfteval grade`, end to end"),
    "sandbox/seccomp.py": ("tests/sandbox/test_attacks.py",
                                   "the sandbox's system-call filter, loaded in the sandbox: the attacks meet it"),
    "graders/judged.py": ("tests/graders/test_score_model.py", "what the model graders share, through each of them"),
    "providers/base.py": ("tests/providers/test_retry.py", "the provider protocol; its error kinds decide the retries"),
    "readiness/reference.py": ("tests/cli/test_validate.py", "`rfteval validate grader --dataset`, end to end"),
    "report/agree_render.py": ("tests/cli/test_agree.py", "what `rfteval agree` prints and writes, end to end"),
    "report/format.py": ("tests/cli/test_score_range.py", "how figures read in every report"),
    "report/grade_table.py": ("tests/cli/test_grade.py", "what `rfteval grade` prints, end to end"),
    "report/graders_table.py": ("tests/cli/test_grade.py", "what `rfteval graders` prints, end to end"),
    "report/judge_stability_render.py": ("tests/readiness/test_judge_stability.py", "the stability report's text"),
    "report/run_table.py": ("tests/cli/test_run_progress.py", "what `rfteval run` prints, end to end"),
    "report/terminal.py": ("tests/cli/test_compare.py", "what `rfteval compare` prints, end to end"),
    "reward/episode.py": ("tests/reward/test_tinker.py", "what the tinker and ART adapters share, through them"),
    "reward/export.py": ("tests/cli/test_export_reward.py", "end to end: TRL imports and verl loads what it writes"),
    "reward/export_environment.py": ("tests/reward/test_taskset.py", "the taskset package it writes, loaded there"),
    "run/monitor.py": ("tests/cli/test_run_progress.py", "the run's progress hooks (no-ops): the terminal's bars"),
    "run/entries.py": ("tests/run/test_store.py", "the store's lines: written, indexed and read back by the store there"),
    "run/resolved.py": ("tests/run/test_spec.py", "spec.resolved.toml: the spec written back (to_toml) there"),
    "run/response_format.py": ("tests/run/test_spec.py", "a response format file read into a model's sampling"),
    "run/cells.py": ("tests/run/test_runner.py", "a run's cells and its dataset check, through run_eval there"),
    "run/invocation.py": ("tests/run/test_runner.py", "run_eval's options and result, built and read there"),
    "run/judging.py": ("tests/cli/test_run_judges.py", "a run's judge: opened, capped, stopped and priced there"),
    "run/pipeline.py": ("tests/run/test_runner.py", "the run's asyncio loop: every run_eval there runs it"),
    "run/model_runs.py": ("tests/run/test_spec.py", "resolve_models and build_providers, tested with the spec"),
    "run/spec_tables.py": ("tests/run/test_spec.py", "the spec's tables: their defaults and bounds through build_spec"),
    "run/batch/judge_phase.py": ("tests/run/batch/test_phase.py", "the judge's batch phase, beside the generation's"),
    "view/bundle.py": ("tests/view/test_browser.py", "the static pages, opened from disk in a browser"),
    "view/paths.py": ("tests/view/test_model.py", "the view command's flags, end to end"),
    "view/sources.py": ("tests/view/test_model.py", "the models found in the paths, through the pages"),
    "view/sample_card.py": ("tests/view/test_model.py", "the Item page's samples and trajectories"),
    "view/shown.py": ("tests/view/test_model.py", "the pages' figures as the terminal prints them"),
    "view/item_columns.py": ("tests/view/test_model.py", "what the Compare page's filters read"),
    "view/run_info.py": ("tests/view/test_model.py", "the Runs page's spec and summary tables"),
    "view/regraded.py": ("tests/view/test_model.py", "the Agree page's pairs found among the paths"),
}


def modules() -> list[str]:
    """Every module under rfteval/ but the packages' __init__.py, as its path under rfteval/."""
    return sorted(p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py") if p.name != "__init__.py")


def mirrored(module: str) -> str:
    """Where the rule puts a module's test."""
    path = Path(module)
    if path.parent.as_posix() == "cli/commands" and path.stem.endswith("_cmd"):
        return f"tests/cli/test_{path.stem.removesuffix('_cmd')}.py"
    folder = "tests" if path.parent == Path(".") else f"tests/{path.parent.as_posix()}"
    return f"{folder}/test_{path.stem}.py"


def test_every_module_has_its_test_file_or_says_where_it_is_tested():
    missing = [f"rfteval/{m}: no {mirrored(m)}" for m in modules()
               if m not in ELSEWHERE and not (REPO / mirrored(m)).is_file()]
    assert not missing, ("each module's test is at its mirrored path; create it, or list the module in ELSEWHERE "
                         "with the test that covers it:\n" + "\n".join(missing))


def test_the_list_names_modules_without_a_test_file_and_tests_that_exist():
    stale = [f"{m}: no such module" for m in ELSEWHERE if not (PACKAGE / m).is_file()]
    stale += [f"{m}: has {mirrored(m)}; leave it out of ELSEWHERE" for m in ELSEWHERE
              if (PACKAGE / m).is_file() and (REPO / mirrored(m)).is_file()]
    stale += [f"{m}: {test} does not exist" for m, (test, _) in ELSEWHERE.items() if not (REPO / test).is_file()]
    assert not stale, "\n".join(stale)


def test_test_folders_mirror_packages_and_flat_tests_mirror_top_level_modules():
    strays = []
    for path in sorted(TESTS.rglob("test_*.py")):
        rel = path.relative_to(TESTS)
        if rel.parts[0] in OWN_FOLDERS:
            continue
        if len(rel.parts) == 1:  # tests/test_<module>.py: rfteval/<module>.py only
            if not (PACKAGE / rel.name.removeprefix("test_")).is_file():
                strays.append(f"tests/{rel}: no rfteval/{rel.name.removeprefix('test_')}; move it to tests/<package>/")
        elif not (PACKAGE / rel.parent / "__init__.py").is_file():
            strays.append(f"tests/{rel}: no package rfteval/{rel.parent.as_posix()}/")
    assert not strays, "\n".join(strays)


def test_every_test_folder_is_a_package():
    """tests/ and each folder of tests are packages, so test basenames may repeat across folders (test_paths.py)."""
    folders = [p for p in [TESTS, *TESTS.rglob("*")] if p.is_dir() and p.name != "__pycache__"
               and "fixtures" not in p.relative_to(TESTS).parts and any(p.glob("*.py"))]
    assert [f.relative_to(REPO).as_posix() for f in folders if not (f / "__init__.py").is_file()] == []
