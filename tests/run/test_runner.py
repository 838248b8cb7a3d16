"""The runner against an in-memory provider: counts, retries, fatal errors, resume and re-grading."""

from __future__ import annotations

import asyncio
import collections
import json
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rfteval.compare.paths import compare_paths
from rfteval.compare.series import compare_series
from rfteval.providers.base import Generation, GenerationRequest, ProviderError, ServerlessProvider
from rfteval.run.monitor import RunMonitor
from rfteval.run.runner import FatalRunError, RunOptions, run_eval
from rfteval.run.spec import RunSpec, build_spec, flag_overrides
from rfteval.status import ExitStatus

N_ITEMS = 6
EPOCHS = 3


def base_answer(item: int, epoch: int) -> str:
    return "right" if (item + epoch) % 3 else "wrong"


def tuned_answer(item: int, epoch: int) -> str:
    return "wrong" if item == 0 else "right"


class FakeProvider(ServerlessProvider):
    """Answers by (item, epoch); `fail(request, attempt)` may raise a ProviderError for an attempt."""

    def __init__(self, answer: Callable[[int, int], str], fail: Callable[[GenerationRequest, int], None] | None = None,
                 delay_s: float = 0.0):
        self.answer, self.fail, self.delay_s = answer, fail, delay_s
        self.calls: list[tuple[str, int]] = []
        self.in_flight = 0
        self.max_in_flight = 0

    def identity(self) -> dict[str, Any]:
        return {"provider": "fake"}

    def request_body(self, request: GenerationRequest) -> dict[str, Any]:
        return {"model": request.model, "messages": request.messages, "temperature": request.sampling.temperature}

    async def generate(self, request: GenerationRequest, timeout_s: float) -> Generation:
        self.calls.append((request.item_id, request.epoch))
        attempt = sum(1 for c in self.calls if c == (request.item_id, request.epoch))
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await asyncio.sleep(self.delay_s)
            if self.fail is not None:
                self.fail(request, attempt)
            text = self.answer(int(request.item_id), request.epoch)
            return Generation(output_text=text, usage={"input_tokens": 10, "output_tokens": 4, "reasoning_tokens": 2})
        finally:
            self.in_flight -= 1

    async def aclose(self) -> None:
        pass


class Counting(RunMonitor):
    def __init__(self) -> None:
        self.totals: dict[str, int] = {}
        self.done: dict[str, int] = {}
        self.errors: dict[str, int] = {}
        self.retries: dict[str, int] = {}
        self.cached = 0

    def start(self, totals: dict[str, int]) -> None:
        self.totals = dict(totals)

    def advance(self, label: str, error: str | None = None, cached: bool = False) -> None:
        self.done[label] = self.done.get(label, 0) + 1
        self.errors[label] = self.errors.get(label, 0) + (error is not None)
        self.cached += cached

    def retry(self, label: str, kind: str, reason: str = "") -> None:
        self.retries[label] = self.retries.get(label, 0) + 1


def write_grader(path: Path, operation: str = "eq") -> Path:
    path.write_text(json.dumps({"type": "string_check", "name": "exact", "input": "{{ sample.output_text }}",
                                "reference": "{{ item.reference_answer }}", "operation": operation}))
    return path


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    with open(tmp_path / "items.jsonl", "w") as fh:
        for i in range(N_ITEMS):
            fh.write(json.dumps({"id": str(i), "messages": [{"role": "user", "content": f"q{i}"}],
                                 "reference_answer": "right"}) + "\n")
    write_grader(tmp_path / "grader.json")
    return tmp_path


def make_spec(d: Path, labels: tuple[str, ...] = ("base", "tuned"), **flags: Any) -> RunSpec:
    flags.setdefault("epochs", EPOCHS)
    return build_spec(None, flag_overrides(models=[f"{lb}=m-{lb}" for lb in labels], dataset=str(d / "items.jsonl"),
                                           grader=str(d / "grader.json"), out=str(d / "run"), cwd=d, **flags))


OPTS = RunOptions(backoff_base_s=0.001, handle_signals=False)


def run(spec: RunSpec, providers: dict[str, FakeProvider], monitor: RunMonitor | None = None,
        opts: RunOptions = OPTS) -> Any:
    return run_eval(spec, monitor, opts, providers=providers)  # type: ignore[arg-type]


def records(d: Path, label: str) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (d / "run" / f"{label}.jsonl").read_text().splitlines()]


def expected_mean(answer: Callable[[int, int], str]) -> float:
    return statistics.fmean(statistics.fmean(answer(i, e) == "right" for e in range(1, EPOCHS + 1))
                            for i in range(N_ITEMS))


def test_every_cell_once_epochs_independent_and_summary(workdir: Path) -> None:
    base, tuned = FakeProvider(base_answer), FakeProvider(tuned_answer)
    mon = Counting()
    result = run(make_spec(workdir), {"base": base, "tuned": tuned}, mon)
    assert result.exit_code == ExitStatus.SUCCESS
    cells = {(str(i), e) for i in range(N_ITEMS) for e in range(1, EPOCHS + 1)}
    assert sorted(base.calls) == sorted(cells) and sorted(tuned.calls) == sorted(cells)
    assert mon.totals == {"base": N_ITEMS * EPOCHS, "tuned": N_ITEMS * EPOCHS} and mon.done == mon.totals
    recs = records(workdir, "base")
    assert [(r["item_id"], r["epoch"]) for r in recs] == [(str(i), e) for i in range(N_ITEMS) for e in (1, 2, 3)]
    assert [r["output_text"] for r in recs] == [base_answer(i, e) for i in range(N_ITEMS) for e in (1, 2, 3)]
    assert {r["run_id"] for r in recs} == {result.summary.run_id}
    s = result.summary
    assert s.complete and s.cells == 2 * N_ITEMS * EPOCHS and s.errors == 0
    assert s.models["base"].mean == pytest.approx(expected_mean(base_answer))
    assert s.models["tuned"].mean == pytest.approx(expected_mean(tuned_answer))
    assert s.models["base"].tokens.to_dict() == {"input": 10 * 18, "output": 4 * 18, "reasoning": 2 * 18}
    delta = s.deltas["tuned"]
    assert delta["baseline"] == "base" and delta["n"] == N_ITEMS
    assert delta["mean"] == pytest.approx(expected_mean(tuned_answer) - expected_mean(base_answer))
    on_disk = json.loads((workdir / "run" / "summary.json").read_text())
    assert on_disk["models"]["tuned"]["mean"] == pytest.approx(s.models["tuned"].mean)
    assert (workdir / "run" / "spec.resolved.toml").exists() and (workdir / "run" / "results.parquet").exists()


def test_concurrency_is_bounded(workdir: Path) -> None:
    base = FakeProvider(base_answer, delay_s=0.01)
    run(make_spec(workdir, ("base",), concurrency=3), {"base": base})
    assert base.max_in_flight == 3
    assert len(base.calls) == N_ITEMS * EPOCHS


def test_resume_sends_nothing_twice_and_marks_cached(workdir: Path) -> None:
    run(make_spec(workdir), {"base": FakeProvider(base_answer), "tuned": FakeProvider(tuned_answer)})
    first = records(workdir, "base")
    base, tuned = FakeProvider(base_answer), FakeProvider(tuned_answer)
    mon = Counting()
    result = run(make_spec(workdir), {"base": base, "tuned": tuned}, mon)
    assert base.calls == [] and tuned.calls == []
    assert mon.cached == 2 * N_ITEMS * EPOCHS
    again = records(workdir, "base")
    assert [r["score"] for r in again] == [r["score"] for r in first]
    assert all(r["cached"] for r in again) and result.summary.models["base"].cached == N_ITEMS * EPOCHS
    grades = (workdir / "run/store/grades.jsonl").read_text().splitlines()
    assert len(grades) == 2 * N_ITEMS * EPOCHS  # nothing graded twice


def test_more_epochs_only_sends_the_new_ones(workdir: Path) -> None:
    run(make_spec(workdir, ("base",)), {"base": FakeProvider(base_answer)})
    base = FakeProvider(base_answer)
    run(make_spec(workdir, ("base",), epochs=4), {"base": base})
    assert sorted(base.calls) == [(str(i), 4) for i in range(N_ITEMS)]
    assert len(records(workdir, "base")) == N_ITEMS * 4


def test_a_changed_request_is_a_new_cell(workdir: Path) -> None:
    run(make_spec(workdir, ("base",)), {"base": FakeProvider(base_answer)})
    base = FakeProvider(base_answer)
    run(make_spec(workdir, ("base",), temperature=0.2), {"base": base})
    assert len(base.calls) == N_ITEMS * EPOCHS


def test_changed_grader_regrades_without_requests(workdir: Path) -> None:
    run(make_spec(workdir), {"base": FakeProvider(base_answer), "tuned": FakeProvider(tuned_answer)})
    write_grader(workdir / "grader.json", operation="ne")  # now "right" scores 0
    base, tuned = FakeProvider(base_answer), FakeProvider(tuned_answer)
    result = run(make_spec(workdir), {"base": base, "tuned": tuned})
    assert base.calls == [] and tuned.calls == []
    assert result.summary.models["base"].mean == pytest.approx(1 - expected_mean(base_answer))
    assert [r["score"] for r in records(workdir, "base")] == [
        float(base_answer(i, e) != "right") for i in range(N_ITEMS) for e in (1, 2, 3)]
    grades = (workdir / "run/store/grades.jsonl").read_text().splitlines()
    assert len(grades) == 2 * 2 * N_ITEMS * EPOCHS


def test_retries_on_rate_limit_then_success(workdir: Path) -> None:
    def fail(req: GenerationRequest, attempt: int) -> None:
        if req.item_id == "2" and req.epoch == 1 and attempt <= 2:
            raise ProviderError("rate_limit", "HTTP 429", status=429, retry_after=0.01)

    base = FakeProvider(base_answer, fail)
    mon = Counting()
    result = run(make_spec(workdir, ("base",)), {"base": base}, mon)
    assert mon.retries == {"base": 2} and result.summary.errors == 0
    assert base.calls.count(("2", 1)) == 3
    entry = [json.loads(x) for x in (workdir / "run/store/responses.jsonl").read_text().splitlines()
             if json.loads(x)["item_id"] == "2" and json.loads(x)["epoch"] == 1]
    assert len(entry) == 1 and entry[0]["attempts"] == 3 and entry[0]["error"] is None


def test_retries_run_out_then_the_cell_is_an_error_and_resume_resends_it(workdir: Path) -> None:
    def fail(req: GenerationRequest, attempt: int) -> None:
        if req.item_id == "0":
            raise ProviderError("server", "HTTP 503: overloaded", status=503)

    base = FakeProvider(base_answer, fail)
    result = run(make_spec(workdir, ("base",), max_retries=2), {"base": base})
    assert base.calls.count(("0", 1)) == 3  # 1 try + 2 retries
    assert result.summary.errors == EPOCHS
    assert result.summary.models["base"].errors.by_type == {"generate:server": EPOCHS}
    assert result.exit_code == ExitStatus.INCOMPLETE  # 3 of 18 cells > 5%
    bad = [r for r in records(workdir, "base") if r["item_id"] == "0"]
    assert all(r["score"] == 0.0 and r["error"]["stage"] == "generate" for r in bad)
    # the endpoint recovers: only the failed cells are sent again
    healthy = FakeProvider(base_answer)
    result = run(make_spec(workdir, ("base",)), {"base": healthy})
    assert sorted(healthy.calls) == [("0", 1), ("0", 2), ("0", 3)]
    assert result.exit_code == ExitStatus.SUCCESS and len(records(workdir, "base")) == N_ITEMS * EPOCHS


def test_bad_request_is_not_retried(workdir: Path) -> None:
    def fail(req: GenerationRequest, attempt: int) -> None:
        if req.item_id == "1" and req.epoch == 2:
            raise ProviderError("bad_request", "HTTP 400: context too long", status=400)

    base = FakeProvider(base_answer, fail)
    result = run(make_spec(workdir, ("base",), max_error_rate=0.5), {"base": base})
    assert base.calls.count(("1", 2)) == 1
    assert result.summary.errors == 1 and result.exit_code == ExitStatus.SUCCESS


def test_fatal_error_stops_the_run_at_once(workdir: Path) -> None:
    def fail(req: GenerationRequest, attempt: int) -> None:
        raise ProviderError("auth", "HTTP 401: Incorrect API key provided", status=401)

    base = FakeProvider(base_answer, fail, delay_s=0.01)
    with pytest.raises(FatalRunError) as err:
        run(make_spec(workdir, ("base",), concurrency=2), {"base": base})
    assert "model base (m-base): auth: HTTP 401" in str(err.value)
    assert len(base.calls) <= 2  # only what was in flight
    assert not (workdir / "run" / "base.jsonl").exists()


def test_a_provider_bug_is_one_failed_cell(workdir: Path) -> None:
    def fail(req: GenerationRequest, attempt: int) -> None:
        if req.item_id == "3" and req.epoch == 3:
            raise ValueError("unexpected")

    result = run(make_spec(workdir, ("base",), max_error_rate=1), {"base": FakeProvider(base_answer, fail)})
    assert result.summary.models["base"].errors.by_type == {"generate:internal": 1}


def test_a_grader_crash_fails_its_cells_not_the_run(workdir: Path, monkeypatch) -> None:
    from rfteval.graders.engine import GradingEngine

    def boom(self: Any, pairs: Any, units: Any = None) -> Any:
        raise RuntimeError("grader exploded")

    monkeypatch.setattr(GradingEngine, "grade_batch", boom)
    result = run(make_spec(workdir, ("base",)), {"base": FakeProvider(base_answer)})
    recs = records(workdir, "base")
    assert len(recs) == N_ITEMS * EPOCHS
    assert all(r["error"]["stage"] == "grade" and "grader exploded" in r["error"]["message"] for r in recs)
    assert result.exit_code == ExitStatus.INCOMPLETE


def test_each_grade_batch_says_its_grading_units_one_model_one_item(workdir: Path, monkeypatch) -> None:
    """A python grader's grading unit is (model label, item id): the runner passes one per pair with every batch."""
    from rfteval.graders.engine import GradingEngine

    real = GradingEngine.grade_batch
    seen: list[tuple[tuple[str, str], str, str]] = []

    def spy(self: GradingEngine, pairs: Any, units: Any = None) -> Any:
        seen.extend((unit, item["id"], sample["output_text"]) for (sample, item), unit in zip(pairs, units, strict=True))
        return real(self, pairs, units)

    monkeypatch.setattr(GradingEngine, "grade_batch", spy)
    run(make_spec(workdir, ("base", "tuned")), {"base": FakeProvider(base_answer), "tuned": FakeProvider(tuned_answer)})
    assert all(unit[1] == item_id for unit, item_id, _ in seen)
    assert collections.Counter(unit for unit, _, _ in seen) == {
        (label, str(i)): EPOCHS for label in ("base", "tuned") for i in range(N_ITEMS)}
    assert {(unit, text) for unit, _, text in seen} == {
        ((label, str(i)), answer(i, e)) for label, answer in (("base", base_answer), ("tuned", tuned_answer))
        for i in range(N_ITEMS) for e in range(1, EPOCHS + 1)}


def test_three_models_compare_against_base(workdir: Path) -> None:
    providers = {"a": FakeProvider(tuned_answer), "base": FakeProvider(base_answer), "c": FakeProvider(tuned_answer)}
    result = run(make_spec(workdir, ("a", "base", "c")), providers)
    assert result.summary.baseline == "base"
    assert sorted(result.summary.deltas) == ["a", "c"]
    # a series: the deltas are `compare RUNDIR`'s, Holm-adjusted across the candidates, and the table shows them
    series = compare_series(workdir / "run", baseline="base")
    for c in series.candidates:
        assert result.summary.deltas[c.label]["p_adjusted"] == pytest.approx(c.p_adjusted)
        assert result.summary.deltas[c.label]["ci95"] == pytest.approx(c.result.delta["ci95"])
    assert result.comparison is not None and result.comparison.series is not None


def test_the_runs_delta_is_computed_once_and_is_what_compare_reports(workdir: Path) -> None:
    result = run(make_spec(workdir), {"base": FakeProvider(base_answer), "tuned": FakeProvider(tuned_answer)})
    expected = compare_paths(workdir / "run" / "base.jsonl", workdir / "run" / "tuned.jsonl").to_json()["delta"]
    on_disk = json.loads((workdir / "run" / "summary.json").read_text())["deltas"]["tuned"]
    assert {k: on_disk[k] for k in expected} == expected  # every number, interval cut to the range included
    assert result.comparison is not None and result.comparison.results["tuned"].delta["mean"] == expected["mean"]


def test_duplicate_ids_are_found_before_any_request(workdir: Path) -> None:
    from rfteval.errors import InputError

    with open(workdir / "items.jsonl", "a") as fh:
        fh.write(json.dumps({"id": "3", "messages": [{"role": "user", "content": "again"}]}) + "\n")
    base = FakeProvider(base_answer)
    with pytest.raises(InputError) as err:
        run(make_spec(workdir, ("base",)), {"base": base})
    assert (err.value.line, err.value.field) == (N_ITEMS + 1, "id") and "duplicate id '3'" in str(err.value)
    assert base.calls == []


# ---- --limit: the first N items, then the same directory continues ------------------------------------------------


@pytest.mark.slow
def test_limit_runs_the_first_items_and_the_full_run_continues_without_resending(workdir: Path) -> None:
    base, tuned = FakeProvider(base_answer), FakeProvider(tuned_answer)
    result = run(make_spec(workdir, limit=2), {"base": base, "tuned": tuned})
    first = {(str(i), e) for i in range(2) for e in range(1, EPOCHS + 1)}
    assert sorted(base.calls) == sorted(first) and sorted(tuned.calls) == sorted(first)
    s = result.summary
    assert (s.items, s.limit, s.dataset_items, s.cells) == (2, 2, N_ITEMS, 2 * 2 * EPOCHS)
    assert s.complete and list(result.item_ids()) == ["0", "1"]
    assert len(result.totals["base"].item_means) == 2  # aligned with item_ids
    on_disk = json.loads((workdir / "run" / "summary.json").read_text())
    assert (on_disk["items"], on_disk["limit"], on_disk["dataset_items"]) == (2, 2, N_ITEMS)
    assert {r["item_id"] for r in records(workdir, "base")} == {"0", "1"}
    base, tuned = FakeProvider(base_answer), FakeProvider(tuned_answer)
    result = run(make_spec(workdir), {"base": base, "tuned": tuned})
    rest = {(str(i), e) for i in range(2, N_ITEMS) for e in range(1, EPOCHS + 1)}
    assert sorted(base.calls) == sorted(rest) and sorted(tuned.calls) == sorted(rest)  # the first two: not again
    s = result.summary
    assert (s.items, s.limit, s.dataset_items) == (N_ITEMS, None, None) and s.complete
    assert "limit" not in json.loads((workdir / "run" / "summary.json").read_text())
    assert s.models["base"].mean == pytest.approx(expected_mean(base_answer))


def test_a_limit_past_the_end_is_the_whole_dataset(workdir: Path) -> None:
    result = run(make_spec(workdir, ("base",), limit=N_ITEMS + 5), {"base": FakeProvider(base_answer)})
    assert (result.summary.items, result.summary.limit, result.summary.dataset_items) == (N_ITEMS, None, None)
    assert len(list(result.item_ids())) == N_ITEMS


class MessagesProvider(FakeProvider):
    """Also keeps each request's messages."""

    def __init__(self, answer: Callable[[int, int], str]):
        super().__init__(answer)
        self.messages: list[list[Any]] = []

    async def generate(self, request: GenerationRequest, timeout_s: float) -> Generation:
        self.messages.append(list(request.messages))
        return await super().generate(request, timeout_s)


@pytest.mark.slow
def test_a_models_system_prompt_goes_before_the_items_messages_and_is_part_of_its_cells(workdir: Path) -> None:
    spec_file = workdir / "spec.toml"
    spec_file.write_text('dataset = "items.jsonl"\ngrader = "grader.json"\nepochs = 1\nout = "run"\n'
                         '[models.base]\nmodel = "m-base"\nsystem_prompt = "Say right."\n[models.tuned]\nmodel = "m-tuned"\n')
    base, tuned = MessagesProvider(base_answer), MessagesProvider(tuned_answer)
    run(build_spec(spec_file), {"base": base, "tuned": tuned})
    assert len(base.messages) == len(tuned.messages) == N_ITEMS
    assert all(m[0] == {"role": "system", "content": "Say right."} and m[1]["role"] == "user" and len(m) == 2
               for m in base.messages)
    assert all(len(m) == 1 and m[0]["role"] == "user" for m in tuned.messages)
    # another system prompt is another request: base's cells are sent again, tuned's are kept
    spec_file.write_text(spec_file.read_text().replace("Say right.", "Say wrong."))
    base, tuned = MessagesProvider(base_answer), MessagesProvider(tuned_answer)
    run(build_spec(spec_file), {"base": base, "tuned": tuned})
    assert len(base.calls) == N_ITEMS and tuned.calls == []
    assert base.messages[0][0]["content"] == "Say wrong."


def test_the_run_holds_a_small_baseline_for_readiness_and_reads_a_large_one_back(workdir: Path,
                                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The baseline's records are kept as written while they are small (readiness then reads no file); past
    HOLD_MAX_BYTES none are kept, so the run's memory stays flat with the dataset, and readiness reads the file
    and reaches the same verdict."""
    import rfteval.run.runner as runner
    from rfteval.run.paths import run_readiness

    spec = make_spec(workdir)
    small = run(spec, {"base": FakeProvider(base_answer), "tuned": FakeProvider(tuned_answer)})
    assert small.baseline_records is not None
    assert [(r.item_id, r.epoch) for r in small.baseline_records] == [(r["item_id"], r["epoch"])
                                                                      for r in records(workdir, "base")]
    held = run_readiness(small, spec)

    monkeypatch.setattr(runner, "HOLD_MAX_BYTES", 200)  # a couple of records' lines
    large = run(spec, {"base": FakeProvider(base_answer), "tuned": FakeProvider(tuned_answer)},
                opts=RunOptions(backoff_base_s=0.001, handle_signals=False, fresh=True))
    assert large.baseline_records is None
    read_back = run_readiness(large, spec)
    assert held.report is not None and read_back.report is not None
    assert read_back.report.to_dict() == held.report.to_dict()


def test_the_held_baseline_keeps_only_its_label_and_lets_go_past_its_budget() -> None:
    from rfteval.data.records import make_record
    from rfteval.run.runner import HeldBaseline

    def rec(label: str) -> Any:
        return make_record(run_id="r", model_label=label, model="m", item_id="1", epoch=1, output_text="x")

    held = HeldBaseline("base")
    held.add(rec("tuned"), 100)
    held.add(rec("base"), 100)
    assert held.records is not None and [r.model_label for r in held.records] == ["base"] and held.bytes == 100
    held.add(rec("base"), runner_budget())
    assert held.records is None
    held.add(rec("base"), 1)
    assert held.records is None  # once let go, never half-held


def runner_budget() -> int:
    from rfteval.run.runner import HOLD_MAX_BYTES

    return HOLD_MAX_BYTES
