// rfteval view: the pages. Every number comes from the server (rfteval's compare library) or, in a bundle,
// from the same JSON written to data.js; nothing here computes a statistic. All data enters the page as text
// (textContent / text nodes): no innerHTML, no inline handler, no URL built from data.
"use strict";

const BUNDLE = window.RFTEVAL_BUNDLE || null;
const HASHED = BUNDLE !== null || location.protocol === "file:";
const FILTERS = ["regressed", "improved", "ties", "significant", "hardest", "errors", "truncated", "judged"];
const FILTER_TEXT = {regressed: "regressed", improved: "improved", ties: "ties", significant: "significant drop (Holm)",
  hardest: "lowest quarter by baseline mean", errors: "errors", truncated: "truncated in reasoning", judged: "grader details"};
const BIDI = /[\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c]/g;
// An agent pair's filters, orders and the stop reason a rollout ends with when the model answered (rfteval.view.model)
const AGENT_TEXT = {more_turns: "more turns", fewer_turns: "fewer turns", more_calls: "more tool calls",
  fewer_calls: "fewer tool calls", tool_errors: "tool errors"};
const SORT_TEXT = {"": "lowest delta first", "-d_turns": "\u0394turns, largest first", "d_turns": "\u0394turns, smallest first",
  "-d_tool_calls": "\u0394tool calls, largest first", "d_tool_calls": "\u0394tool calls, smallest first",
  "-tool_errors": "tool errors, most first"};
const ANSWERED = "no_tool_calls";

// Figures arrive formatted (each page's `shown`: the strings the terminal prints, from rfteval's report formats), and
// a delta's colour from its verdict word (rfteval.stats.direction, the one verdict rule): num() below is left only
// for a record's own score and the readiness page's values.

// ------------------------------------------------------------------ DOM

function h(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? "" : String(v));
  }
  for (const kid of kids.flat(Infinity)) {
    if (kid === null || kid === undefined || kid === false) continue;
    e.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  }
  return e;
}

// A text from the data, with bidirectional controls shown as visible marks (they cannot reorder what follows)
// and lone surrogates as U+FFFD.
function shown(s) {
  const raw = String(s);
  const text = raw.toWellFormed ? raw.toWellFormed() : raw;  // a lone surrogate (not Unicode) shows as U+FFFD
  const out = [];
  let last = 0;
  for (const m of text.matchAll(BIDI)) {
    out.push(text.slice(last, m.index));
    out.push(h("span", {class: "bidi", title: "bidirectional control character"},
      "\u27e8U+" + m[0].charCodeAt(0).toString(16).toUpperCase().padStart(4, "0") + "\u27e9"));
    last = m.index + m[0].length;
  }
  out.push(text.slice(last));
  return out;
}

function textBlock(value, more, why) {
  if (value === null || value === undefined) return h("span", {class: "muted"}, "(none)");
  if (typeof value === "object" && "omitted" in value) {
    return h("div", {}, h("pre", {class: "text", dir: "ltr"}, shown(value.text)),
      h("p", {class: "muted"}, value.omitted.toLocaleString() + " more characters not shown",
        more ? [" \u2014 ", h("a", {href: more, target: "_blank", rel: "noopener noreferrer"}, "open the whole text")] : why || " (left out of the bundle)"));
  }
  return h("pre", {class: "text", dir: "ltr"}, shown(typeof value === "string" ? value : JSON.stringify(value, null, 2)));
}

function num(x) { return x === null || x === undefined || Number.isNaN(x) ? "\u2014" : Number(x).toFixed(3); }
// better / worse only when the test says so (stats.direction); every other word is neutral
function tone(verdict) { return verdict === "better" ? "up" : verdict === "worse" ? "down" : ""; }
// A table of formatted cells: the columns listed in `text` read as text, the others as figures (right-aligned).
function table(id, columns, rows, text) {
  const left = new Set(text || [0]);
  return h("table", {id}, h("thead", {}, h("tr", {}, columns.map(c => h("th", {}, c)))),
    h("tbody", {}, rows.map(r => h("tr", {}, r.map((v, i) => td(shown(v), left.has(i) ? "" : "num"))))));
}
function kvTable(id, rows) {
  return h("table", {id, class: "kv"}, h("tbody", {}, rows.map(([k, v]) => h("tr", {}, h("th", {}, shown(k)), td(shown(v))))));
}
function td(v, c) { return h("td", {class: c || ""}, v); }

// ------------------------------------------------------------------ routes and data

function route() {
  if (HASHED) {
    const raw = location.hash.slice(1) || "/compare";
    const at = raw.indexOf("?");
    return {path: at < 0 ? raw : raw.slice(0, at), params: new URLSearchParams(at < 0 ? "" : raw.slice(at + 1))};
  }
  return {path: location.pathname === "/" ? "/compare" : location.pathname, params: new URLSearchParams(location.search)};
}

function link(path, params) {
  const clean = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) if (v !== null && v !== undefined && v !== "") clean.set(k, v);
  const qs = clean.toString();
  return (HASHED ? "#" : "") + path + (qs ? "?" + qs : "");
}

function go(path, params) {
  const target = link(path, params);
  if (HASHED) location.hash = target.slice(1); else location.href = target;
}

async function api(name, params) {
  if (BUNDLE) return bundleApi(name, params);
  const r = await fetch("/api/" + name + "?" + new URLSearchParams(params).toString());
  const body = await r.json();
  if (!r.ok) throw new Error(body.error || r.statusText);
  return body;
}

function plotSrc(name, a, b) {
  return BUNDLE ? "plots/" + name + ".svg" : "/api/plot/" + name + ".svg?" + new URLSearchParams({a, b}).toString();
}

function textLink(label, id, epoch, field) {
  return BUNDLE ? null : "/api/text?" + new URLSearchParams({label, id, epoch, field}).toString();
}

// The bundle holds the pages' JSON as the server would send it; filters select among its rows by the flags
// the server computed (flags), and a search looks through the texts the bundle carries.
function bundleApi(name, params) {
  const b = BUNDLE;
  if (name === "runs") return b.runs;
  if (name === "series" || name === "agree" || name === "readiness") {
    if (!b[name]) throw new Error("this bundle has no " + name + " page (too many records, or nothing to show): rfteval view shows it");
    return b[name];
  }
  const filters = (params.filter || "").split(",").filter(Boolean);
  const q = (params.q || "").toLowerCase();
  let rows = b.compare.items.filter(r => filters.every(f => r.flags.includes(f))
    && (!params.slice || Object.entries(r.slices).some(([k, v]) => k + "=" + v === params.slice))
    && (!params.stop || r.flags.includes("stop=" + params.stop))
    && (!q || (b.haystack[r.item_id] || "").includes(q)));
  const orders = b.compare.orders;  // an agent pair's orders, as the server sorts (the library's order of these rows)
  if (params.sort && orders && Object.hasOwn(orders, params.sort) && Array.isArray(orders[params.sort])) {
    const at = new Map(orders[params.sort].map((id, i) => [id, i]));
    rows = rows.filter(r => at.has(r.item_id)).sort((x, y) => at.get(x.item_id) - at.get(y.item_id));
  }
  if (name === "compare") {
    const offset = Number(params.offset || 0), limit = Number(params.limit || 100);
    const agent = b.compare.agent ? {stop: params.stop || "", sort: params.sort || ""} : {};
    return Object.assign({}, b.compare, agent, {filters, q: params.q || "", slice: params.slice || "", offset, limit,
      total: rows.length, items: rows.slice(offset, offset + limit)});
  }
  if (name === "item") {
    const page = b.items[params.id];
    if (!page) throw new Error("item " + params.id + " is not in this bundle (" + b.left_out + ")");
    const ids = rows.map(r => r.item_id), at = ids.indexOf(params.id);
    return Object.assign({}, page, {position: at, total: ids.length, prev: at > 0 ? ids[at - 1] : null,
      next: at >= 0 && at < ids.length - 1 ? ids[at + 1] : null});
  }
  throw new Error("unknown page " + name);
}

// ------------------------------------------------------------------ layout

function nav(data, here) {
  const draw = runs => {
    const items = [["/runs", "Runs"], ["/compare", "Compare"]];
    const has = name => !BUNDLE || Boolean(BUNDLE[name]);  // a bundle holds only some of the pages
    if (runs && runs.series && runs.series.length && has("series")) items.push(["/series", "Series"]);
    if (runs && (runs.agree || (runs.agree_links || []).length) && has("agree")) items.push(["/agree", "Agree"]);
    if (has("readiness")) items.push(["/readiness", "Readiness"]);
    document.getElementById("nav").replaceChildren(...items.map(([p, t]) => h("a", {href: link(p, {}), class: p === here ? "here" : ""}, t)));
  };
  draw(BUNDLE ? BUNDLE.runs : data);
  if (!BUNDLE && !data) api("runs", {}).then(draw, () => {});  // which pages this viewer has (Series, Agree)
  document.getElementById("note").textContent = BUNDLE ? "static bundle: " + BUNDLE.left_out : "";
}

function setMain(...kids) { document.getElementById("main").replaceChildren(...kids.flat(Infinity).filter(k => k !== null && k !== undefined && k !== false)); }

let keyHandler = null;
document.addEventListener("keydown", ev => {
  if (!keyHandler || ev.ctrlKey || ev.metaKey || ev.altKey) return;
  const t = ev.target;
  if (t && (t.tagName === "INPUT" || t.tagName === "SELECT" || t.tagName === "TEXTAREA")) return;
  keyHandler(ev);
});

async function render() {
  const {path, params} = route();
  keyHandler = null;
  const p = Object.fromEntries(params.entries());
  try {
    if (path === "/runs") await runsPage();
    else if (path === "/item") await itemPage(p);
    else if (path === "/series") await seriesPage();
    else if (path === "/agree") await agreePage(p);
    else if (path === "/readiness") await readinessPage(p);
    else await comparePage(p);
  } catch (err) {
    setMain(h("p", {class: "error"}, String(err.message || err)));
  }
}
window.addEventListener("hashchange", render);
document.addEventListener("DOMContentLoaded", render);

// ------------------------------------------------------------------ Runs

async function runsPage() {
  const d = await api("runs", {});
  nav(d, "/runs");
  const head = h("tr", {}, ["model", "mean", "95% CI", "items", "records", "pass@1", "pass@N", "generation errors",
    "scored 0 (grading errors, refusals)", "truncated in reasoning", "delta vs " + d.baseline, "95% CI", "p", "verdict"].map(t => h("th", {}, t)));
  const rows = d.models.map(m => {
    const s = m.shown, base = !m.delta;
    return h("tr", {}, td(h("a", {href: link("/compare", {a: d.baseline, b: m.label})}, shown(m.label))),
      td(s.mean, "num"), td(s.ci95, "num"), td(s.items, "num"), td(s.records, "num"), td(s.pass_at_1, "num"),
      td(s.pass_at_n, "num"), td(s.generation_errors, "num"), td(s.scored_zero, "num"), td(s.truncated, "num"),
      td(s.delta, base ? "muted" : "num delta " + tone(s.verdict)), td(s.delta_ci95, "num"), td(s.p, "num"),
      td(base ? "" : s.verdict, base ? "" : "verdict " + tone(s.verdict)));
  });
  const parts = [h("h1", {}, "Runs"), h("table", {id: "models"}, h("thead", {}, head), h("tbody", {}, rows))];
  const r = d.readiness || {};
  parts.push(h("h2", {}, "Readiness of " + d.baseline),
    h("p", {id: "readiness-verdict"}, r.verdict ? ["verdict: ", h("strong", {}, r.shown || r.verdict), " \u2014 ", (r.reasons || []).join("; ")]
      : "not assessed: " + (r.why || ""), " ", h("a", {href: link("/readiness", {label: d.baseline})}, "details")));
  if ((d.agree_links || []).length && (!BUNDLE || BUNDLE.agree)) {
    parts.push(h("h2", {}, "Two graders' grades of the same samples"),
      h("ul", {id: "agree-links"}, d.agree_links.map(pr => h("li", {}, h("a", {href: link("/agree", pr)}, "Agree: A " + pr.a + " \u00b7 B " + pr.b)))));
  }
  for (const run of d.runs) {
    parts.push(h("h2", {}, "Run ", shown(run.dir)));
    if (run.about) parts.push(kvTable("run-about", run.about));
    else parts.push(h("p", {class: "muted"}, "no summary.json here (the run has not finished), or one this version cannot read"));
    if (run.models) parts.push(h("h3", {}, "Models (summary.json)"), table("run-models", run.models.columns, run.models.rows, run.models.text));
    if (run.judge) parts.push(h("h3", {}, "Judge calls"), table("run-judge", run.judge.columns, run.judge.rows, run.judge.text));
    if (run.spec) parts.push(h("details", {}, h("summary", {}, "the run's spec (spec.resolved.toml)"), kvTable("run-spec", run.spec)));
  }
  setMain(...parts);
}

// ------------------------------------------------------------------ Compare

function pairPicker(d, path, extra) {
  const sel = (name, value) => h("select", {name, onchange: ev => go(path, Object.assign({}, extra,
    {a: name === "a" ? ev.target.value : d.a, b: name === "b" ? ev.target.value : d.b}))},
    d.labels.map(l => h("option", {value: l, selected: l === value}, l)));
  return h("span", {}, "baseline ", sel("a", d.a), " candidate ", sel("b", d.b));
}

async function comparePage(p) {
  const d = await api("compare", p);
  nav(null, "/compare");
  const res = d.result, state = {a: d.a, b: d.b, filter: d.filters.join(","), q: d.q, slice: d.slice, stop: d.stop, sort: d.sort};
  const ag = d.agent || null;  // an agent pair: its rows carry each side's rollouts
  const sumHead = h("tr", {}, ["", "items", d.a, "95% CI", d.b, "95% CI", "delta", "95% CI", "p (Holm)", "W/T/L", "verdict"]
    .map(t => h("th", {}, t)));
  const sumRows = d.summary.map(r => { const s = r.shown; return h("tr", {}, td(shown(r.name)), td(s.items, "num"), td(s.baseline, "num"),
    td(s.baseline_ci95, "num"), td(s.candidate, "num"), td(s.candidate_ci95, "num"),
    td(s.delta, "num delta " + tone(r.verdict)), td(s.delta_ci95, "num"),
    td(s.p, "num"), td(s.wtl, "num"), td(r.verdict || "", "verdict " + tone(r.verdict))); });
  const gate = res.gate && res.gate.checks && res.gate.checks.length
    ? h("p", {}, "gate: ", h("strong", {class: res.gate.passed ? "up" : "down"}, res.gate.passed ? "passed" : "failed"),
      res.gate.failures.map(f => [" \u2014 ", f])) : null;
  const boxes = FILTERS.map(f => h("label", {}, h("input", {type: "checkbox", name: "filter", value: f,
    checked: d.filters.includes(f), onchange: () => submit()}), " " + FILTER_TEXT[f]));
  const sliceSel = Object.keys(d.by).length ? h("select", {name: "slice", onchange: () => submit()},
    h("option", {value: ""}, "any slice"),
    Object.entries(d.by).map(([k, vs]) => vs.map(v => h("option", {value: k + "=" + v, selected: d.slice === k + "=" + v}, k + " = " + v)))) : null;
  const search = h("input", {type: "search", name: "q", value: d.q, placeholder: "search prompt, reference, outputs", size: 34});
  const agentBoxes = ag ? ag.filters.map(f => h("label", {}, h("input", {type: "checkbox", name: "filter", value: f,
    checked: d.filters.includes(f), onchange: () => submit()}), " " + (AGENT_TEXT[f] || f))) : null;
  const stopSel = ag ? h("select", {name: "stop", onchange: () => submit()}, h("option", {value: ""}, "any stop reason"),
    ag.stop_reasons.map(r => h("option", {value: r, selected: d.stop === r}, "stopped: " + r))) : null;
  const sortSel = ag ? h("select", {name: "sort", onchange: () => submit()},
    ["", ...ag.sorts].map(k => h("option", {value: k, selected: (d.sort || "") === k}, "order: " + (SORT_TEXT[k] || k)))) : null;
  const form = h("form", {class: "filters", id: "filters", onsubmit: ev => { ev.preventDefault(); submit(); }},
    boxes, agentBoxes, sliceSel, stopSel, sortSel, search, h("button", {type: "submit"}, "search"));
  function submit() {
    const f = [...form.querySelectorAll("input[name=filter]:checked")].map(x => x.value).join(",");
    go("/compare", {a: d.a, b: d.b, filter: f, q: search.value, slice: sliceSel ? sliceSel.value : "",
      stop: stopSel ? stopSel.value : "", sort: sortSel ? sortSel.value : ""});
  }
  const bys = Object.keys(d.by);
  const agentHead = ag ? ["turns", "\u0394turns", "tool calls", "\u0394tool calls", "stopped: " + d.a + " | " + d.b,
    "tool errors: " + d.a + " | " + d.b] : [];
  const head = h("tr", {}, ["#", "item", d.a, d.b, "delta", "95% CI (item)", "W/T/L epochs", "drop p (Holm)", ...bys, ...agentHead, "flags"]
    .map(t => h("th", {}, t)));
  const agentCells = r => {
    if (!ag) return null;
    const s = r.rollout ? r.rollout.shown : null;
    if (!s) return agentHead.map(() => td("\u2014", "muted"));
    return [td(s.turns, "num"), td(s.d_turns, "num d-turns"), td(s.tool_calls, "num"), td(s.d_tool_calls, "num d-calls"),
      td([shown(s.stop_reasons[0]), " | ", shown(s.stop_reasons[1])], "stops"),
      td([shown(s.tool_errors[0]), " | ", shown(s.tool_errors[1])], "tool-errors")];
  };
  const rows = d.items.map((r, i) => h("tr", {"data-id": r.item_id},
    td(d.offset + i + 1, "num"), td(h("a", {href: link("/item", Object.assign({id: r.item_id}, state))}, shown(r.item_id))),
    td(r.shown.baseline, "num"), td(r.shown.candidate, "num"), td(r.shown.delta, "num " + r.shown.tone),
    td(r.shown.delta_ci95, "num"), td(r.wtl.join("/"), "num"), td(r.shown.drop_p, "num"),
    bys.map(k => td(shown(r.slices[k]))), agentCells(r),
    td([r.significant ? "significant drop " : "", r.hardest ? "hardest " : "",
      r.baseline_errors + r.candidate_errors ? "errors: " + r.baseline_errors + "+" + r.candidate_errors : ""].join(""))));
  const tbody = h("tbody", {}, rows);
  const pager = h("div", {class: "pager"},
    h("span", {id: "count"}, d.total + " of " + d.all_items + " items" + (d.total ? " (" + (d.offset + 1) + "\u2013" + Math.min(d.total, d.offset + d.limit) + " shown)" : "")
      + (BUNDLE && BUNDLE.compare.items.length < d.all_items ? "; filters and search look at the " + BUNDLE.compare.items.length + " in this bundle" : "")),
    d.offset > 0 ? h("a", {href: link("/compare", Object.assign({}, state, {offset: Math.max(0, d.offset - d.limit)}))}, "\u2190 previous page") : null,
    d.offset + d.limit < d.total ? h("a", {href: link("/compare", Object.assign({}, state, {offset: d.offset + d.limit}))}, "next page \u2192") : null,
    h("span", {class: "keys"}, "keys: j/k or \u2193/\u2191 move, Enter opens, / searches"));
  const notes = (res.notes || []).map(n => h("li", {}, n));
  setMain(h("h1", {}, "Compare ", d.a, " \u2192 ", d.b), h("p", {}, pairPicker(d, "/compare", {})),
    h("table", {id: "summary"}, h("thead", {}, sumHead), h("tbody", {}, sumRows)), gate,
    notes.length ? h("ul", {class: "muted"}, notes) : null,
    h("details", {open: true}, h("summary", {}, "plots (compare --html's)"),
      h("div", {class: "plots"}, ["scatter", "deltas", "distributions"].map(n => h("img", {src: plotSrc(n, d.a, d.b), alt: n + " plot"})))),
    h("h2", {}, "Items, " + SORT_TEXT[d.sort && Object.hasOwn(SORT_TEXT, d.sort) ? d.sort : ""]), form, pager,
    d.item_test && d.item_test.warning ? h("p", {class: "muted"}, "per-item test: ", d.item_test.warning) : null,
    h("table", {id: "items"}, h("thead", {}, head), tbody));
  let sel = -1;
  const trs = [...tbody.children];
  const mark = i => { trs.forEach(t => t.classList.remove("sel")); sel = i; if (trs[i]) { trs[i].classList.add("sel"); trs[i].scrollIntoView({block: "nearest"}); } };
  keyHandler = ev => {
    if (ev.key === "j" || ev.key === "ArrowDown") { mark(Math.min(trs.length - 1, sel + 1)); ev.preventDefault(); }
    else if (ev.key === "k" || ev.key === "ArrowUp") { mark(Math.max(0, sel - 1)); ev.preventDefault(); }
    else if (ev.key === "Enter" && trs[sel]) go("/item", Object.assign({id: trs[sel].dataset.id}, state));
    else if (ev.key === "/") { search.focus(); ev.preventDefault(); }
  };
}

// ------------------------------------------------------------------ Item

function message(m) {
  if (!m || typeof m !== "object") return h("div", {class: "msg"}, textBlock(m));
  const content = m.content;
  return h("div", {class: "msg"}, h("div", {class: "role"}, shown(m.role || "?")),
    typeof content === "string" ? textBlock(content) : textBlock(JSON.stringify(content, null, 2)),
    m.tool_calls ? textBlock(JSON.stringify(m.tool_calls, null, 2)) : null);
}

function details(gd) {
  if (gd === null || gd === undefined) return null;
  const parts = [];
  if (typeof gd === "object" && !Array.isArray(gd)) {
    if (Array.isArray(gd.steps)) {
      parts.push(h("div", {class: "steps"}, h("strong", {}, "judge steps"),
        h("ol", {}, gd.steps.map(s => h("li", {}, typeof s === "string" ? shown(s)
          : Object.entries(s).map(([k, v]) => h("div", {}, h("span", {class: "muted"}, k + ": "), shown(typeof v === "string" ? v : JSON.stringify(v)))))))));
    }
    for (const key of ["result", "label", "explanation", "reasoning"]) {
      if (key in gd) parts.push(h("div", {class: "gd-" + key}, h("strong", {}, key + ": "), shown(typeof gd[key] === "string" ? gd[key] : JSON.stringify(gd[key]))));
    }
  }
  parts.push(h("details", {}, h("summary", {}, "all grader details"), textBlock(JSON.stringify(gd, null, 2))));
  return h("div", {class: "grade-details"}, parts);
}

function sampleCard(s, label, side, id) {
  if (!s) return h("div", {class: "sample " + side}, h("p", {class: "muted"}, "no record"));
  const u = s.usage || {};
  const meta = h("div", {class: "meta"}, h("strong", {}, label + " \u00b7 epoch " + s.epoch),
    h("span", {}, "score ", h("strong", {class: "score"}, num(s.score))),
    s.passed !== null && s.passed !== undefined ? h("span", {}, "passed: " + s.passed) : null,
    h("span", {}, "tokens " + [u.input_tokens, u.output_tokens, u.reasoning_tokens].map(x => x ?? "\u2014").join(" / ")),
    s.latency_s !== null && s.latency_s !== undefined ? h("span", {}, "latency " + Number(s.latency_s).toFixed(2) + " s") : null,
    s.finish_reason ? h("span", {}, "finish: ", shown(s.finish_reason)) : null,
    s.truncated_in_reasoning ? h("span", {class: "error"}, "truncated in reasoning") : null);
  const err = s.error ? h("p", {class: "error"}, "error (" + shown(s.error.stage || "?") + "/", shown(s.error.type || "?"), "): ", shown(s.error.message || "")) : null;
  const subs = s.sub_scores && Object.keys(s.sub_scores).length ? h("table", {class: "subs"},
    Object.entries(s.sub_scores).map(([k, v]) => h("tr", {}, td(shown(k)), td(num(v), "num")))) : null;
  const output = h("div", {class: "output"}, textBlock(s.output_text, textLink(label, id, s.epoch, "output_text")));
  // an agent's final answer is its last turn's text: shown there, in the trajectory, once
  const placed = s.rollout && Array.isArray(s.rollout.trajectory) && s.rollout.trajectory.some(t => t.final);
  return h("div", {class: "sample " + side},
    meta, err, s.rollout ? trajectory(s.rollout, {label, id, epoch: s.epoch}, output) : null, placed ? null : output,
    s.output_json !== null && s.output_json !== undefined ? h("details", {}, h("summary", {}, "output_json"), textBlock(JSON.stringify(s.output_json, null, 2))) : null,
    s.output_tools ? h("details", {}, h("summary", {}, "tool calls"), textBlock(JSON.stringify(s.output_tools, null, 2))) : null,
    s.reasoning_text ? h("details", {class: "reasoning"}, h("summary", {}, "reasoning (folded)"), textBlock(s.reasoning_text, textLink(label, id, s.epoch, "reasoning_text"))) : null,
    subs, details(s.grade_details),
    s.grader_stdout ? h("details", {open: true}, h("summary", {}, "grader stdout"), textBlock(s.grader_stdout, textLink(label, id, s.epoch, "grader_stdout"))) : null);
}

// ------------------------------------------------------------------ an agent's trajectory

// The rollout's turns in order: the assistant's text, each call (its tool's name, its arguments) and the tool's
// result, cut where long with the rest fetched on request; error badges; the stop reason.
function trajectory(ro, where, output) {
  const count = (n, one, many) => (n === null || n === undefined ? "?" : n) + " " + (n === 1 ? one : many);
  const stop = ro.stop_reason;
  const head = h("div", {class: "traj-head"}, h("strong", {}, "trajectory"),
    h("span", {}, count(ro.turns, "turn", "turns")), h("span", {}, count(ro.tool_calls, "tool call", "tool calls")),
    stop === null || stop === undefined ? null
      : h("span", {class: stop === ANSWERED ? "stop" : "stop badge warn-badge"}, "stop: ", shown(stop)),
    Object.entries(ro.tool_errors || {}).map(([k, n]) => h("span", {class: "badge err-badge tool-error"}, shown(k), " \u00d7" + n)));
  if (!Array.isArray(ro.trajectory)) {
    return h("div", {class: "trajectory"}, head, h("p", {class: "muted"},
      ro.unreadable ? "the transcript is not a JSON list of messages: not shown" : "no transcript (no rollout was played)"));
  }
  return h("div", {class: "trajectory"}, head, h("ol", {class: "turns"}, ro.trajectory.map(t => turnBlock(t, where, output))));
}

function turnBlock(t, where, output) {
  const longText = " (the rest is in the record's transcript)";
  return h("li", {class: "turn"},
    h("div", {class: "turn-label"}, t.role === "assistant" ? "turn " + t.turn : shown(t.role)),
    t.final ? output
      : t.text !== null && t.text !== undefined ? h("div", {class: "turn-text"}, textBlock(t.text, null, longText)) : null,
    (t.calls || []).map(c => h("div", {class: "call"},
      h("div", {class: "call-head"}, h("span", {class: "role"}, "call "), h("code", {class: "tool-name"}, shown(c.name)),
        c.arguments_json ? null : h("span", {class: "badge err-badge"}, "arguments are not JSON"),
        c.result && c.result.error ? h("span", {class: "badge err-badge"}, "error: ", shown(c.result.error)) : null),
      h("div", {class: "args"}, textBlock(c.arguments, null, longText)),
      c.result ? resultBlock(c.result, where)
        : h("p", {class: "muted no-result"}, "no result: the rollout stopped before this call ran"))),
    (t.unasked || []).map(r => h("div", {class: "call"},
      h("div", {class: "call-head"}, "a result no call asked for (tool_call_id ", shown(String(r.tool_call_id)), ")",
        r.error ? h("span", {class: "badge err-badge"}, "error: ", shown(r.error)) : null),
      resultBlock(r, where))));
}

function resultBlock(r, where) {
  const cut = r.text !== null && typeof r.text === "object";
  const pre = h("pre", {class: "text result" + (r.error ? " failed" : ""), dir: "ltr"}, shown(cut ? r.text.text : r.text));
  const label = h("div", {class: "result-label"}, h("span", {class: "role"}, "result"));
  if (!cut) return h("div", {class: "result-block"}, label, pre);
  const all = "show all " + r.chars.toLocaleString() + " characters";
  const button = h("button", {type: "button", class: "show-all"}, all);
  const note = h("p", {class: "muted cut-note"}, "the first " + r.text.text.length.toLocaleString() + " of " +
    r.chars.toLocaleString() + " characters ", button);
  button.addEventListener("click", async () => {
    button.disabled = true;
    button.textContent = "loading\u2026";
    try {
      const text = await fullResult(r, where);
      pre.replaceChildren(...shown(text));
      note.replaceChildren("all " + r.chars.toLocaleString() + " characters");
    } catch (err) {
      button.disabled = false;
      button.textContent = all;
      note.append(h("span", {class: "error"}, " " + String(err.message || err)));
    }
  });
  return h("div", {class: "result-block"}, label, pre, note);
}

// The whole text of a cut tool result: the server reads it from the record's transcript; a bundle holds it in
// results/<n>.js, loaded as a script (a page opened from disk may fetch nothing), whose name is a number.
async function fullResult(r, where) {
  if (BUNDLE) {
    const [file, at] = Array.isArray(r.part) ? r.part.map(Number) : [NaN, NaN];
    if (!Number.isInteger(file) || !Number.isInteger(at)) throw new Error("not in this bundle: rfteval view shows it");
    if (!(window.RFTEVAL_RESULTS || {})[file]) await loadScript("results/" + file + ".js");
    const texts = (window.RFTEVAL_RESULTS || {})[file];
    if (!Array.isArray(texts) || typeof texts[at] !== "string") throw new Error("not in this bundle's results/" + file + ".js");
    return texts[at];
  }
  const resp = await fetch("/api/result?" + new URLSearchParams({label: where.label, id: where.id, epoch: where.epoch, call: r.index}).toString());
  const body = await resp.text();
  if (!resp.ok) {
    let message = body;
    try { message = JSON.parse(body).error || body; } catch (e) { /* not JSON: the text itself */ }
    throw new Error(message);
  }
  return body;
}

function loadScript(src) {
  return new Promise((resolve, reject) => {
    const s = document.createElement("script");
    s.src = src;
    s.addEventListener("load", () => { s.remove(); resolve(); });  // it ran: the page keeps only its own scripts
    s.addEventListener("error", () => { s.remove(); reject(new Error("cannot load " + src)); });
    document.head.append(s);
  });
}

function plain(v) { return v === null || v === undefined ? "" : typeof v === "string" ? v : typeof v === "object" && "text" in v ? v.text : JSON.stringify(v); }

// Word-level diff (longest common subsequence over words and spaces); long texts are cut to keep it quick.
function wordDiff(a, b) {
  const MAX = 2500;
  const wa = a.split(/(\s+)/).slice(0, MAX), wb = b.split(/(\s+)/).slice(0, MAX);
  const n = wa.length, m = wb.length, dp = new Uint32Array((n + 1) * (m + 1));
  for (let i = n - 1; i >= 0; i--) for (let j = m - 1; j >= 0; j--)
    dp[i * (m + 1) + j] = wa[i] === wb[j] ? dp[(i + 1) * (m + 1) + j + 1] + 1 : Math.max(dp[(i + 1) * (m + 1) + j], dp[i * (m + 1) + j + 1]);
  const out = [];
  let i = 0, j = 0;
  while (i < n && j < m) {
    if (wa[i] === wb[j]) { out.push(shown(wa[i])); i++; j++; }
    else if (dp[(i + 1) * (m + 1) + j] >= dp[i * (m + 1) + j + 1]) out.push(h("del", {}, shown(wa[i++])));
    else out.push(h("ins", {}, shown(wb[j++])));
  }
  while (i < n) out.push(h("del", {}, shown(wa[i++])));
  while (j < m) out.push(h("ins", {}, shown(wb[j++])));
  const cut = a.split(/(\s+)/).length > MAX || b.split(/(\s+)/).length > MAX;
  return [h("pre", {class: "text diff", dir: "ltr"}, out), cut ? h("p", {class: "muted"}, "diff of the first " + MAX + " words and spaces of each") : null];
}

async function itemPage(p) {
  const d = await api("item", p);
  nav(null, "/item");
  const state = {a: d.a, b: d.b, filter: p.filter, q: p.q, slice: p.slice, stop: p.stop, sort: p.sort};
  const r = d.row;
  const parts = [h("p", {}, h("a", {href: link("/compare", state)}, "\u2190 back to the list"), "  ",
    d.position >= 0 ? "item " + (d.position + 1) + " of " + d.total + " in this filter  " : "(not in the current filter)  ",
    d.prev ? h("a", {id: "prev", href: link("/item", Object.assign({id: d.prev}, state))}, "\u2190 previous (p)") : null, "  ",
    d.next ? h("a", {id: "next", href: link("/item", Object.assign({id: d.next}, state))}, "next (n) \u2192") : null),
    h("h1", {}, "Item ", shown(d.id))];
  if (r) parts.push(h("table", {id: "item-row"}, h("tr", {}, ["", d.a, d.b, "delta", "95% CI", "W/T/L epochs", "drop p (Holm)"].map(t => h("th", {}, t))),
    h("tr", {}, td("mean over epochs"), td(r.shown.baseline, "num"), td(r.shown.candidate, "num"), td(r.shown.delta, "num " + r.shown.tone),
      td(r.shown.delta_ci95, "num"), td(r.wtl.join("/"), "num"), td(r.shown.drop_p, "num"))));
  if (d.item) {
    parts.push(h("h2", {}, "Prompt, as the model saw it"), h("div", {id: "prompt"}, (d.item.messages || []).map(message)));
    if (d.item.tools) parts.push(h("details", {}, h("summary", {}, "tools"), textBlock(JSON.stringify(d.item.tools, null, 2))));
    parts.push(h("h2", {}, "Reference and other item fields"), h("table", {class: "kv", id: "fields"},
      Object.entries(d.item.fields).map(([k, v]) => h("tr", {}, h("th", {}, shown(k)), td(textBlock(v))))));
  } else parts.push(h("p", {class: "muted"}, "the dataset is not known here (give --dataset): prompt and reference not shown"));
  const sa = d.samples[d.a] || [], sb = d.samples[d.b] || [];
  const epochs = [...new Set([...sa, ...sb].map(s => s.epoch))].sort((x, y) => x - y);
  parts.push(h("h2", {id: "samples"}, "Samples: " + d.a + " | " + d.b + (r ? "  (item mean " + r.shown.baseline + " \u2192 " + r.shown.candidate + ", delta " + r.shown.delta + ")" : "")));
  for (const e of epochs) {
    parts.push(h("div", {class: "pair", "data-epoch": e}, sampleCard(sa.find(s => s.epoch === e), d.a, "base", d.id),
      sampleCard(sb.find(s => s.epoch === e), d.b, "cand", d.id)));
  }
  const all = [...sa.map(s => [d.a, s]), ...sb.map(s => [d.b, s])];
  if (all.length >= 2) {
    const opt = (i, pick) => h("option", {value: i, selected: i === pick}, all[i][0] + " epoch " + all[i][1].epoch);
    const left = h("select", {id: "diff-a"}, all.map((_, i) => opt(i, 0)));
    const right = h("select", {id: "diff-b"}, all.map((_, i) => opt(i, sa.length < all.length ? sa.length : 1)));
    const out = h("div", {id: "diff"});
    const draw = () => out.replaceChildren(...wordDiff(plain(all[left.value][1].output_text), plain(all[right.value][1].output_text)).filter(Boolean));
    left.addEventListener("change", draw); right.addEventListener("change", draw);
    parts.push(h("h2", {}, "Word diff"), h("p", {}, left, " against ", right), out);
    draw();
  }
  setMain(...parts);
  keyHandler = ev => {
    if ((ev.key === "n" || ev.key === "ArrowRight" || ev.key === "j") && d.next) go("/item", Object.assign({id: d.next}, state));
    else if ((ev.key === "p" || ev.key === "ArrowLeft" || ev.key === "k") && d.prev) go("/item", Object.assign({id: d.prev}, state));
    else if (ev.key === "u" || ev.key === "Escape") go("/compare", state);
  };
}

// ------------------------------------------------------------------ Series, Agree, Readiness

async function seriesPage() {
  const d = await api("series", {});
  nav(null, "/series");
  const base = d.shown[0];
  const head = h("tr", {}, ["model", "mean", "95% CI", "delta", "95% CI", "p (Holm across candidates)", "verdict"].map(t => h("th", {}, t)));
  const rows = [h("tr", {}, td([shown(base.label), " (baseline)"]), td(base.mean, "num"), td(base.ci95, "num"), td(""), td(""), td(""), td(""))]
    .concat(d.shown.slice(1).map(c => h("tr", {}, td(h("a", {href: link("/compare", {a: base.label, b: c.label})}, shown(c.label))), td(c.mean, "num"), td(c.ci95, "num"),
      td(c.delta, "num delta " + tone(c.verdict)), td(c.delta_ci95, "num"), td(c.p, "num"), td(c.verdict, "verdict " + tone(c.verdict)))));
  const ihead = h("tr", {}, [h("th", {}, "item"), ...d.labels.map(l => h("th", {}, l))]);
  const irows = d.items.map(r => h("tr", {}, td(h("a", {href: link("/item", {id: r.item_id, a: d.labels[0], b: d.labels[d.labels.length - 1]})}, shown(r.item_id))),
    r.shown.map(s => td(s, "num"))));
  setMain(h("h1", {}, "Series: " + d.run), h("table", {id: "series"}, head, rows),
    h("h2", {}, "Per item, the mean score at each checkpoint (" + d.items.length + " of " + d.total + ", lowest first)"),
    h("table", {id: "series-items"}, ihead, irows));
}

async function agreePage(p) {
  const d = await api("agree", p && p.a && p.b ? {a: p.a, b: p.b} : {});
  nav(null, "/agree");
  const w = d.shown, v = w.verdict;
  const verdict = h("div", {id: "agree-verdict"},
    v.gated ? h("p", {}, "gate: ", h("strong", {class: v.passed ? "up" : "down"}, v.passed ? "passed" : "failed")) : null,
    h("ul", {}, v.lines.map(line => h("li", {}, shown(line)))),
    v.failures.length || v.warnings.length ? h("ul", {}, v.failures.map(line => h("li", {class: "error"}, shown(line))),
      v.warnings.map(line => h("li", {class: "warn"}, shown(line)))) : null);
  const rows = d.items.map((r, i) => { const c = w.items[i]; return h("tbody", {}, h("tr", {}, td(shown(c[0])), td(r.n, "num"), td(c[1], "num"), td(c[2], "num"),
    td(c[3], "num"), td(shown(c[4]))),
    h("tr", {}, h("td", {colspan: 6}, h("details", {}, h("summary", {}, "both graders on this sample"),
      h("div", {class: "pair"}, sampleCard(r.samples.a, "A: " + d.paths[0], "base", r.item_id), sampleCard(r.samples.b, "B: " + d.paths[1], "cand", r.item_id)))))); });
  setMain(h("h1", {}, "Agree: does B grade like A?"),
    h("p", {id: "agree-graders"}, w.graders.map((g, i) => [i ? h("br", {}) : null, shown(g)])),
    h("h2", {}, "Verdict"), verdict,
    h("h2", {}, "Agreement of B with A"),
    h("table", {id: "agree-summary"}, h("tbody", {}, w.summary.map(([what, value, note]) => h("tr", {}, h("th", {}, what), td(value, "num"), td(note))))),
    w.errors.length ? h("ul", {id: "agree-errors"}, w.errors.map(line => h("li", {}, shown(line)))) : null,
    w.notes.length ? h("ul", {id: "agree-notes", class: "muted"}, w.notes.map(line => h("li", {}, shown(line)))) : null,
    w.labels ? [h("h2", {}, "Labels: rows A, columns B"), table("agree-labels", w.labels.columns, w.labels.rows)] : null,
    w.verdict_rows.length ? [h("h2", {}, "Does the verdict survive? (paired delta over items)"),
      table("agree-verdict-rows", ["candidate", "under A", "under B", "B \u2212 A", "95% CI"], w.verdict_rows)] : null,
    h("h2", {}, "Where the two graders disagree most (B \u2212 A, item mean)"),
    h("table", {id: "agree-items"}, h("thead", {}, h("tr", {}, ["item", "samples", "A", "B", "B \u2212 A", "sample: A \u2192 B: output"].map(t => h("th", {}, t)))), rows));
}

async function readinessPage(p) {
  const d = await api("readiness", p);
  nav(null, "/readiness");
  const r = d.report;
  const only = p.kind || "";
  const items = d.items.filter(it => !only || it.kind === only);
  const picker = h("select", {onchange: ev => go("/readiness", {label: ev.target.value, kind: only})}, d.labels.map(l => h("option", {value: l, selected: l === d.label}, l)));
  const kinds = h("select", {onchange: ev => go("/readiness", {label: d.label, kind: ev.target.value})},
    [["", "every item"], ["floor", "all at the minimum (zero signal)"], ["ceiling", "all at the maximum (zero signal)"], ["mixed", "mixed"]]
      .map(([v, t]) => h("option", {value: v, selected: v === only}, t)));
  setMain(h("h1", {}, "Readiness of ", picker), h("p", {id: "verdict"}, "verdict: ", h("strong", {}, d.shown ? d.shown.verdict : r.verdict)),
    h("p", {id: "left-out"}, d.left_out || ""),
    h("table", {id: "checks"}, h("tr", {}, ["check", "status", "value", "threshold", "why"].map(t => h("th", {}, t))),
      r.checks.map((c, i) => h("tr", {}, td(c.name), td(d.shown ? d.shown.statuses[i] : c.status), td(c.value === null ? "\u2014" : num(c.value), "num"), td(c.threshold), td(c.message)))),
    h("h2", {}, "Items by score spread (" + items.length + " shown of " + d.total + ")"), h("p", {}, kinds),
    h("table", {id: "readiness-items"}, h("tr", {}, ["item", "samples", "mean", "sd", "kind"].map(t => h("th", {}, t))),
      items.map(it => h("tr", {}, td(h("a", {href: link("/item", {id: it.item_id})}, shown(it.item_id))), td(it.k, "num"), td(num(it.mean), "num"), td(num(it.sd), "num"), td(it.kind || "")))));
}
