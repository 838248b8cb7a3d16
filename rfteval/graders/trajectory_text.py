"""An agent's rollout as a judge reads it: the whole trajectory rendered compactly, and cut to a budget.

What RULER (OpenPipe ART) does for agents: the judge ranks an item's trajectories, not only their last turns, so a
run that found its facts with its tools and one that guessed them are told apart. ART serializes each trajectory's
messages as JSON after the shared prefix; here each is a few tagged lines (assistant text, each tool call with its
name and arguments, each tool result, any scripted user turn, in order; then the final answer), which reads better
and costs fewer tokens. The item's prompt is not repeated: group_judge shows it once in <context>. A turn's leading
thinking block is left out, as it is from the final answer graders read: the judge ranks what the agent did.

A group longer than the judge's context would be refused or silently truncated by the server, so the caller gives a
budget in characters. Each trajectory gets its share (`shares`: short ones are kept whole, the rest split what is
left) and is cut from the middle outwards, tool results first (usually the bulk: whole documents, search hits),
then the other middle messages, and as a last resort the middle of the final answer. Every cut leaves a notice in
the text, so neither the judge nor a reader takes a cut trajectory for a short one, and `Cut` says what went.
Pure and deterministic: the same sample and budget give the same text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rfteval.data.reasoning import answer_text
from rfteval.data.rollout import message_calls

FINAL = "final"
RESULT = "result"
NOUNS = {RESULT: "tool result", "call": "tool call", "assistant": "assistant message", "user": "user message"}
# a closing tag of ours inside a message would end its block early for the reader: written as &lt;/ instead
_OURS = re.compile(r"</(?=(?:trajectory|assistant|tool_call|tool_result|user|final_answer)\b)")
MIN_SHARE = 600  # a trajectory's least share of the budget: its frame, a notice and the head of its final answer


@dataclass(frozen=True)
class Block:
    """One line group of a rendered trajectory: its kind (assistant, call, result, user, final) and its text."""

    kind: str
    text: str


@dataclass(frozen=True)
class Cut:
    """What a cut left out of one trajectory (grade details: `cut`)."""

    tool_results: int = 0
    messages: int = 0  # assistant text, tool calls and user turns
    final_answer_chars: int = 0

    def as_details(self) -> dict[str, int]:
        return {"tool_results": self.tool_results, "messages": self.messages,
                "final_answer_chars": self.final_answer_chars}


def has_rollout(sample: object) -> bool:
    return isinstance(sample, dict) and isinstance(sample.get("rollout"), dict)


def _text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return "" if content is None else json.dumps(content, ensure_ascii=False, sort_keys=True)


def _safe(text: str) -> str:
    return _OURS.sub("&lt;/", text)


def blocks(sample: Mapping[str, object]) -> tuple[str, list[Block]]:
    """(the <trajectory ...> opening line, the blocks in order) of a sample carrying `rollout`."""
    rollout = sample["rollout"]
    assert isinstance(rollout, dict)
    messages = [m for m in rollout.get("messages") or [] if isinstance(m, dict)]
    errors = {r.get("tool_call_id"): r.get("error") for r in rollout.get("tool_results") or []
              if isinstance(r, dict) and r.get("error")}
    last = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=-1)
    names: dict[object, str] = {}
    out: list[Block] = []
    for i, m in enumerate(messages):
        role = m.get("role")
        if role == "assistant":
            calls = message_calls(m)
            if i == last and not calls:  # the answer: as the sample gives it (any thinking left out)
                out.append(Block(FINAL, f"<final_answer>\n{_safe(str(sample.get('output_text') or ''))}\n"
                                        "</final_answer>"))
                continue
            text = answer_text(_text(m.get("content"))).strip()  # a leading <think> block left out, as in the answer
            if text:
                out.append(Block("assistant", f"<assistant>{_safe(text)}</assistant>"))
            for c in calls:
                names[c["id"]] = c["name"]
                out.append(Block("call", f'<tool_call name="{c["name"]}">{_safe(c["arguments"])}</tool_call>'))
        elif role == "tool":
            cid = m.get("tool_call_id")
            error = errors.get(cid)
            flag = f' error="{error}"' if error else ""
            out.append(Block(RESULT, f'<tool_result name="{names.get(cid, "")}"{flag}>{_safe(_text(m.get("content")))}'
                                     "</tool_result>"))
        elif role == "user":
            out.append(Block("user", f"<user>{_safe(_text(m.get('content')))}</user>"))
    if last < 0 or message_calls(messages[last]):
        out.append(Block(FINAL, f'<no_final_answer stop="{rollout.get("stop_reason", "")}"/>'))
    head = (f'<trajectory turns="{rollout.get("turns", 0)}" tool_calls="{len(rollout.get("tool_calls") or [])}" '
            f'stop="{rollout.get("stop_reason", "")}">')
    return head, out


def notice(kinds: Sequence[str]) -> str:
    """`[… 3 tool results and 1 tool call cut to fit the judge's context …]` for a run of dropped blocks."""
    counts: dict[str, int] = {}
    for k in kinds:
        counts[k] = counts.get(k, 0) + 1
    parts = [f"{n} {NOUNS[k]}{'s' if n > 1 else ''}" for k, n in counts.items()]
    said = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
    return f"[… {said} cut to fit the judge's context …]"


def _render(head: str, parts: Sequence[Block], dropped: set[int], final: str | None = None) -> str:
    lines = [head]
    run: list[str] = []
    for i, b in enumerate(parts):
        if i in dropped:
            run.append(b.kind)
            continue
        if run:
            lines.append(notice(run))
            run = []
        lines.append(final if final is not None and b.kind == FINAL else b.text)
    if run:
        lines.append(notice(run))
    lines.append("</trajectory>")
    return "\n".join(lines)


def render(sample: Mapping[str, object]) -> str:
    """The whole trajectory, uncut."""
    head, parts = blocks(sample)
    return _render(head, parts, set())


def _middle_out(positions: list[int]) -> list[int]:
    """Positions ordered from the middle outwards (ties: the earlier first): what a cut drops first."""
    mid = (len(positions) - 1) / 2
    return [p for _, p in sorted((abs(n - mid), p) for n, p in enumerate(positions))]


def _fewest(head: str, parts: Sequence[Block], base: set[int], order: list[int], cap: int) -> int | None:
    """The least k such that dropping base + order[:k] fits `cap` (binary search), or None when all do not."""
    if len(_render(head, parts, base | set(order))) > cap:
        return None
    lo, hi = 0, len(order)
    while lo < hi:
        k = (lo + hi) // 2
        if len(_render(head, parts, base | set(order[:k]))) <= cap:
            hi = k
        else:
            lo = k + 1
    return lo


def fit(sample: Mapping[str, object], cap: int) -> tuple[str, Cut | None]:
    """The trajectory rendered in at most about `cap` characters, and what was cut (None: nothing)."""
    head, parts = blocks(sample)
    full = _render(head, parts, set())
    if len(full) <= cap:
        return full, None
    results = _middle_out([i for i, b in enumerate(parts) if b.kind == RESULT])
    k = _fewest(head, parts, set(), results, cap)
    if k is not None:
        dropped = set(results[:k])
        return _render(head, parts, dropped), Cut(tool_results=k)
    others = _middle_out([i for i, b in enumerate(parts) if b.kind not in (RESULT, FINAL)])
    k = _fewest(head, parts, set(results), others, cap)
    if k is not None:
        dropped = set(results) | set(others[:k])
        return _render(head, parts, dropped), Cut(tool_results=len(results), messages=k)
    dropped = set(results) | set(others)
    finals = [b for b in parts if b.kind == FINAL]
    answer = finals[0].text if finals else ""
    room = max(cap - (len(_render(head, parts, dropped)) - len(answer)), 200)
    if len(answer) <= room:  # (a final answer under the floor: kept whole)
        return _render(head, parts, dropped), Cut(len(results), len(others))
    say = "[… {} characters of the final answer cut to fit the judge's context …]"
    keep = max(room - len(say.format(len(answer))), 100)
    gone = len(answer) - keep
    shortened = answer[: keep // 2] + "\n" + say.format(gone) + "\n" + answer[len(answer) - (keep - keep // 2):]
    return _render(head, parts, dropped, shortened), Cut(len(results), len(others), gone)


def shares(lengths: Sequence[int], room: int) -> list[int]:
    """Each text's cap when `room` characters are split among texts of these lengths: shortest first, a text that
    fits its equal share of what is left is kept whole, the others split the rest equally (at least MIN_SHARE)."""
    caps = [0] * len(lengths)
    left, todo = room, len(lengths)
    for i in sorted(range(len(lengths)), key=lambda i: (lengths[i], i)):
        share = max(left // todo, MIN_SHARE) if todo else 0
        caps[i] = min(lengths[i], share)
        left -= caps[i]
        todo -= 1
    return caps
