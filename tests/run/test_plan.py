"""run/plan.py: `rfteval run --dry-run`'s plan, through run_eval with in-memory providers: the cells, what the run
directory holds, what would be sent, the judge calls at most, the tokens and the cost ceiling; nothing sent or
written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rfteval.run.plan import NO_CEILING, NO_PRICE, RunPlan, estimate_tokens
from rfteval.run.runner import RunOptions, run_eval
from rfteval.run.spec import RunSpec, build_spec, flag_overrides
from tests.run.test_runner import FakeProvider, base_answer, tuned_answer
from tests.support.fake_openai import Reply

N_ITEMS = 5
EPOCHS = 2
# each item's messages as JSON, '[{"role": "user", "content": "q0"}]': 35 characters, 9 tokens at 4 a token
TOKENS_PER_REQUEST = 9
DRY = RunOptions(dry_run=True, handle_signals=False)
RUN = RunOptions(backoff_base_s=0.001, handle_signals=False)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    with open(tmp_path / "items.jsonl", "w") as fh:
        for i in range(N_ITEMS):
            fh.write(json.dumps({"id": str(i), "messages": [{"role": "user", "content": f"q{i}"}],
                                 "reference_answer": "right"}) + "\n")
    grade(tmp_path, {"type": "string_check", "name": "exact", "input": "{{ sample.output_text }}",
                     "reference": "{{ item.reference_answer }}", "operation": "eq"})
    return tmp_path


def grade(d: Path, config: dict[str, Any]) -> None:
    (d / "grader.json").write_text(json.dumps(config))


def spec(d: Path, **flags: Any) -> RunSpec:
    flags.setdefault("epochs", EPOCHS)
    return build_spec(None, flag_overrides(models=["base=m-base", "tuned=m-tuned"], dataset=str(d / "items.jsonl"),
                                           grader=str(d / "grader.json"), out=str(d / "run"), cwd=d, **flags))


def providers() -> dict[str, FakeProvider]:
    return {"base": FakeProvider(base_answer), "tuned": FakeProvider(tuned_answer)}


def plan_of(s: RunSpec, opts: RunOptions = DRY, given: dict[str, FakeProvider] | None = None) -> RunPlan:
    result = run_eval(s, None, opts, providers=given or providers())  # type: ignore[arg-type]
    assert result.plan is not None
    return result.plan


def test_the_token_estimate_is_characters_over_four() -> None:
    assert estimate_tokens([{"role": "user", "content": "q0"}]) == TOKENS_PER_REQUEST
    assert estimate_tokens("abcd") == 2  # '"abcd"': 6 characters, rounded up
    assert estimate_tokens("", [{"type": "function"}]) == 6  # '""' (2) and '[{"type": "function"}]' (22)


@pytest.mark.slow
def test_a_dry_run_sends_nothing_writes_nothing_and_plans_every_cell(workdir: Path) -> None:
    given = providers()
    plan = plan_of(spec(workdir), given=given)
    assert given["base"].calls == [] and given["tuned"].calls == []
    assert not (workdir / "run").exists()  # not even the run directory
    cells = N_ITEMS * EPOCHS
    assert [(m.label, m.cells, m.stored, m.to_send) for m in plan.models] == [("base", cells, 0, cells),
                                                                                ("tuned", cells, 0, cells)]
    assert (plan.cells, plan.stored, plan.to_send, plan.resume) == (2 * cells, 0, 2 * cells, False)
    assert plan.input_tokens == 2 * cells * TOKENS_PER_REQUEST
    assert plan.judge is None  # a string_check calls no judge
    assert plan.output_ceiling is None and {m.no_cost for m in plan.models} == {NO_PRICE}


@pytest.mark.slow
def test_after_a_limited_run_the_plan_counts_the_stored_cells_and_reads_the_store_only(workdir: Path) -> None:
    run_eval(spec(workdir, limit=2), None, RUN, providers=providers())  # type: ignore[arg-type]
    before = {p: p.stat().st_mtime_ns for p in (workdir / "run").rglob("*")}
    plan = plan_of(spec(workdir))
    assert {p: p.stat().st_mtime_ns for p in (workdir / "run").rglob("*")} == before  # nothing written, not the lock
    stored = 2 * EPOCHS
    assert [(m.stored, m.to_send) for m in plan.models] == [(stored, N_ITEMS * EPOCHS - stored)] * 2
    assert plan.resume and plan.items == plan.dataset_items == N_ITEMS
    assert plan.input_tokens == 2 * (N_ITEMS * EPOCHS - stored) * TOKENS_PER_REQUEST
    fresh = plan_of(spec(workdir), RunOptions(dry_run=True, fresh=True, handle_signals=False))
    assert fresh.stored == 0 and fresh.to_send == 2 * N_ITEMS * EPOCHS and fresh.fresh
    limited = plan_of(spec(workdir, limit=3))
    assert (limited.items, limited.dataset_items, limited.cells) == (3, N_ITEMS, 2 * 3 * EPOCHS)
    assert limited.stored == 2 * stored and limited.to_send == 2 * EPOCHS  # item 2 of each model


def test_the_cost_ceiling_is_the_input_estimate_and_the_output_ceiling_at_the_models_price(workdir: Path) -> None:
    spec_file = workdir / "spec.toml"
    spec_file.write_text('dataset = "items.jsonl"\ngrader = "grader.json"\nepochs = 2\nout = "run"\n'
                         "[sampling]\nmax_output_tokens = 100\n"
                         '[models.base]\nmodel = "m-base"\n[models.tuned]\nmodel = "m-tuned"\nmax_output_tokens = 50\n'
                         '[pricing.m-base]\ninput = 2.0\noutput = 8.0\n[pricing.m-tuned]\ninput = 1.0\noutput = 4.0\n'
                         "batch_input = 0.1\nbatch_output = 0.2\n")
    plan = plan_of(build_spec(spec_file))
    requests = N_ITEMS * EPOCHS
    tokens_in = requests * TOKENS_PER_REQUEST
    base, tuned = plan.models
    assert (base.output_ceiling, tuned.output_ceiling, plan.output_ceiling) == (100 * requests, 50 * requests,
                                                                                150 * requests)
    assert base.cost_usd == pytest.approx((tokens_in * 2.0 + 100 * requests * 8.0) / 1e6)
    assert tuned.cost_usd == pytest.approx((tokens_in * 1.0 + 50 * requests * 4.0) / 1e6)
    assert plan.cost_usd == pytest.approx(base.cost_usd + tuned.cost_usd)
    # flex is billed at batch prices, as the Batch API (which these in-memory providers do not have)
    batch = plan_of(build_spec(spec_file), RunOptions(dry_run=True, service_tier="flex", handle_signals=False))
    assert batch.batch and batch.models[0].cost_usd == pytest.approx((tokens_in * 1.0 + 100 * requests * 4.0) / 1e6)
    assert batch.models[1].cost_usd == pytest.approx((tokens_in * 0.1 + 50 * requests * 0.2) / 1e6)
    spec_file.write_text(spec_file.read_text().replace("[sampling]\nmax_output_tokens = 100\n", ""))
    plan = plan_of(build_spec(spec_file))
    assert plan.models[0].no_cost == NO_CEILING and plan.models[0].cost_usd is None and plan.cost_usd is None
    assert plan.output_ceiling is None and plan.models[1].cost_usd is not None


@pytest.mark.slow
def test_judge_calls_at_most_one_per_sample_and_judge_and_one_per_group(workdir: Path, fake_openai) -> None:
    judge = {"type": "score_model", "name": "j", "model": "judge-m", "range": [0, 1],
             "input": [{"role": "user", "content": "Score {{ sample.output_text }}"}]}
    grade(workdir, {"type": "multi", "name": "two", "calculate_output": "(a + b) / 2",
                    "graders": {"a": judge, "b": {**judge, "name": "k", "model": "judge-n"}}})
    flags = {"judge_base_url": fake_openai.base_url, "skip_model_check": True}
    plan = plan_of(spec(workdir, **flags))
    samples = 2 * N_ITEMS * EPOCHS
    assert plan.judge is not None and (plan.judge.samples, plan.judge.calls) == (samples, 2 * samples)
    assert plan.judge.how == ["score_model judge-m: 1 per sample", "score_model judge-n: 1 per sample"]
    capped = plan_of(spec(workdir, max_judge_calls=7, **flags))
    assert capped.judge is not None and (capped.judge.calls, capped.judge.max_calls) == (7, 7)
    grade(workdir, {"type": "group_judge", "name": "rank", "model": "judge-m", "seed": 7})
    plan = plan_of(spec(workdir, **flags))
    assert plan.judge is not None and plan.judge.calls == 2 * N_ITEMS  # one group per model and item
    together = plan_of(spec(workdir, group_models=True, **flags))
    assert together.judge is not None and together.judge.calls == N_ITEMS  # one group per item
    assert together.judge.how == [f"group_judge judge-m: 1 per group of {2 * EPOCHS}"]
    assert fake_openai.requests == []


@pytest.mark.slow
def test_only_samples_without_a_kept_grade_count_for_the_judge(workdir: Path, fake_openai) -> None:
    from rfteval.providers.judge import Judge
    from rfteval.providers.openai_provider import OpenAIProvider

    judge_config = {"type": "score_model", "name": "j", "model": "judge-m", "range": [0, 1],
                    "input": [{"role": "user", "content": "Score {{ sample.output_text }}"}]}
    grade(workdir, judge_config)
    fake_openai.responder = lambda req: Reply(text=json.dumps({"steps": [], "result": 0.5}))
    flags = {"judge_base_url": fake_openai.base_url, "skip_model_check": True}
    with Judge(OpenAIProvider(fake_openai.base_url)) as judge:
        done = run_eval(spec(workdir, limit=2, **flags), None, RUN, providers=providers(), judge=judge)  # type: ignore[arg-type]
    assert done.summary.errors == 0 and done.summary.missing == 0
    plan = plan_of(spec(workdir, **flags))
    assert plan.judge is not None and plan.judge.samples == plan.judge.calls == 2 * (N_ITEMS - 2) * EPOCHS
    grade(workdir, {**judge_config, "model": "judge-other"})  # another grader: every stored sample again
    plan = plan_of(spec(workdir, **flags))
    assert plan.judge is not None and plan.judge.samples == 2 * N_ITEMS * EPOCHS
