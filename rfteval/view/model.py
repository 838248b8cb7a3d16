"""What the viewer's pages show, as JSON-ready values: built by the library code `compare` uses, never again here.

Every number on a page comes from `compare_paths` (the same call `rfteval compare` makes, on the same files,
labels and dataset), `compare.series`, `compare.agree` or `readiness.assessment`; this module only selects rows
(filters, search, paging) and joins the samples of an item (rfteval.compare.samples). A comparison is computed
once per pair of labels and kept; the outputs stay in their files until an item or a search asks for them.

Every figure a page prints travels beside its number as the text the terminal prints for it (`shown`, made by
rfteval.report's formats and agree's own lines), and every colour as the verdict word of the one verdict rule
(stats.direction): the page shows these strings and computes no format of its own.

An agent run's records (`rfteval run --tools`) carry a rollout each: its sample shows the trajectory, turn by turn
(`_trajectory`), each tool result cut at RESULT_CHARS with the rest served on demand, and the Compare page's rows
each side's turns, tool calls, tool errors and stop reasons, sorted and filtered by them: compare's own per-item
figures (rfteval.compare.agent, in CompareResult.items when both sides are agent runs, as `rfteval compare` then
prints its agent table), beside which a row lists its stop reasons and tool error types. Records without those
fields make exactly the pages they made before.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, cast

from rfteval.compare.comparison import CompareOptions, CompareResult
from rfteval.compare.samples import (
    ROLLOUT_FIELDS,
    SampleSource,
    carries_rollouts,
    source_file,
    tool_result,
    transcript_messages,
)
from rfteval.data import rundir
from rfteval.data.frame import read_labels
from rfteval.data.records import json_safe
from rfteval.errors import InputError

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

    from rfteval.compare.agree import AgreeOptions, AgreeResult
    from rfteval.compare.comparison import PairRow, SideReport
    from rfteval.compare.gate_types import GateCheck
    from rfteval.data.dataset import Item
    from rfteval.data.json_types import JSONObject, JSONValue
    from rfteval.run.summary import RunSummary
    from rfteval.stats.paired import PairedDelta

FILTERS = ("regressed", "improved", "ties", "significant", "hardest", "errors", "truncated", "judged")
# an agent pair's filters (offered only when a side's records carry rollouts): the candidate's per-item mean of
# turns / tool calls above or below the baseline's, and a tool error on either side
AGENT_FILTERS = ("more_turns", "fewer_turns", "more_calls", "fewer_calls", "tool_errors")
# an agent pair's orders besides the comparison's (lowest delta first): a column of the table, "-" for the largest
# first; an item without the value goes last, ties keep the comparison's order
SORTS = ("-d_turns", "d_turns", "-d_tool_calls", "d_tool_calls", "-tool_errors")
RESULT_CHARS = 2_000  # characters of one tool result an item page sends; the rest on request (/api/result)
# a failed call's content, as the rollout writes it (rfteval.tools.base.error_result): "error: <Type>: <message>"
TOOL_ERROR = re.compile(r"error: ([A-Za-z_][A-Za-z0-9_.]*):")
PAGE_SIZE = 100
MAX_PAGE = 1000
Page = dict[str, object]  # a page's JSON: built of JSON values (json_safe), checked by the encoder that sends it
MAX_TEXT = 100_000  # characters of one text sent with an item page; the rest on request (/api/text)
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


@dataclass
class Source:
    """One model's records: its label on the pages, the file compare reads them from, and the PATH given."""

    label: str
    path: Path  # what compare is given (a run directory or a record file)
    model_label: str | None  # the label compare filters on (--label)
    file: Path
    run_dir: Path | None
    given: Path | None = None  # the PATH on the command line (a run directory read through its results.parquet)

    _made: SampleSource | None = None
    _agent: bool | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def agent(self) -> bool:
        """Whether the records are an agent run's (carry rollouts): looked up once, without reading the records."""
        with self._lock:
            if self._agent is None:
                self._agent = carries_rollouts(self.file)
            return self._agent

    @property
    def samples(self) -> SampleSource:
        """The records' index, built once on first use (the viewer's warm-up thread, or the first page asking)."""
        with self._lock:
            if self._made is None:
                self._made = SampleSource(self.file, self.model_label)
            return self._made


def find_sources(paths: Sequence[Path]) -> list[Source]:
    """Every model in the paths: a run directory's labels (spec order), a record file's model labels."""
    out: list[Source] = []
    for path in paths:
        path = Path(path)
        if not path.exists():
            raise InputError("no such file or directory", path)
        if path.is_dir():
            labels = rundir.run_labels(path)
            parquet = path / rundir.RESULTS
            if not labels and parquet.is_file():
                labels = read_labels(parquet)
            if not labels:
                raise InputError("no record files (*.jsonl or results.parquet) in this directory", path)
            files = {label: source_file(path, label) for label in labels}
            if parquet.is_file() and all(f == parquet or (f.stat().st_mtime_ns <= parquet.stat().st_mtime_ns and
                                                          label in read_labels(parquet)) for label, f in files.items()):
                # `rfteval run` writes DIR/<label>.jsonl and results.parquet from the same store, in that order: the
                # same records, and compare reads a few Parquet columns about 3x faster than it parses the JSONL
                # (bench/README.md); a JSONL file newer than the Parquet (edited by hand) is read instead
                files = dict.fromkeys(labels, parquet)
            out += [Source(label, files[label] if files[label] == parquet else path, label, files[label], path, path)
                    for label in labels]
        else:
            labels = read_labels(path) or [path.stem]
            for label in labels:
                out.append(Source(label, path, label, path, path.parent if (path.parent / rundir.RESOLVED_SPEC)
                                  .is_file() else None))
    seen: dict[str, int] = {}
    for s in out:  # the same label from two runs: name each by its directory too
        seen[s.label] = seen.get(s.label, 0) + 1
    for s in out:
        if seen[s.label] > 1:
            s.label = f"{(s.run_dir or s.path.parent).name}/{s.label}"
    if len({s.label for s in out}) < len(out):
        raise InputError("two record sources have the same label and directory; give each once", out[0].path)
    return out


def _text(value: object, limit: int = MAX_TEXT) -> JSONValue:
    """A text for the page: cut at `limit` characters (the page says how many more and links to the rest)."""
    if not isinstance(value, str):
        return json_safe(value)
    if len(value) <= limit:
        return value
    return {"text": value[:limit], "omitted": len(value) - limit}


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
        wins, ties, losses = _epoch_wtl(result, ids)
        items["epoch_wins"], items["epoch_ties"], items["epoch_losses"] = wins, ties, losses
        check = _drop_check(result)
        p = check.get("p_adjusted") or {}
        items["drop_p_adjusted"] = [p.get(i, np.nan) for i in ids]
        items["significant"] = items["item_id"].isin(set(check.get("flagged") or []))
        items["hardest"] = _lowest_quarter(result)
        if "delta_turns" in items:  # both sides agent runs: compare's per-item figures are in its table
            _add_rollout_columns(items, self.rollouts(a), self.rollouts(b))
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

            found = _rollout_tallies(load_side(s.path, s.model_label or label).frame)
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
        import json

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
            row["shown"] = _side_shown(side, row.get("pass_k"), result.delta if label != base else None)
            models.append(row)
        runs = []
        for run_dir in dict.fromkeys(s.run_dir for s in self.sources.values() if s.run_dir is not None):
            runs.append(_run_info(run_dir))
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
                                   "shown": _pair_shown(row)} for name, row in summary_rows(result)]
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
            "items": [_item_row(r, by, self.comparison(a, b).options.tie) for r in rows.to_dict("records")],
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
            "row": _item_row(rows.to_dict("records")[0], by, self.comparison(a, b).options.tie)
            if not rows.empty else None,
            "item": {"messages": json_safe(data.get("messages")), "tools": json_safe(data.get("tools")),
                     "fields": {k: json_safe(v) for k, v in data.items() if k not in ("messages", "tools")}}
            if data is not None else None,
            "position": at, "total": len(ids),
            "prev": ids[at - 1] if at > 0 else None, "next": ids[at + 1] if 0 <= at < len(ids) - 1 else None,
            "samples": {label: [_sample(r) for r in self.sources[label].samples.records(item_id)]
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
                pair[name] = _sample(match[0]) if match else None
            rows.append({**json_safe(row), "samples": pair})
        summary = result.to_json()
        summary.pop("items", None)
        return {"page": "agree", "summary": summary, "items": rows, "paths": [str(p) for p in chosen],
                "shown": _agree_shown(result)}

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


def _item_row(r: dict[str, object], by: dict[str, dict[str, str]], tie: float) -> JSONObject:
    """One row of the Compare page: compare's `items_json` fields, plus what the filters read, and the row as
    compare's per-item table prints it (coloured as it colours an item: a change beyond --tie, no test)."""
    from rfteval.report.format import fmt, fmt_ci, fmt_p

    item_id = str(r["item_id"])
    delta = _float(r["delta"])
    shown: JSONObject = {
        "baseline": fmt(_float(r["baseline"])), "candidate": fmt(_float(r["candidate"])), "delta": fmt(delta, sign=True),
        "delta_ci95": fmt_ci([_float(r["delta_lo"]), _float(r["delta_hi"])]), "drop_p": fmt_p(_float(r["drop_p_adjusted"])),
        "tone": "" if delta is None or abs(delta) <= tie else ("up" if delta > 0 else "down")}
    return {"shown": shown, **json_safe({
        "item_id": item_id, "baseline": r["baseline"], "candidate": r["candidate"], "delta": r["delta"],
        "delta_ci95": [r["delta_lo"], r["delta_hi"]], "baseline_epochs": r["baseline_n"],
        "candidate_epochs": r["candidate_n"], "baseline_errors": r["baseline_errors"],
        "candidate_errors": r["candidate_errors"], "baseline_error": r.get("baseline_error"),
        "candidate_error": r.get("candidate_error"),
        "wtl": [r["epoch_wins"], r["epoch_ties"], r["epoch_losses"]], "drop_p_adjusted": r["drop_p_adjusted"],
        "significant": bool(r["significant"]), "hardest": bool(r["hardest"]),
        "slices": {name: values.get(item_id, "(not in dataset)") for name, values in by.items()},
    }), **({"rollout": _rollout_row(r)} if "d_turns" in r else {})}


def _rollout_tallies(frame: pd.DataFrame) -> pd.DataFrame:
    """Per item of one model's record frame (indexed by item_id): `stop_reasons`, how many of its rollouts stopped
    for each reason, and `tool_error_types`, its tool errors by type. A rollout is a record with turns or a stop
    reason that is no generation failure, as compare's agent figures count them (rfteval.compare.agent)."""
    import numpy as np
    import pandas as pd

    from rfteval.data.frame import TOOL_ERROR

    stops: dict[str, dict[str, int]] = {}
    types: dict[str, dict[str, int]] = {}
    ids: list[str] = []
    if "turns" in frame and "stop_reason" in frame:
        has = (frame["turns"].notna() | frame["stop_reason"].notna()) & ~frame["is_generation_failure"]
        rows = frame.loc[has.to_numpy()]
        ids = [str(i) for i in pd.unique(rows["item_id"])]
        for (item, reason), n in rows.groupby(["item_id", "stop_reason"], observed=True, sort=False).size().items():
            stops.setdefault(str(item), {})[str(reason)] = int(n)
        columns = sorted(str(c) for c in frame.columns if str(c).startswith(TOOL_ERROR))
        if columns:
            sums = rows.groupby("item_id", sort=False)[columns].sum()
            for item, counts in zip(sums.index, sums.to_numpy(np.float64)):
                types[str(item)] = {name[len(TOOL_ERROR):]: int(n) for name, n in zip(columns, counts) if n}
    return pd.DataFrame({"stop_reasons": [stops.get(i, {}) for i in ids],
                         "tool_error_types": [types.get(i, {}) for i in ids]}, index=pd.Index(ids, name="item_id"))


def _add_rollout_columns(items: pd.DataFrame, base: pd.DataFrame | None, cand: pd.DataFrame | None) -> None:
    """The comparison's items, which hold compare's per-item agent figures (rfteval.compare.agent.ITEM_COLUMNS:
    each side's mean turns and tool calls, its tool errors, the candidate's minus the baseline's), with what the
    pages read beside them: each side's stop reasons and tool error types (rollouts), the deltas under the names
    the page's orders use (d_turns, d_tool_calls) and the tool errors of both sides together (a sort by errors)."""
    ids = items["item_id"]
    for side, found in (("baseline", base), ("candidate", cand)):
        for name in ("stop_reasons", "tool_error_types"):
            column = found[name].to_dict() if found is not None else {}
            items[f"{side}_{name}"] = [column.get(i, {}) for i in ids]
    items["d_turns"], items["d_tool_calls"] = items["delta_turns"], items["delta_tool_calls"]
    items["tool_errors"] = items["baseline_tool_errors"].fillna(0) + items["candidate_tool_errors"].fillna(0)


def _rollout_row(r: Mapping[str, object]) -> JSONObject:
    """An agent pair's part of a Compare row: each side's per-item figures, the differences, and the text of each
    (as a turn count reads: two places)."""
    from rfteval.report.format import fmt

    def side(name: str) -> JSONObject:
        return json_safe({"turns": r[f"{name}_turns"], "tool_calls": r[f"{name}_tool_calls"],
                          "tool_errors": r[f"{name}_tool_errors"], "tool_error_types": r[f"{name}_tool_error_types"],
                          "stop_reasons": r[f"{name}_stop_reasons"]})

    def reasons(counts: object) -> str:
        return ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) if isinstance(counts, dict) and counts \
            else "—"

    def errors(name: str) -> str:
        total, kinds = _float(r[f"{name}_tool_errors"]), r[f"{name}_tool_error_types"]
        if total is None:
            return "—"
        listed = ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())) if isinstance(kinds, dict) else ""
        return f"{total:.0f}" + (f" ({listed})" if total and listed else "")

    return {"baseline": side("baseline"), "candidate": side("candidate"), **json_safe(
        {"d_turns": r["d_turns"], "d_tool_calls": r["d_tool_calls"]}),
        "shown": {"turns": f"{fmt(_float(r['baseline_turns']), 2)} → {fmt(_float(r['candidate_turns']), 2)}",
                  "d_turns": fmt(_float(r["d_turns"]), 2, sign=True),
                  "tool_calls": f"{fmt(_float(r['baseline_tool_calls']), 2)} → "
                                f"{fmt(_float(r['candidate_tool_calls']), 2)}",
                  "d_tool_calls": fmt(_float(r["d_tool_calls"]), 2, sign=True),
                  "stop_reasons": [reasons(r["baseline_stop_reasons"]), reasons(r["candidate_stop_reasons"])],
                  "tool_errors": [errors("baseline"), errors("candidate")]}}


def _float(value: object) -> float | None:
    """A number of a frame's row as a float (None for a missing one), for the formats."""
    import math

    try:
        x = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def _pair_shown(row: PairRow) -> JSONObject:
    """A summary row (overall, a slice, a sub-score) as compare's summary table prints it."""
    from rfteval.report.format import fmt, fmt_ci, fmt_p
    from rfteval.report.terminal import shown_p, wtl

    d = row["delta"]
    return {"items": str(row["items"]), "baseline": fmt(row["baseline"]["mean"]),
            "baseline_ci95": fmt_ci(row["baseline"]["ci95"], sign=False), "candidate": fmt(row["candidate"]["mean"]),
            "candidate_ci95": fmt_ci(row["candidate"]["ci95"], sign=False), "delta": fmt(d["mean"], sign=True),
            "delta_ci95": fmt_ci(d["ci95"]), "p": fmt_p(shown_p(d)), "wtl": wtl(d)}


def _side_shown(side: SideReport, pass_k: object, delta: PairedDelta | None) -> JSONObject:
    """A model's row of the Runs page, each figure as compare prints it; the delta's verdict word (stats.direction)
    is what colours it."""
    from rfteval.report.format import fmt, fmt_ci, fmt_p, fmt_share
    from rfteval.report.terminal import shown_p, verdict

    k = pass_k if isinstance(pass_k, dict) else {}
    n = k.get("n")
    out: JSONObject = {
        "mean": fmt(side["mean"]), "ci95": fmt_ci(side["ci95"], sign=False), "items": str(side["items"]),
        "records": str(side["records"]), "pass_at_1": fmt(k["pass_at_1"]) if k else "n/a",
        "pass_at_n": f"{fmt(k['pass_at_n'])} (N={n})" if k else "n/a",
        "generation_errors": f"{side['generation_errors']} ({fmt_share(side['generation_error_share'])})",
        "scored_zero": str(side["scored_zero_errors"]),
        "truncated": f"{side['truncated_in_reasoning']} ({fmt_share(side['truncated_in_reasoning_share'])})",
        "delta": "baseline", "delta_ci95": "", "p": "", "verdict": "baseline"}
    if delta is not None:
        out.update(delta=fmt(delta["mean"], sign=True), delta_ci95=fmt_ci(delta["ci95"]), p=fmt_p(shown_p(delta)),
                   verdict=verdict(delta))
    return out


def _agree_shown(result: AgreeResult) -> JSONObject:
    """What `rfteval agree` prints, line for line and cell for cell (report/agree_render.py's rows and lines): the
    headline table (kappa with its interval, the bias with its interval, the error records), the error counts by
    type, the notes, the verdict, the items where the graders disagree most."""
    from rfteval.report import agree_render

    gate = result.gate
    gated = bool(gate["checks"])
    # the terminal's order: the verdict per candidate, then each gate check (a gate once hid the verdict)
    lines = agree_render.verdict_lines(result) + agree_render.gate_lines(result)
    if not lines:
        labels = sorted({str(x) for x in result.paired["model_label"]}) if "model_label" in result.paired else []
        lines = [f"no verdict to compare: the records hold one model ({', '.join(labels) or 'none'}); a verdict "
                 "is a candidate against its baseline, under each grader"]
    labels_table = None
    if result.labels is not None:
        names = result.labels["labels"]
        labels_table = {"columns": ["A \\ B", *names],
                        "rows": [[name, *(str(v) for v in row)] for name, row in zip(names, result.labels["confusion"])]}
    return json_safe({
        "graders": [f"{name}: {side.path}" + (f"  ({side.grader})" if side.grader else "")
                    for name, side in (("A", result.a), ("B", result.b))],
        "summary": [list(row) for row in agree_render.summary_rows(result)],
        "errors": agree_render.error_lines(result),
        "notes": agree_render.note_lines(result),
        "labels": labels_table,
        "verdict": {"gated": gated, "passed": gate["passed"], "lines": lines,
                    "failures": [f"gate failed: {line}" for line in gate["failures"]],
                    "warnings": [f"gate warning: {line}" for line in gate["warnings"]]},
        "verdict_rows": [list(row) for row in agree_render.verdict_rows(result)],
        "items": [list(agree_render.item_cells(r)) for r in result.items],
    })


SAMPLE_FIELDS = ("epoch", "score", "passed", "sub_scores", "error", "usage", "latency_s", "finish_reason",
                 "truncated_in_reasoning", "model", "cached")


def _sample(r: JSONObject) -> JSONObject:
    """One record for the Item page: its texts cut to MAX_TEXT, the rest as stored."""
    out: JSONObject = {k: json_safe(r.get(k)) for k in SAMPLE_FIELDS if k in r}
    for name in ("output_text", "reasoning_text", "grader_stdout"):
        out[name] = _text(r.get(name))
    out["output_json"] = json_safe(r.get("output_json"))
    out["output_tools"] = json_safe(r.get("output_tools"))
    out["grade_details"] = json_safe(r.get("grade_details"))
    if any(name in r for name in ROLLOUT_FIELDS):  # an agent run's record: a record without tools has none
        out["rollout"] = _rollout(r)
    return out


def _rollout(r: JSONObject) -> JSONObject:
    """An agent record's rollout for its sample card: the record's own counts and stop reason, and the trajectory
    (None without a readable transcript: a rollout that failed, or a transcript that is not JSON)."""
    messages = transcript_messages(r)
    turns, calls = r.get("turns"), r.get("tool_calls")
    return {"turns": turns if isinstance(turns, int) else None,
            "tool_calls": calls if isinstance(calls, int) else None,
            "stop_reason": json_safe(r.get("stop_reason")),
            "tool_errors": json_safe(_error_counts(r.get("tool_errors"))),
            "trajectory": cast("list[JSONValue]", _trajectory(messages, r.get("output_text")))
            if messages is not None else None,
            "unreadable": messages is None and r.get("transcript") is not None}


def _error_counts(value: object) -> dict[str, int]:
    """A record's tool_errors as {type: count}: a dict in a line, (type, count) pairs from a Parquet map, JSON
    text; anything else (hostile, or absent) counts nothing."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return {}
    if isinstance(value, list):
        value = {v[0]: v[1] for v in value if isinstance(v, (list, tuple)) and len(v) == 2}
    if not isinstance(value, Mapping):
        return {}
    return {str(k): int(v) for k, v in value.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and abs(v) < 1e15}


def _content(value: object) -> str:
    """A message's content as text: a string as it is, a list of parts their texts, nothing as ""."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(p, dict) and isinstance(p.get("text"), str) for p in value):
        return "".join(str(p["text"]) for p in value if isinstance(p, dict))
    return json.dumps(value, ensure_ascii=False)


def _arguments(raw: object) -> tuple[JSONValue, bool]:
    """A call's arguments for the page: pretty-printed when they are JSON, as the model sent them otherwise (a
    model that sends broken JSON is something to see), and whether they parsed."""
    text = raw if isinstance(raw, str) else json.dumps(raw, ensure_ascii=False)
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return _text(text), False
    return _text(json.dumps(value, indent=2, ensure_ascii=False)), True


def _trajectory(messages: list[JSONObject], output_text: object) -> list[JSONObject]:
    """The rollout's turns in order: each assistant message's text and calls (name, arguments), each call with the
    tool result that answered it (by tool_call_id, the earliest call of that id still unanswered; cut at
    RESULT_CHARS, its length said, numbered in the transcript's order for /api/result) and the error type its
    content names ("error: <Type>: ..."). A result no call asked for is listed under the turn it follows. The last
    turn's text, the record's output_text, is not sent twice: the turn says so (`final`) and the page shows the
    output there."""
    turns: list[JSONObject] = []
    pending: dict[str, list[JSONObject]] = {}
    results, assistant, last_text = 0, 0, None
    for m in messages:
        if m.get("role") == "tool":
            content = _content(m.get("content"))
            error = TOOL_ERROR.match(content)
            result: JSONObject = {"index": results, "chars": len(content), "text": _text(content, RESULT_CHARS),
                                  "error": error.group(1) if error else None}
            results += 1
            waiting = pending.get(str(m.get("tool_call_id")))
            if waiting:
                waiting.pop(0)["result"] = result
                continue
            if not turns:
                turns.append({"turn": None, "role": "tool", "text": None, "calls": [], "unasked": []})
            unasked = turns[-1]["unasked"]
            assert isinstance(unasked, list)
            unasked.append({**result, "tool_call_id": json_safe(m.get("tool_call_id"))})
            continue
        role = str(m.get("role") or "assistant")
        if role == "assistant":
            assistant += 1
        last_text = _content(m.get("content"))
        calls: list[JSONValue] = []
        listed = m.get("tool_calls")
        for c in listed if isinstance(listed, list) else []:
            c = c if isinstance(c, dict) else {}
            fn = c.get("function")
            fn = fn if isinstance(fn, dict) else {}
            name = fn.get("name")
            arguments, valid = _arguments(fn.get("arguments", ""))
            call: JSONObject = {"id": json_safe(c.get("id")), "name": name if isinstance(name, str) else
                                json.dumps(name), "arguments": arguments, "arguments_json": valid, "result": None}
            pending.setdefault(str(c.get("id")), []).append(call)
            calls.append(call)
        turns.append({"turn": assistant if role == "assistant" else None, "role": role,
                      "text": _text(last_text) or None, "calls": calls, "unasked": []})
    last = turns[-1] if turns else None
    if last is not None and last["role"] == "assistant" and last_text == output_text:
        last["text"], last["final"] = None, True
    return turns


def _epoch_wtl(result: CompareResult, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per item, over every (baseline epoch, candidate epoch) pair of its used records: candidate higher, equal,
    lower (ties within compare's --tie)."""
    import numpy as np

    n = len(ids)
    wins, ties, losses = np.zeros(n, np.int64), np.zeros(n, np.int64), np.zeros(n, np.int64)
    if result.baseline_records is None or result.candidate_records is None:
        return wins, ties, losses
    import pandas as pd

    tie = result.options.tie
    index = pd.Index(ids)
    groups = []
    for frame in (result.baseline_records, result.candidate_records):
        code = index.get_indexer(frame["item_id"])  # -1: an unpaired item
        ok = code >= 0
        code, score = code[ok].astype(np.int64), frame["score"].to_numpy(np.float64)[ok]
        order = np.argsort(code, kind="stable")
        groups.append((code[order], score[order]))
    (cb, sb), (cc, sc) = groups
    kb, kc = np.bincount(cb, minlength=n), np.bincount(cc, minlength=n)
    if len(kb) and (kb == kb[0]).all() and (kc == kc[0]).all() and kb[0] and kc[0]:  # one matrix for all
        mb, mc = sb.reshape(n, kb[0]), sc.reshape(n, kc[0])
        d = mc[:, None, :] - mb[:, :, None]
        wins, ties = (d > tie).sum(axis=(1, 2)), (np.abs(d) <= tie).sum(axis=(1, 2))
        losses = (d < -tie).sum(axis=(1, 2))
        return wins, ties, losses
    sb_start, sc_start = np.concatenate(([0], np.cumsum(kb))), np.concatenate(([0], np.cumsum(kc)))
    for k in range(n):
        d = sc[sc_start[k]:sc_start[k + 1]][None, :] - sb[sb_start[k]:sb_start[k + 1]][:, None]
        wins[k], ties[k], losses[k] = (d > tie).sum(), (np.abs(d) <= tie).sum(), (d < -tie).sum()
    return wins, ties, losses


def _drop_check(result: CompareResult) -> GateCheck:
    """The gate's per-item drop test (--max-item-drop 0): each item that dropped, Holm across every item."""
    from dataclasses import replace

    from rfteval.compare.gate import item_drop_check

    gate = replace(result.options.gate, max_item_drop=0.0)
    return item_drop_check(result, gate)


def _lowest_quarter(result: CompareResult) -> np.ndarray:
    """The items of the hardest slice's descriptive choice: the lowest quarter by baseline mean
    (stats.select_lowest, compare's rule when the slice cannot be cross-fitted)."""
    from rfteval.compare.comparison import HARDEST_FRACTION
    from rfteval.stats.paired import select_lowest

    return select_lowest(result.items["baseline"].to_numpy(), HARDEST_FRACTION, result.options.seed)


def _run_info(run_dir: Path) -> JSONObject:
    """A run directory's spec (spec.resolved.toml) and its summary (summary.json, read as the typed RunSummary) as
    tables of text: the run, each model, the judge's calls, the spec's settings."""
    import tomllib

    import msgspec

    from rfteval.run.summary import as_run_summary

    out: JSONObject = {"dir": str(run_dir), "spec": None, "about": None, "models": None, "judge": None}
    try:
        spec = tomllib.loads((run_dir / rundir.RESOLVED_SPEC).read_text(encoding="utf-8"))
        out["spec"] = [[k, v] for k, v in _flat(spec)]
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        pass
    try:
        summary = as_run_summary(msgspec.json.decode((run_dir / rundir.SUMMARY).read_bytes()))
    except (OSError, msgspec.DecodeError, msgspec.ValidationError):
        return out
    out.update(_summary_tables(summary))
    return out


def _flat(value: object, key: str = "") -> list[tuple[str, str]]:
    """A spec's settings as (dotted key, value) rows: tables opened into their keys, a list of plain values joined."""
    if isinstance(value, dict):
        return [row for k, v in value.items() for row in _flat(v, f"{key}.{k}" if key else str(k))]
    if isinstance(value, list):
        if all(not isinstance(v, (dict, list)) for v in value):
            return [(key, ", ".join(_flat_value(v) for v in value))]
        return [row for i, v in enumerate(value) for row in _flat(v, f"{key}[{i}]")]
    return [(key, _flat_value(value))]


def _flat_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"  # as the spec's TOML writes it
    return "" if value is None else str(value)


def _summary_tables(s: RunSummary) -> JSONObject:
    """summary.json as the page's tables: the run's facts, a row per model (the figures as `rfteval run` prints
    them: report/format.py's formats, run_table's error counts), a row per judge model."""
    from rfteval.report.format import fmt, fmt_ci, fmt_cost, fmt_share, fmt_tokens
    from rfteval.report.run_table import fmt_errors

    g = s.grader
    rule = s.pass_rule
    threshold = rule.get("threshold")
    about = [["name", s.name or ""], ["run id", s.run_id], ["dataset", s.dataset],
             ["items × epochs", f"{s.items} × {s.epochs}"],
             ["grader", f"{g.name} ({g.type}, hash {g.hash})" if g.hash else f"{g.name} ({g.type})"],
             ["complete", "yes" if s.complete else f"no: {s.missing} of {s.cells} cells missing"],
             ["finished", s.finished_at],
             ["error records", f"{s.errors} of {s.cells} cells ({fmt_share(s.error_rate)}); max error rate "
                               f"{s.max_error_rate:g}"]]
    if rule:
        about.append(["pass rule", (f"threshold {threshold:g}: " if isinstance(threshold, (int, float)) else "")
                      + str(rule.get("source") or "")])
    top = str(s.epochs or 1)
    columns = ["label", "model", "mean", "95% CI", "pass@1", f"pass@{top}", "items", "records", "errors",
               "error rate", "tokens in/out (reasoning)", "cost", "cut off thinking"]
    rows = []
    for label, m in s.models.items():
        tok = m.tokens
        tokens = (f"{fmt_tokens(tok.input)}/{fmt_tokens(tok.output)}"
                  + (f" ({fmt_tokens(tok.reasoning)})" if tok.reasoning is not None else "")
                  if tok.input or tok.output or tok.reasoning else "—")  # replayed outputs report no usage
        curve = m.pass_at_k or {}
        cut = m.truncated_in_reasoning
        rows.append([label, m.model + (f" ({m.provider})" if m.provider else ""), fmt(m.mean),
                     fmt_ci(m.ci95, sign=False), fmt(curve.get("1")), fmt(curve.get(top)), str(m.items),
                     str(m.records) if m.records == m.cells else f"{m.records}/{m.cells}",
                     fmt_errors(m.errors.by_type), fmt_share(m.error_rate), tokens, fmt_cost(m.cost_usd),
                     f"{cut.n} ({fmt_share(cut.share, 0)})" if cut and cut.n else "0"])
    judge_rows = []
    now = s.judge or {}
    for model, u in now.items():
        judge_rows.append([model, "this invocation", *_judge_cells(u)])
    for model, u in (s.judge_results or {}).items():
        here = now.get(model) or {}
        if (u.get("calls"), u.get("input_tokens")) != (here.get("calls"), here.get("input_tokens")):
            judge_rows.append([model, "behind these results (all invocations)", *_judge_cells(u)])
    return json_safe({"about": about, "models": {"columns": columns, "rows": rows, "text": [0, 1, 8]},  # text: left
                      "judge": {"columns": ["judge model", "calls of", "calls", "cached", "shared", "errors",
                                            "tokens in", "tokens out", "cost"], "rows": judge_rows, "text": [0, 1]}
                      if judge_rows else None})


def _judge_cells(u: Mapping[str, object]) -> list[str]:
    """A judge model's calls, as `rfteval run` prints them (its judge lines), cost as every report prints one."""
    from rfteval.report.format import fmt_cost

    def count(name: str) -> str:
        value = u.get(name)
        return str(value) if isinstance(value, int) else "—"

    cost = u.get("cost_usd")
    return [count("calls"), count("cache_hits"), count("shared"), count("errors"), count("input_tokens"),
            count("output_tokens"), fmt_cost(float(cost) if isinstance(cost, (int, float)) else None)]


def _graded_keys(path: Path) -> dict[tuple[str, str, int], tuple[str, float | None]] | None:
    """Each sample's (model_label, item_id, epoch) -> (its output text's digest, its score), from a run directory
    or record file (the files `agree` reads); None when it cannot be read as graded records."""
    import hashlib
    from collections.abc import Iterator

    import pyarrow as pa
    import pyarrow.parquet as pq

    from rfteval.data.records import iter_jsonl_records
    from rfteval.data.rundir import find_records

    def batches(f: Path) -> Iterator[dict[str, object]]:  # a batch of texts at a time, never all of them
        file = pq.ParquetFile(f)
        names = [c for c in ("model_label", "item_id", "epoch", "output_text", "score") if c in file.schema_arrow.names]
        for batch in file.iter_batches(columns=names):
            yield from batch.to_pylist()

    out: dict[tuple[str, str, int], tuple[str, float | None]] = {}
    try:
        for f in find_records(path, pick="all").files:
            rows = batches(f) if f.suffix == ".parquet" else iter_jsonl_records(f)
            for r in rows:
                text, score = r.get("output_text"), r.get("score")
                epoch = r.get("epoch")
                key = (str(r.get("model_label")), str(r.get("item_id")), int(epoch) if isinstance(epoch, (int, float))
                       else 1)
                out[key] = (hashlib.sha1(str(text).encode("utf-8", "replace")).hexdigest(),
                            float(score) if isinstance(score, (int, float)) else None)
    except (InputError, OSError, ValueError, TypeError, pa.ArrowException):
        return None
    return out or None


def same_samples_regraded(paths: Sequence[Path]) -> list[tuple[Path, Path]]:
    """The pairs of paths whose records are the same samples (the same model_label/item_id/epoch keys and the same
    output texts) graded differently: another grader's grades of the same outputs (`rfteval agree A --regrade G
    --out B.jsonl`, `rfteval grade`). Two copies of the same grades are not a pair; nor are two runs of a model
    (their outputs differ). Their grader files, when both are named and differ, make a pair of equal scores too."""
    from rfteval.compare.graded import load_graded

    if len(paths) < 2:
        return []
    keys = {p: _graded_keys(p) for p in paths}
    out: list[tuple[Path, Path]] = []
    for i, a in enumerate(paths):
        for b in paths[i + 1:]:
            ka, kb = keys[a], keys[b]
            if ka is None or kb is None or ka.keys() != kb.keys():
                continue
            if any(ka[k][0] != kb[k][0] for k in ka):
                continue  # different outputs: different samples
            differ = any(ka[k][1] != kb[k][1] for k in ka)
            if not differ:
                try:
                    ga, gb = load_graded(a, "A").grader, load_graded(b, "B").grader
                except InputError:
                    continue
                differ = ga is not None and gb is not None and ga != gb
            if differ:
                out.append((a, b))
    return out
