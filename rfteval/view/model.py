"""What the viewer's pages show, as JSON-ready values: built by the library code `compare` uses, never again here.

Every number on a page comes from `compare_paths` (the same call `rfteval compare` makes, on the same files,
labels and dataset), `compare.series`, `compare.agree` or `readiness.assessment`; this module only selects rows
(filters, search, paging) and joins the samples of an item (rfteval.compare.samples). A comparison is computed
once per pair of labels and kept; the outputs stay in their files until an item or a search asks for them.

Every figure a page prints travels beside its number as the text the terminal prints for it (`shown`, made by
rfteval.report's formats and agree's own lines), and every colour as the verdict word of the one verdict rule
(stats.direction): the page shows these strings and computes no format of its own.

An agent run's records (`rfteval run --tools`) carry a rollout each: its sample shows the trajectory, turn by turn
(rfteval.view.sample_card), each tool result cut at RESULT_CHARS with the rest served on demand, and the Compare page's rows
each side's turns, tool calls, tool errors and stop reasons, sorted and filtered by them: compare's own per-item
figures (rfteval.compare.agent, in CompareResult.items when both sides are agent runs, as `rfteval compare` then
prints its agent table), beside which a row lists its stop reasons and tool error types. Records without those
fields make exactly the pages they made before.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from rfteval.compare.result import CompareOptions, CompareResult
from rfteval.compare.samples import SampleSource, source_file, tool_result
from rfteval.data import rundir
from rfteval.data.frame import read_labels
from rfteval.data.records import json_safe
from rfteval.errors import InputError
from rfteval.view.item_columns import add_rollout_columns, drop_check, epoch_wtl, lowest_quarter, rollout_tallies
from rfteval.view.regraded import same_samples_regraded
from rfteval.view.run_info import run_info
from rfteval.view.sample_card import sample_card
from rfteval.view.shown import agree_shown, item_row, pair_shown, side_shown
from rfteval.view.sources import find_sources

if TYPE_CHECKING:
    import pandas as pd

    from rfteval.compare.agree import AgreeOptions, AgreeResult
    from rfteval.data.dataset import Item
    from rfteval.data.json_types import JSONObject, JSONValue

FILTERS = ("regressed", "improved", "ties", "significant", "hardest", "errors", "truncated", "judged")
# an agent pair's filters (offered only when a side's records carry rollouts): the candidate's per-item mean of
# turns / tool calls above or below the baseline's, and a tool error on either side
AGENT_FILTERS = ("more_turns", "fewer_turns", "more_calls", "fewer_calls", "tool_errors")
# an agent pair's orders besides the comparison's (lowest delta first): a column of the table, "-" for the largest
# first; an item without the value goes last, ties keep the comparison's order
SORTS = ("-d_turns", "d_turns", "-d_tool_calls", "d_tool_calls", "-tool_errors")
PAGE_SIZE = 100
MAX_PAGE = 1000
Page = dict[str, object]  # a page's JSON: built of JSON values (json_safe), checked by the encoder that sends it
LEFT_OUT = ("not checked here: answer skew (how often the model gives one answer), which reads every output text; "
            "`rfteval readiness` checks it")
BIDI = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"


@dataclass(frozen=True)
class ViewOptions:
    """What `rfteval view` was given besides the record paths."""

    dataset: Path | None = None
    by: tuple[str, ...] = ()
    agree: tuple[Path, Path] | None = None
    compare: CompareOptions = field(default_factory=CompareOptions)
    agree_options: AgreeOptions | None = None  # `rfteval agree`'s (pass threshold, gate); None: its defaults



class ViewData:
    """The viewer's data: the sources, each pair's comparison (computed once), the dataset, the pages' JSON."""

    def __init__(self, paths: Sequence[Path], options: ViewOptions | None = None) -> None:
        self.options = options or ViewOptions()
        self.sources = {s.label: s for s in find_sources(paths)}
        self.paths = [Path(p) for p in paths]
        self._graded_pairs: list[tuple[Path, Path]] | None = None
        self.labels = list(self.sources)
        self._lock = threading.Lock()
        self._dataset_lock = threading.Lock()
        self._compute = threading.Lock()
        self._results: dict[tuple[str, str], CompareResult] = {}
        self._tables: dict[tuple[str, str], pd.DataFrame] = {}
        self._filtered: dict[tuple[object, ...], list[str]] = {}
        self._summaries: dict[tuple[str, str, str], tuple[JSONObject, list[JSONObject]]] = {}
        self._dataset_path = self.options.dataset or self._spec_dataset()
        self._dataset: dict[str, Item] | None = None
        self._dataset_text: tuple[list[str], object] | None = None
        self._agree: dict[tuple[Path, Path], AgreeResult] = {}
        self._rollouts: dict[str, pd.DataFrame | None] = {}

    # ------------------------------------------------------------------ inputs

    def _spec_dataset(self) -> Path | None:
        """The dataset named by a run directory's spec (spec.resolved.toml), as readiness finds it."""
        for s in self.sources.values():
            if s.run_dir is not None:
                found, _ = rundir.spec_paths(s.run_dir)
                if found is not None:
                    return found
        return None

    @property
    def default_pair(self) -> tuple[str, str]:
        """The pair `rfteval compare` picks: the baseline (`base`, else the first), then the first other label."""
        base = rundir.baseline_label(self.labels)
        others = [label for label in self.labels if label != base]
        return base, (others[0] if others else base)

    def pair(self, a: str | None, b: str | None) -> tuple[str, str]:
        da, db = self.default_pair
        a, b = a or da, b or (db if (a or da) != db else da)
        for name, value in (("a", a), ("b", b)):
            if value not in self.sources:
                raise InputError(f"no model {value!r} here (models: {', '.join(self.labels)})", field=name)
        return a, b

    def dataset(self) -> dict[str, Item]:
        """The dataset's items by id (read once; {} without a dataset)."""
        with self._dataset_lock:  # its own lock: reading a large dataset must not hold up the other pages
            if self._dataset is None:
                if self._dataset_path is None:
                    self._dataset = {}
                else:
                    from rfteval.data.dataset import load_dataset

                    self._dataset = load_dataset(self._dataset_path, skip_invalid=True).by_id()
            return self._dataset

    def warm(self) -> None:
        """Read what later pages need (the dataset, the output texts) ahead of them: run on a thread after open."""
        self.dataset()
        for s in self.sources.values():
            s.samples.load_texts()

    # ------------------------------------------------------------------ comparisons

    def comparison(self, a: str, b: str) -> CompareResult:
        """`rfteval compare` on the two labels' records: the same call, files, labels and dataset."""
        key = (a, b)
        with self._compute:  # one comparison at a time: two pages asking at once compute it once (memory)
            with self._lock:
                found = self._results.get(key)
            if found is not None:
                return found
            return self._compare(a, b)

    def _compare(self, a: str, b: str) -> CompareResult:
        from rfteval.compare.paths import compare_paths

        key = (a, b)
        sa, sb = self.sources[a], self.sources[b]
        o = self.options.compare
        if self.options.by:
            from dataclasses import replace

            o = replace(o, by=self.options.by)
        result = compare_paths(sa.path, sb.path, (sa.model_label or a, sb.model_label or b), o,
                               self._dataset_path if o.by else None)
        with self._lock:
            self._results[key] = result
        return result

    def table(self, a: str, b: str) -> pd.DataFrame:
        """The comparison's items (its own rows and order) with what the filters read: W/T/L over epoch pairs,
        the gate's per-item drop test after Holm, the lowest-quarter membership, slice values, flags."""
        import numpy as np

        key = (a, b)
        with self._lock:
            found = self._tables.get(key)
        if found is not None:
            return found
        result = self.comparison(a, b)
        items = result.items.copy()
        ids = items["item_id"].to_numpy()
        wins, ties, losses = epoch_wtl(result, ids)
        items["epoch_wins"], items["epoch_ties"], items["epoch_losses"] = wins, ties, losses
        check = drop_check(result)
        p = check.get("p_adjusted") or {}
        items["drop_p_adjusted"] = [p.get(i, np.nan) for i in ids]
        items["significant"] = items["item_id"].isin(set(check.get("flagged") or []))
        items["hardest"] = lowest_quarter(result)
        if "delta_turns" in items:  # both sides agent runs: compare's per-item figures are in its table
            add_rollout_columns(items, self.rollouts(a), self.rollouts(b))
        with self._lock:
            self._tables[key] = items
            self._drop_warning = check.get("warning")
        return items

    def rollouts(self, label: str) -> pd.DataFrame | None:
        """Per item of one model, over its epochs: how its rollouts stopped (counts by stop reason) and its tool
        errors by type; None for records without rollouts. The numbers beside them (mean turns and tool calls, tool
        errors, their deltas) are compare's; these tallies, which compare does not list per item, come from the
        same records read as compare reads them (the record frame: a cell held twice counts its later record, a
        generation failure played no rollout), never from a transcript."""
        with self._lock:
            if label in self._rollouts:
                return self._rollouts[label]
        s = self.sources[label]
        found = None
        if s.agent:
            from rfteval.compare.sides import load_side

            found = rollout_tallies(load_side(s.path, s.model_label or label).frame)
        with self._lock:
            self._rollouts[label] = found
        return found

    def _truncated(self, label: str) -> set[str]:
        return self.sources[label].samples.truncated_items()

    def slice_values(self) -> dict[str, dict[str, str]]:
        if not self.options.by or self._dataset_path is None:
            return {}
        from rfteval.compare.comparison import field_value

        data = self.dataset()
        return {name: {i: field_value(it.data, name) for i, it in data.items()} for name in self.options.by}

    def filtered(self, a: str, b: str, filters: Sequence[str] = (), q: str = "",
                 slice_: str | None = None, stop: str | None = None, sort: str = "") -> list[str]:
        """The item ids of a filter and search, in the comparison's order (lowest delta first), or in an agent
        pair's `sort` (SORTS); `stop`: the items one of whose rollouts, on either side, stopped for that reason."""
        for f in filters:
            if f not in FILTERS + AGENT_FILTERS:
                raise InputError(f"unknown filter {f!r} (filters: {', '.join(FILTERS + AGENT_FILTERS)})",
                                 field="filter")
        if sort and sort not in SORTS:
            raise InputError(f"unknown order {sort!r} (orders: {', '.join(SORTS)})", field="sort")
        key = (a, b, tuple(filters), q, slice_, stop or None, sort)
        with self._lock:
            found = self._filtered.get(key)
        if found is not None:
            return found
        t = self.table(a, b)
        tie = self.comparison(a, b).options.tie
        import numpy as np

        mask = np.ones(len(t), dtype=bool)
        d = t["delta"].to_numpy()
        rules = {
            "regressed": lambda: d < -tie, "improved": lambda: d > tie, "ties": lambda: np.abs(d) <= tie,
            "significant": lambda: t["significant"].to_numpy(), "hardest": lambda: t["hardest"].to_numpy(),
            "errors": lambda: (t["baseline_errors"] + t["candidate_errors"]).to_numpy() > 0,
            "truncated": lambda: t["item_id"].isin(self._truncated(a) | self._truncated(b)).to_numpy(),
            "judged": lambda: t["item_id"].isin(self.sources[a].samples.judged_items()
                                                | self.sources[b].samples.judged_items()).to_numpy(),
        }
        agent = "d_turns" in t

        def column(name: str, sign: float = 1.0) -> np.ndarray:  # NaN (a side without rollouts) passes no filter
            return sign * t[name].to_numpy(np.float64) > 1e-9 if agent else np.zeros(len(t), dtype=bool)

        rules.update({"more_turns": lambda: column("d_turns"), "fewer_turns": lambda: column("d_turns", -1),
                      "more_calls": lambda: column("d_tool_calls"), "fewer_calls": lambda: column("d_tool_calls", -1),
                      "tool_errors": lambda: column("tool_errors")})
        for f in filters:
            mask &= rules[f]()
        if stop:
            mask &= np.array([stop in sa or stop in sb for sa, sb in zip(t["baseline_stop_reasons"],
                                                                        t["candidate_stop_reasons"])], dtype=bool) \
                if agent else np.zeros(len(t), dtype=bool)
        if slice_:
            name, _, value = slice_.partition("=")
            values = self.slice_values().get(name)
            if values is None:
                raise InputError(f"no --by field {name!r} (fields: {', '.join(self.options.by) or 'none'})",
                                 field="slice")
            mask &= np.array([values.get(i, "(not in dataset)") == value for i in t["item_id"]], dtype=bool)
        if q:
            hits = self.search(a, b, q)
            mask &= t["item_id"].isin(hits).to_numpy()
        out = t["item_id"][mask].tolist()
        if sort and agent:
            values = t[sort.lstrip("-")].to_numpy(np.float64)[mask] * (-1 if sort.startswith("-") else 1)
            out = [out[i] for i in np.argsort(values, kind="stable").tolist()]  # NaN (no value) last
        with self._lock:
            self._filtered[key] = out
            while len(self._filtered) > 64:
                self._filtered.pop(next(iter(self._filtered)))
        return out

    def search(self, a: str, b: str, q: str) -> set[str]:
        """Items whose prompt, reference or other fields, or either model's outputs, hold `q` (any case)."""
        import numpy as np
        import pyarrow.compute as pc

        hits = self.sources[a].samples.matching(q) | self.sources[b].samples.matching(q)
        ids, texts = self._item_texts()
        if ids:
            found = np.asarray(pc.fill_null(pc.match_substring(texts, q, ignore_case=True), False)
                               .to_numpy(zero_copy_only=False), dtype=bool)
            hits |= {ids[i] for i in np.flatnonzero(found).tolist()}
        return hits

    def _item_texts(self) -> tuple[list[str], object]:

        import pyarrow as pa

        with self._lock:
            if self._dataset_text is not None:
                return self._dataset_text
        data = self.dataset()
        ids = list(data)
        texts = pa.array([json.dumps(data[i].data, ensure_ascii=False) for i in ids], pa.string())
        with self._lock:
            self._dataset_text = (ids, texts)
        return ids, texts

    # ------------------------------------------------------------------ pages

    def runs_page(self) -> Page:
        """Runs: each model's side of its comparison with the baseline, pass@k, errors, truncation, readiness,
        and each run directory's spec and summary (judge calls, tokens, cost)."""
        base, first = self.default_pair
        models = []
        for label in self.labels:  # the baseline's side from its first comparison: no compare of it with itself
            result = self.comparison(base, label if label != base else first)
            side = result.candidate if label != base else result.baseline
            pass_k = result.pass_k
            row: Page = {"label": label, "side": json_safe(side), "file": str(self.sources[label].file)}
            if pass_k is not None:
                one, top = pass_k["pass_at_1"], pass_k["pass_at_n"]
                side_of = (lambda r: r["candidate"]) if label != base else (lambda r: r["baseline"])
                row["pass_k"] = json_safe({"n": pass_k["n"], "pass_at_1": side_of(one)["mean"],
                                           "pass_at_n": side_of(top)["mean"]})
            if label != base:
                row["delta"] = json_safe(result.delta)
                row["gate"] = json_safe(result.gate)
            row["shown"] = side_shown(side, row.get("pass_k"), result.delta if label != base else None)
            models.append(row)
        runs = []
        for run_dir in dict.fromkeys(s.run_dir for s in self.sources.values() if s.run_dir is not None):
            runs.append(run_info(run_dir))
        return {"page": "runs", "labels": self.labels, "baseline": base, "models": models, "runs": runs,
                "readiness": self._readiness_brief(base), "dataset": str(self._dataset_path or ""),
                "agree": self.options.agree is not None,
                "agree_links": [{"a": str(x), "b": str(y)} for x, y in self.agree_pairs()],
                "series": [str(d) for d in dict.fromkeys(s.run_dir for s in self.sources.values() if s.run_dir is not None
                                                         and s.path == s.run_dir)][:1] if len(self.labels) > 1 else []}

    def _readiness_brief(self, label: str) -> JSONValue:
        from rfteval.baseline_readiness import baseline_readiness

        a, b = self.default_pair
        try:
            found = baseline_readiness(self.comparison(a, b), self._dataset_path)
        except UnicodeEncodeError as exc:  # readiness's record reader refuses text that is not Unicode (a lone surrogate)
            return {"verdict": None, "why": f"readiness could not read the records ({exc.reason})"}
        if found is None:
            return {"verdict": None, "why": "fewer than 2 epochs per item"}
        if found.report is None:
            return {"verdict": None, "why": found.failed or f"{found.skipped_records} records: open the Readiness "
                                                            "page to assess them"}
        from rfteval.report.readiness_render import VERDICT_TEXT

        # the verdict's word as `rfteval readiness` prints it (NOT READY), beside its key (not_ready)
        return {"verdict": found.report.verdict, "shown": VERDICT_TEXT[found.report.verdict],
                "reasons": [c.message for c in found.report.reasons]}

    def _summary(self, a: str, b: str) -> tuple[JSONObject, list[JSONObject]]:
        """The pair's `compare --format json` without its items, and the summary table's rows (computed once)."""
        from rfteval.report.terminal import summary_rows, verdict

        key = ("summary", a, b)
        with self._lock:
            found = self._summaries.get(key)
        if found is not None:
            return found
        result = self.comparison(a, b)
        rows: list[JSONObject] = [{"name": name, **json_safe(dict(row)), "verdict": verdict(row["delta"]),
                                   "shown": pair_shown(row)} for name, row in summary_rows(result)]
        out = (result.to_json(items=False), rows)
        with self._lock:
            self._summaries[key] = out
        return out

    def compare_page(self, a: str | None, b: str | None, filters: Sequence[str] = (), q: str = "",
                     slice_: str | None = None, offset: int = 0, limit: int = PAGE_SIZE, stop: str | None = None,
                     sort: str = "") -> Page:
        """Compare: the summary (compare's JSON), then one page of the filtered items, lowest delta first (an agent
        pair: or in `sort`'s order)."""
        a, b = self.pair(a, b)
        ids = self.filtered(a, b, filters, q, slice_, stop, sort)
        limit = max(1, min(int(limit), MAX_PAGE))
        offset = max(0, int(offset))
        page_ids = ids[offset:offset + limit]
        t = self.table(a, b).set_index("item_id", drop=False)
        rows = t.loc[page_ids] if page_ids else t.iloc[:0]
        by = self.slice_values()
        full, summary = self._summary(a, b)
        agent: Page = {}
        if "d_turns" in t:  # an agent pair: what its rows add, and the choices its filters offer
            reasons = {r for col in ("baseline_stop_reasons", "candidate_stop_reasons") for d in t[col] for r in d}
            agent = {"agent": {"stop_reasons": sorted(reasons), "filters": list(AGENT_FILTERS), "sorts": list(SORTS)},
                     "stop": stop or "", "sort": sort}
        return {
            **agent,
            "page": "compare", "a": a, "b": b, "labels": self.labels, "filters": list(filters), "q": q,
            "slice": slice_ or "", "offset": offset, "limit": limit, "total": len(ids), "all_items": len(t),
            "result": full, "summary": summary, "by": {k: sorted(set(v.values())) for k, v in by.items()},
            "item_test": {"warning": getattr(self, "_drop_warning", None),
                          "rule": "one-sided drop test over each item's epochs, Holm across every paired item "
                                  "(compare's --max-item-drop test)"},
            "items": [item_row(r, by, self.comparison(a, b).options.tie) for r in rows.to_dict("records")],
        }

    def item_page(self, item_id: str, a: str | None, b: str | None, filters: Sequence[str] = (), q: str = "",
                  slice_: str | None = None, stop: str | None = None, sort: str = "") -> Page:
        """Item: the prompt and the fields the grader sees, the comparison's row, each epoch's two samples (an
        agent's: its trajectory), and the previous and next items of the current filter and order."""
        a, b = self.pair(a, b)
        t = self.table(a, b)
        rows = t[t["item_id"] == item_id]
        ids = self.filtered(a, b, filters, q, slice_, stop, sort)
        try:
            at = ids.index(item_id)
        except ValueError:
            at = -1
        item = self.dataset().get(item_id)
        if rows.empty and item is None and not self.sources[a].samples.records(item_id) \
                and not self.sources[b].samples.records(item_id):
            raise InputError(f"no item {item_id!r} in these records", field="id")
        data: JSONObject | None = dict(item.data) if item is not None else None
        by = self.slice_values()
        return {
            "page": "item", "id": item_id, "a": a, "b": b, "labels": self.labels,
            "row": item_row(rows.to_dict("records")[0], by, self.comparison(a, b).options.tie)
            if not rows.empty else None,
            "item": {"messages": json_safe(data.get("messages")), "tools": json_safe(data.get("tools")),
                     "fields": {k: json_safe(v) for k, v in data.items() if k not in ("messages", "tools")}}
            if data is not None else None,
            "position": at, "total": len(ids),
            "prev": ids[at - 1] if at > 0 else None, "next": ids[at + 1] if 0 <= at < len(ids) - 1 else None,
            "samples": {label: [sample_card(r) for r in self.sources[label].samples.records(item_id)]
                        for label in (a, b)},
        }

    def full_text(self, label: str, item_id: str, epoch: int, name: str) -> str:
        """One whole text of one sample (an item page sends the first MAX_TEXT characters)."""
        if label not in self.sources:
            raise InputError(f"no model {label!r}", field="label")
        for r in self.sources[label].samples.records(item_id):
            if r.get("epoch") == epoch:
                value = r.get(name)
                return value if isinstance(value, str) else ""
        raise InputError(f"no epoch {epoch} of item {item_id!r}", field="epoch")

    def full_result(self, label: str, item_id: str, epoch: int, call: int) -> str:
        """The whole text of one tool result of one sample's rollout (an item page sends its first RESULT_CHARS
        characters): the `call`-th result in the transcript's order, as the page numbers them."""
        if label not in self.sources:
            raise InputError(f"no model {label!r}", field="label")
        record = self.sources[label].samples.record(item_id, epoch)
        if record is None:
            raise InputError(f"no epoch {epoch} of item {item_id!r}", field="epoch")
        text = tool_result(record, call)
        if text is None:
            raise InputError(f"no tool result {call} in this sample's transcript", field="call")
        return text

    def plot(self, a: str | None, b: str | None, name: str) -> str:
        """One of compare --html's plots, drawn by its code (an image: no script can run in it)."""
        from rfteval.report import html

        a, b = self.pair(a, b)
        drawers = {"scatter": html.scatter_svg, "deltas": html.forest_svg, "distributions": html.histogram_svg}
        if name not in drawers:
            raise InputError(f"no plot {name!r}", field="plot")
        return drawers[name](self.comparison(a, b))

    def series_page(self) -> Page:
        """Series: a run directory's baseline against every checkpoint (compare_series), per item too."""
        from rfteval.compare.series import compare_series

        run = next((s.run_dir for s in self.sources.values() if s.run_dir is not None), None)
        if run is None:
            raise InputError("a series needs a run directory with 2 or more models", field="series")
        series = compare_series(run, self.options.compare)
        labels = [series.baseline["label"], *[c.label for c in series.candidates]]
        per_item: dict[str, list[float | None]] = {}
        first = series.candidates[0].result.items if series.candidates else None
        if first is not None:
            for i, v in zip(first["item_id"], first["baseline"]):
                per_item[str(i)] = [float(v)] + [None] * len(series.candidates)
        for k, c in enumerate(series.candidates, 1):
            for i, v in zip(c.result.items["item_id"], c.result.items["candidate"]):
                per_item.setdefault(str(i), [None] * len(labels))[k] = float(v)
        rows = sorted(per_item.items(), key=lambda kv: (min((x for x in kv[1] if x is not None), default=0), kv[0]))
        from rfteval.compare.series import verdict
        from rfteval.report.format import fmt, fmt_ci, fmt_p

        b = series.baseline
        shown: list[JSONObject] = [{"label": b["label"], "mean": fmt(b["mean"]), "ci95": fmt_ci(b["ci95"], sign=False),
                                    "delta": "", "delta_ci95": "", "p": "", "verdict": "baseline"}]
        for c in series.candidates:  # as `rfteval compare RUN` prints the series: p Holm-adjusted across candidates
            d = c.result.delta
            shown.append({"label": c.label, "mean": fmt(c.result.candidate["mean"]),
                          "ci95": fmt_ci(c.result.candidate["ci95"], sign=False), "delta": fmt(d["mean"], sign=True),
                          "delta_ci95": fmt_ci(d["ci95"]), "p": fmt_p(c.p_adjusted),
                          "verdict": verdict(c, series.options.level)})
        return {"page": "series", "run": str(run), "labels": labels, "series": series.to_json(), "shown": shown,
                "items": [{"item_id": i, "scores": json_safe(v), "shown": [fmt(x) for x in v]}
                          for i, v in rows[:MAX_PAGE]],
                "total": len(rows)}

    def graded_pairs(self) -> list[tuple[Path, Path]]:
        """The pairs of given paths holding the same samples graded by different graders (found once): the Runs
        page links each to its Agree page."""
        with self._lock:
            found = self._graded_pairs
        if found is None:
            found = same_samples_regraded(self.paths)
            with self._lock:
                self._graded_pairs = found
        return found

    def agree_pairs(self) -> list[tuple[Path, Path]]:
        """Every pair an Agree page may open: --agree's, then those found among the paths (nothing else: a URL
        names no file of its own)."""
        return ([self.options.agree] if self.options.agree is not None else []) + self.graded_pairs()

    def agree_page(self, a: str | None = None, b: str | None = None, limit: int = 200) -> Page:
        """Agree: the samples two graders disagree on most, with both graders' details side by side."""
        pairs = self.agree_pairs()
        if not pairs:
            raise InputError("open the viewer with --agree A B, or with two graders' records of the same samples, "
                             "to compare two graders", field="--agree")
        chosen = pairs[0] if a is None and b is None else next(
            (p for p in pairs if (str(p[0]), str(p[1])) == (a, b)), None)
        if chosen is None:
            raise InputError(f"no grader pair {a!r}, {b!r} here (pairs: "
                             f"{'; '.join(f'{x} / {y}' for x, y in pairs)})", field="a")
        from dataclasses import replace

        from rfteval.compare.agree import AgreeOptions, agree_paths

        with self._lock:
            result = self._agree.get(chosen)
        if result is None:
            result = agree_paths(chosen[0], chosen[1], replace(self.options.agree_options or AgreeOptions(), top=limit))
            with self._lock:
                self._agree[chosen] = result
        rows = []
        for row in result.items:
            pair = {}
            for name, path in zip(("a", "b"), chosen):
                file = path if path.is_file() else source_file(path, row["model_label"])
                recs = SampleSource(file, row["model_label"]).records(row["item_id"])
                match = [r for r in recs if r.get("epoch") == row["epoch"]]
                pair[name] = sample_card(match[0]) if match else None
            rows.append({**json_safe(row), "samples": pair})
        summary = result.to_json()
        summary.pop("items", None)
        return {"page": "agree", "summary": summary, "items": rows, "paths": [str(p) for p in chosen],
                "shown": agree_shown(result)}

    def readiness_page(self, label: str | None) -> Page:
        """Readiness of one model's records: `rfteval readiness`'s own call (assess_path, the grader and dataset
        the run's spec names), its zero-signal items and each item's spread."""
        from rfteval.readiness.paths import SIGNAL_COLUMNS, ReadinessRequest, assess_path

        label = label or self.default_pair[0]
        if label not in self.sources:
            raise InputError(f"no model {label!r} here (models: {', '.join(self.labels)})", field="label")
        s = self.sources[label]
        try:
            report = assess_path(ReadinessRequest(s.path, label=s.model_label if s.run_dir == s.path or
                                                  len(read_labels(s.file)) > 1 else None,
                                                  dataset=self.options.dataset, columns=SIGNAL_COLUMNS)).report
        except UnicodeEncodeError as exc:  # readiness's record reader refuses text that is not Unicode
            raise InputError(f"readiness cannot read these records ({exc.reason})", s.file) from None
        from rfteval.report.readiness_render import VERDICT_TEXT

        out = report.to_dict()
        items = sorted(report.items, key=lambda it: (-(it.sd or 0.0), it.item_id))
        out.pop("items", None)
        # the verdict and each check's status in the terminal's words (NOT READY, not ready), not their keys
        shown = {"verdict": VERDICT_TEXT[report.verdict],
                 "statuses": [c.status.replace("_", " ") for c in report.checks]}
        return {"page": "readiness", "label": label, "labels": self.labels, "report": out, "left_out": LEFT_OUT,
                "shown": shown,
                "items": [json_safe({"item_id": it.item_id, "k": it.k, "mean": it.mean, "sd": it.sd,
                                     "kind": it.kind, "grade_errors": it.n_grade_errors}) for it in items[:MAX_PAGE]],
                "total": len(items)}
