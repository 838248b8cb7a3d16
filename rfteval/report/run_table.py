"""What `rfteval run` shows: a progress bar per model while it runs, then the models table and the delta."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from rfteval.report.format import fmt, fmt_ci, fmt_cost, fmt_tokens
from rfteval.report.format import table as house_table
from rfteval.run.monitor import RunMonitor

if TYPE_CHECKING:
    from rich.console import Console, RenderableType
    from rich.progress import Progress, TaskID
    from rich.table import Table

    from rfteval.run.plan import RunPlan
    from rfteval.run.runner import RunResult
    from rfteval.run.summary import RunComparison, RunSummary, TokenCounts


def fmt_errors(by_type: dict[str, int]) -> str:
    """'0', or '3 (generate:timeout 2, grade:python_grader_runtime_error 1)'."""
    total = sum(by_type.values())
    if not total:
        return "0"
    parts = ", ".join(f"{k} {v}" for k, v in sorted(by_type.items(), key=lambda kv: -kv[1]))
    return f"{total} ({parts})"


class RichMonitor(RunMonitor):
    """One progress bar per model: done/total, rate, ETA, errors and retries. Updates are throttled."""

    def __init__(self, console: Console | None = None, refresh_s: float = 0.1):
        from rich.console import Console

        self.console = console or Console(stderr=True)
        self.refresh_s = refresh_s
        self._lock = threading.Lock()
        self._counts: dict[str, dict[str, int]] = {}
        self._tasks: dict[str, TaskID] = {}
        self._last = 0.0
        self._said: set[tuple[str, str]] = set()
        self.progress: Progress | None = None

    def start(self, totals: dict[str, int]) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self.progress = Progress(
            TextColumn("{task.description:>10}"), BarColumn(bar_width=30), MofNCompleteColumn(),
            TextColumn("{task.fields[rate]}"), TimeRemainingColumn(),
            TextColumn("errors {task.fields[errors]}  retries {task.fields[retries]}  cached {task.fields[cached]}"
                       "{task.fields[limit]}{task.fields[last]}"),
            console=self.console, refresh_per_second=4, transient=False,
        )
        for label, total in totals.items():
            self._counts[label] = {"done": 0, "errors": 0, "retries": 0, "cached": 0}
            self._tasks[label] = self.progress.add_task(label, total=total, rate="", errors=0, retries=0, cached=0,
                                                        limit="", last="")
        self._t0 = time.monotonic()
        self.progress.start()

    def advance(self, label: str, error: str | None = None, cached: bool = False) -> None:
        c = self._counts[label]
        c["done"] += 1
        c["errors"] += error is not None
        c["cached"] += cached
        self._maybe_push()

    def retry(self, label: str, kind: str, reason: str = "") -> None:
        """Counted on the model's line, with the last reason; piped (a log, CI), each kind of failure is said once
        in a line of its own, so a stalled run says why while it still retries. The judge's retries (model
        graders; any thread) get a line of their own, "judge", made at its first retry. A server's message may
        span lines (a stack, a validation error): only its first line is shown, so the bar stays one line."""
        from rfteval.providers.retry import one_line

        reason = one_line(reason, 160)
        with self._lock:
            if label not in self._counts:
                self._counts[label] = {"done": 0, "errors": 0, "retries": 0, "cached": 0}
                if self.progress is not None:
                    self._tasks[label] = self.progress.add_task(label, total=None, rate="", errors=0, retries=0,
                                                                cached=0, limit="", last="")
            self._counts[label]["retries"] += 1
        if self.progress is not None and label in self._tasks:
            self.progress.update(self._tasks[label], last=f"  last: {kind}" + (f" ({one_line(reason, 60)})"
                                                                                 if reason else ""))
        if not self.console.is_terminal and (label, kind) not in self._said:
            self._said.add((label, kind))
            self.message(f"rfteval: {label}: retrying after {kind}" + (f": {reason}" if reason else ""))
        self._maybe_push()

    def concurrency(self, label: str, limit: int) -> None:
        """The adaptive concurrency limit, shown at the end of the model's line."""
        if self.progress is not None and label in self._tasks:
            self.progress.update(self._tasks[label], limit=f"  limit {limit}")

    def batch(self, chunk: str, label: str, status: str, counts: dict[str, int]) -> None:
        done = counts.get("completed", 0) + counts.get("failed", 0)
        total = counts.get("total") or 0
        failed = f", {counts['failed']} failed" if counts.get("failed") else ""
        self.message(f"batch {chunk}: {status}" + (f" ({done}/{total}{failed})" if total else ""))

    def message(self, text: str) -> None:
        if self.progress is not None:
            self.progress.console.print(text, highlight=False, markup=False)
        else:
            self.console.print(text, highlight=False, markup=False)

    def _maybe_push(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last < self.refresh_s:
            return
        self._last = now
        if self.progress is None:  # not started: no bar to update (no task either)
            return
        with self._lock:
            for label, c in self._counts.items():
                if label not in self._tasks:
                    continue
                fresh = c["done"] - c["cached"]
                elapsed = max(now - self._t0, 1e-9)
                rate = f"{fresh / elapsed:.1f}/s" if fresh else ""
                self.progress.update(self._tasks[label], completed=c["done"], rate=rate, errors=c["errors"],
                                     retries=c["retries"], cached=c["cached"])

    def stop(self) -> None:
        if self.progress is not None:
            self._maybe_push(force=True)
            self.progress.stop()


def models_table(summary: RunSummary) -> Table:
    """Per model: mean of per-item means with its interval, counts, errors by kind, tokens, cost."""
    s = summary
    items = f"first {s.items} of {s.dataset_items} items" if s.limit is not None else f"{s.items} items"
    title = f"{s.name}: {items} x {s.epochs} epochs, grader {s.grader.name}"
    table = house_table(title)
    top = int(s.epochs or 1)
    ks = ["1"] if top < 2 else ["1", str(top)]  # pass@1 and pass@N (unbiased, from the epochs: rfteval.stats.passk)
    # columns with nothing to say (no usage reported, no price known: replayed or self-hosted) are left out, so
    # the table fits 80 columns
    models = s.models
    has_tokens = any(_any_tokens(m.tokens) for m in models.values())
    has_truncated = any(m.truncated_in_reasoning and m.truncated_in_reasoning.n for m in models.values())
    has_cost = any(m.cost_usd is not None for m in models.values())
    columns = ["model", "mean", "95% CI", "pass@" + "/@".join(ks), "items", "records", "errors"]
    has_reasoning = any(m.tokens.reasoning is not None for m in models.values())
    token_column = "tokens in/out (reasoning)" if has_reasoning else "tokens in/out"
    columns += [token_column] if has_tokens else []
    columns += ["cost"] if has_cost else []
    columns += ["cut off thinking"] if has_truncated else []
    for name in columns:  # the model's name folds first when the terminal is narrow: never a number
        table.add_column(name, justify="left" if name in ("model", "errors") else "right",
                         no_wrap=name not in ("model", "errors", token_column), overflow="fold",
                         ratio=1 if name == "model" else None)
    for label, m in models.items():
        tok = m.tokens
        reasoning = f" ({fmt_tokens(tok.reasoning)})" if tok.reasoning is not None else ""
        tokens = f"{fmt_tokens(tok.input)}/{fmt_tokens(tok.output)}{reasoning}" \
            if _any_tokens(tok) else "—"  # no usage reported (replayed outputs)
        records = str(m.records) if m.records == m.cells else f"{m.records}/{m.cells}"
        curve = m.pass_at_k or {}
        pass_k = "/".join(fmt(curve.get(k)) for k in ks)
        cells = [f"{label} ({m.model})", fmt(m.mean), fmt_ci(m.ci95, sign=False), pass_k, str(m.items),
                 records, fmt_errors(m.errors.by_type)]
        cells += [tokens] if has_tokens else []
        cells += [fmt_cost(m.cost_usd)] if has_cost else []
        if has_truncated:
            cut = m.truncated_in_reasoning
            cells += [f"{cut.n} ({cut.share:.0%})" if cut and cut.n else "0"]
        table.add_row(*cells)
    return table


def _any_tokens(tok: TokenCounts) -> bool:
    return bool(tok.input or tok.output or tok.reasoning)


def truncation_lines(summary: RunSummary) -> list[str]:
    """Per model whose samples ran out of tokens while reasoning: how many, and what to do about it."""
    from rfteval.data.reasoning import truncation_line

    lines = []
    for label, m in summary.models.items():
        cut = m.truncated_in_reasoning
        line = truncation_line(label, cut.n if cut else 0, cut.share if cut else 0.0)
        if line:
            lines.append(line)
    return lines


def per_item_table(result: RunResult) -> Table:
    """Each item's mean over its epochs, per model, in dataset order (the way ChipStack reported it)."""

    labels = list(result.totals)
    base = result.summary.baseline
    table = house_table(f"per item: mean over {result.summary.epochs} epochs")
    table.add_column("item")
    for label in labels:
        table.add_column(label, justify="right")
    others = [lb for lb in labels if lb != base]
    for label in others:
        table.add_column(f"{label} - {base}", justify="right")
    for i, item_id in enumerate(result.item_ids()):
        means = {lb: result.totals[lb].item_means[i] for lb in labels}
        row = [item_id] + [fmt(means[lb]) for lb in labels]
        row += [fmt(means[lb] - means[base], sign=True) for lb in others]
        table.add_row(*row)
    return table


def compare_renderables(comparison: RunComparison, top: int = 0) -> list[RenderableType]:
    """The run's comparison as `rfteval compare` prints it: the one summary.json's deltas come from."""
    from rich.text import Text

    from rfteval.report.terminal import items_table, series_lines, series_table, side_lines, summary_table

    if comparison.series is not None:  # a series: one table, Holm across the candidates (rfteval.compare.series)
        return [series_table(comparison.series), *(Text(line) for line in series_lines(comparison.series))]
    out: list[RenderableType] = []
    for cmp in comparison.results.values():
        out.append(summary_table(cmp))
        out += [Text(line) for line in side_lines(cmp)]
        if top:
            out.append(items_table(cmp, top))
    return out


def _reasoning(usage: Mapping[str, object]) -> str:
    """' (reasoning N)' when the endpoint reported reasoning tokens, else nothing (not a made-up 0)."""
    n = usage.get("reasoning_tokens")
    return f" (reasoning {n})" if n is not None else ""


def _count(usage: Mapping[str, object], key: str) -> int:
    value = usage.get(key)
    return value if isinstance(value, int) else 0


def judge_calls_why(usage: Mapping[str, object], result: RunResult) -> str | None:
    """Why a judge made a number of calls other than one per sample, from what the run counted (never guessed):
    "26 calls for 48 samples: 22 graded by an earlier invocation (their grades kept)". The samples are the run's
    cells; each is graded now, reused, left ungraded (its generation failed) or has no response yet; what is graded
    now asks the judge (once per sample and judge grader, or once per item's group), and each request is a call,
    a cache hit, shared with an identical call in flight, or not sent (the judge had stopped). None when there is
    nothing to explain, or the counts are not known."""
    tally, samples = result.grading, result.summary.cells
    calls = _count(usage, "calls")
    if tally is None or "requests" not in usage or calls == samples:
        return None
    asked, cached, shared = _count(usage, "requests"), _count(usage, "cache_hits"), _count(usage, "shared")
    missing = samples - tally.graded - tally.reused - tally.not_graded
    why = []
    if tally.reused:
        why.append(f"{tally.reused} graded by an earlier invocation (their grades kept)")
    if tally.not_graded:
        why.append(f"{tally.not_graded} not graded: their generation failed")
    if missing > 0:
        why.append(f"{missing} not graded: no response yet")
    if tally.in_groups and asked:
        why.append(f"the {tally.graded} graded now went to the judge as {asked} group request(s), one per item")
    elif asked > tally.graded:
        why.append(f"the {tally.graded} graded now asked the judge {asked} times (one request per judge grader)")
    elif asked < tally.graded:
        why.append(f"{tally.graded - asked} graded now without asking the judge (the grader failed first)")
    if cached:
        why.append(f"{cached} answered from the judge cache")
    if shared:
        why.append(f"{shared} shared an identical request's call")
    if (unsent := asked - calls - cached - shared) > 0:
        why.append(f"{unsent} not sent (the judge had stopped)")
    return f"{calls} calls for {samples} samples: " + "; ".join(why) if why else None


def print_run(result: RunResult, console: Console, per_item: bool = False) -> None:
    from rich.markup import escape

    console.print(models_table(result.summary))
    for line in truncation_lines(result.summary):
        console.print(line, highlight=False, markup=False)
    for line in agent_lines(result.summary):
        console.print(line, highlight=False, markup=False, soft_wrap=True)
    for flagged in result.summary.not_sampling or []:  # one line however wide: a log is searched for it
        console.print(f"[yellow]warning[/]: {escape(flagged['message'])}", highlight=False, soft_wrap=True)
    for model, u in (result.summary.judge or {}).items():
        cost = f", ${u['cost_usd']:.4f}" if u.get("cost_usd") is not None else ""
        console.print(f"judge {model}: {u.get('calls', 0)} calls, {u.get('cache_hits', 0)} cached, "
                      f"{u.get('shared', 0)} shared, {u.get('errors', 0)} errors, tokens in/out {u.get('input_tokens', 0)}/"
                      f"{u.get('output_tokens', 0)}{_reasoning(u)}{cost} "
                      "(this invocation)", highlight=False)
        if (why := judge_calls_why(u, result)) is not None:
            console.print(f"  {why}", highlight=False, markup=False, soft_wrap=True)
    invocation = result.summary.judge or {}
    for model, u in (result.summary.judge_results or {}).items():
        now = invocation.get(model) or {}
        if (u["calls"], u["input_tokens"]) == (now.get("calls"), now.get("input_tokens")):
            continue  # every call behind the results was made now: the line above says it all
        cost = f", ${u['cost_usd']:.4f}" if u.get("cost_usd") is not None else ""
        console.print(f"judge {model} behind these results: {u['calls']} calls, tokens in/out {u['input_tokens']}/"
                      f"{u['output_tokens']}{_reasoning(u)}{cost} (all invocations)",
                      highlight=False)
    if result.comparison is not None:
        for part in compare_renderables(result.comparison):
            console.print(part)
    if per_item:
        console.print(per_item_table(result))


def agent_lines(summary: RunSummary) -> list[str]:
    """An agent run's limits, then per model its rollouts: turns and tool calls each, tool errors, how they ended."""
    tools = summary.tools
    if not tools:
        return []

    def limit(value: object, unit: str = "") -> str:
        return "none" if value is None else f"{value}{unit}"

    names = " and ".join(str(tools[k]) for k in ("python", "endpoints") if tools.get(k) is not None)
    lines = [f"agent run: tools {names}; limits: max turns {tools.get('max_turns')}, max tool calls "
             f"{limit(tools.get('max_tool_calls'))}, rollout timeout {limit(tools.get('rollout_timeout'), ' s')}, "
             f"tool timeout {tools.get('tool_timeout')} s, tool memory {limit(tools.get('tool_memory'), ' MB')}, "
             f"tool output limit {tools.get('tool_output_limit')} characters"
             + (f", endpoint call timeout {tools.get('endpoint_timeout')} s" if "endpoints" in tools else "")]
    for label, m in summary.models.items():
        a = m.agent
        if a is None or not a.rollouts:
            continue
        errors = ", ".join(f"{k} {n}" for k, n in sorted(a.tool_errors.items())) or "none"
        ended = ", ".join(f"{k} {n}" for k, n in sorted(a.stop_reasons.items(), key=lambda kv: -kv[1]))
        lines.append(f"{label}: {a.rollouts} rollouts, {a.turns / a.rollouts:.2f} turns and "
                     f"{a.tool_calls / a.rollouts:.2f} tool calls each; tool errors: {errors}; stopped: {ended}")
    return lines


def plan_table(plan: RunPlan) -> Table:
    """`rfteval run --dry-run`: per model, its cells, what the run directory holds, what would be sent, the input
    tokens estimated and the output and cost ceilings."""
    items = f"first {plan.items} of {plan.dataset_items}" if plan.items < plan.dataset_items else str(plan.items)
    models = f"{len(plan.models)} model{'s' if len(plan.models) > 1 else ''}"
    table = house_table(f"dry run: {models} x {items} items x {plan.epochs} epochs = {plan.cells} cells; nothing sent, "
                        "nothing written")
    for name in ("model", "cells", "stored", "to send", "input tokens (est.)", "output ceiling", "cost ceiling"):
        table.add_column(name, justify="left" if name == "model" else "right", overflow="fold",
                         ratio=1 if name == "model" else None)
    for m in plan.models:
        if m.replayed:
            table.add_row(f"{m.label} ({m.model})", str(m.cells), str(m.stored), "replayed", "—", "—", "—")
            continue
        ceiling = m.output_ceiling
        table.add_row(f"{m.label} ({m.model})", str(m.cells), str(m.stored), str(m.to_send), fmt_tokens(m.input_tokens),
                      "none" if ceiling is None else fmt_tokens(ceiling),
                      fmt_cost(m.cost_usd) if m.to_send else "—")
    return table


def plan_lines(plan: RunPlan) -> list[str]:
    """What the table cannot say: the resume, the judge calls, how tokens were counted, the cost in one figure."""
    from rfteval.run.plan import NO_CEILING, NO_PRICE

    lines = []
    if plan.fresh:
        lines.append(f"--fresh: whatever {plan.out_dir} holds would be discarded first")
    elif plan.resume:
        lines.append(f"a resume: {plan.out_dir} holds {plan.stored} of the {plan.cells} cells, kept and not sent again")
    if plan.max_turns is not None:
        lines.append(f"requests to send: {plan.to_send} rollouts of at most {plan.max_turns} model turns each "
                     "(--max-turns): the output and cost ceilings count every turn, the input estimate first turns "
                     "only (later turns carry the history)")
    else:
        lines.append(f"requests to send: {plan.to_send}" + (" through the Batch API (batch prices)" if plan.batch and
                                                             plan.to_send else ""))
    if plan.judge is not None:
        j = plan.judge
        capped = f", --max-judge-calls {j.max_calls}" if j.max_calls is not None else ""
        lines.append(f"judge calls: at most {j.calls} for {j.samples} samples to grade ({'; '.join(j.how)}{capped}; "
                     "the judge cache answers repeats for free)")
    lines.append(f"input tokens: ~{plan.input_tokens:,}, estimated as {plan.tokens_method}")
    out = plan.output_ceiling
    lines.append("output tokens: " + (f"at most {out:,} (max_output_tokens x requests)" if out is not None else
                                      "no ceiling: set max_output_tokens"))
    if plan.cost_usd is not None:
        cost = f"cost ceiling: {fmt_cost(plan.cost_usd)} for the models"
    else:
        unpriced = [m.model for m in plan.models if m.to_send and m.no_cost == NO_PRICE]
        reasons = [f"no price for {', '.join(unpriced)}: the spec's [pricing] table sets one"] if unpriced else []
        if any(m.to_send and m.no_cost == NO_CEILING for m in plan.models):
            reasons.append("no output ceiling: set max_output_tokens")
        cost = f"cost ceiling: not known ({'; '.join(reasons)})"
    if plan.judge is not None:
        cost += (f", and at most {fmt_cost(plan.judge.max_cost_usd)} for the judge (--max-judge-cost, plus the calls "
                 "in flight when it is reached)" if plan.judge.max_cost_usd is not None else
                 "; the judge's is not estimated (its prompts hold outputs not generated yet): --max-judge-calls or "
                 "--max-judge-cost caps it")
    lines.append(cost)
    return lines


def print_plan(plan: RunPlan, console: Console) -> None:
    console.print(plan_table(plan))
    for line in plan_lines(plan):
        console.print(line, highlight=False, markup=False)
