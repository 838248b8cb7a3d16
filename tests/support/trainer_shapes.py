"""The completion shapes the episode trainers' tests (tinker-cookbook, ART, the prime-rl taskset) run: every bundled
milo, chipstack and math recording (474 completions), each as a model would send it plain, with a think block,
with a think block never closed, with the block opened by the chat template (a lone `</think>`), and with the
thinking in a reasoning field (the answer after it keeps its leading newlines, as a server's reasoning parser
leaves it); and `rfteval grade`'s score for each shape, the reference every trainer's reward must equal."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.trainer_cases import DATASETS, GRADERS, grade_cli

CASES = ("milo", "chipstack", "math")
SHAPES = ("plain", "think", "unclosed", "opened", "reasoning")
THINKING = "Let me work through the request step by step."
FIRST_TURN = "Let me check the details first."  # a first assistant turn that is not the answer (two-turn shape)
FOLLOW_UP = "Please give your final answer now."


@dataclass(frozen=True)
class Completion:
    case: str
    item_id: str
    model: str  # the recording's name (base, tuned, step-100, ...)
    epoch: int
    answer: str  # the recorded output_text
    shape: str
    content: str  # what the model's message content holds in this shape
    reasoning: str | None  # the reasoning field, in the "reasoning" shape
    expected: float  # `rfteval grade`'s score of this shape

    @property
    def text(self) -> str:
        """The completion as one text (a trainer without a reasoning field sees the block in the text)."""
        return f"<think>\n{self.reasoning}\n</think>{self.content}" if self.reasoning is not None else self.content


def recordings(case: str) -> list[dict[str, Any]]:
    """Every recorded completion of the case: each recordings/*.jsonl but the graded records."""
    out = []
    for path in sorted((DATASETS / case / "recordings").glob("*.jsonl")):
        if path.stem.endswith("-grades"):
            continue
        for line in path.read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                out.append({"item_id": row["item_id"], "epoch": int(row["epoch"]), "output_text": row["output_text"],
                            "model": path.stem})
    return out


def shaped(answer: str, shape: str) -> tuple[str, str | None]:
    """(content, reasoning field) of a recorded answer in one shape."""
    if shape == "plain":
        return answer, None
    if shape == "think":
        return f"<think>\n{THINKING}\n</think>\n\n{answer}", None
    if shape == "unclosed":
        return f"<think>\n{THINKING} {answer}", None
    if shape == "opened":
        return f"{THINKING}\n</think>\n\n{answer}", None
    if shape == "reasoning":
        return f"\n\n{answer}", THINKING
    raise ValueError(shape)


def completions(tmp_path: Path, case: str, shapes: tuple[str, ...] = SHAPES) -> list[Completion]:
    """Every recording of the case in every shape, with `rfteval grade`'s score (one grade run over all)."""
    lines = []
    for row in recordings(case):
        for shape in shapes:
            content, reasoning = shaped(row["output_text"], shape)
            line = {"item_id": row["item_id"], "epoch": row["epoch"], "model": f"{row['model']}.{shape}",
                    "output_text": content}
            if reasoning is not None:
                line["reasoning_content"] = reasoning
            lines.append(line)
    graded = grade_cli(tmp_path, DATASETS / case / "items.jsonl", str(GRADERS / f"{case}.json"), lines)
    out = []
    for line in lines:
        model, shape = line["model"].rsplit(".", 1)
        out.append(Completion(case, line["item_id"], model, line["epoch"], recordings_answer(line, shape), shape,
                              line["output_text"], line.get("reasoning_content"),
                              graded[line["model"], line["item_id"], line["epoch"]]))
    return out


def recordings_answer(line: dict[str, Any], shape: str) -> str:
    """The recorded answer back from a shaped line (the inverse of `shaped`)."""
    text = line["output_text"]
    prefix = {"plain": "", "think": f"<think>\n{THINKING}\n</think>\n\n", "unclosed": f"<think>\n{THINKING} ",
              "opened": f"{THINKING}\n</think>\n\n", "reasoning": "\n\n"}[shape]
    assert text.startswith(prefix)
    return text[len(prefix):]


def items(case: str) -> dict[str, dict[str, Any]]:
    rows = [json.loads(line) for line in (DATASETS / case / "items.jsonl").read_text().splitlines() if line.strip()]
    return {row["id"]: row for row in rows}


def readme_block(lead: str, lang: str) -> str:
    """The first ```lang block after the docs/rewards.md paragraph that starts with `lead` (the README's trainer sections are
    run by the trainers' tests, so they cannot drift from the code)."""
    readme = (DATASETS.parent / "docs" / "rewards.md").read_text(encoding="utf-8")
    start = readme.index(f"\n{lead}")
    fence = readme.index(f"```{lang}\n", start) + len(f"```{lang}\n")
    return readme[fence:readme.index("```", fence)]


# The tool-call probe: a python grader reading OpenAI's `function.name` and `function.arguments` (JSON text), as
# graders written for OpenAI's fine-tuning do; the trainers' tests give it a sampled call in their own shape.
TOOL_GRADER = {"type": "python", "name": "tool_call", "source": (
    "import json\n\n"
    "def grade(sample, item):\n"
    "    calls = sample['output_tools']\n"
    "    if not calls:\n"
    "        return 0.0\n"
    "    f = calls[0]['function']\n"
    "    return 1.0 if f['name'] == item['tool'] and json.loads(f['arguments']) == item['args'] else 0.25\n")}
TOOL_ITEM = {"id": "tool-1", "messages": [{"role": "user", "content": "Put the zoo trip on the calendar."}],
             "tool": "add_event", "args": {"title": "Zoo", "date": "2025-03-14"}}
TOOL_TEXT = "Adding it."


def tool_call_expected(tmp_path: Path) -> float:
    """`rfteval grade`'s score of the probe's call given as output_tools (OpenAI's shape)."""
    dataset = tmp_path / "tool-items.jsonl"
    dataset.write_text(json.dumps(TOOL_ITEM) + "\n")
    grader = tmp_path / "tool-grader.json"
    grader.write_text(json.dumps(TOOL_GRADER))
    call = {"type": "function", "id": "call_1",
            "function": {"name": TOOL_ITEM["tool"], "arguments": json.dumps(TOOL_ITEM["args"])}}
    graded = grade_cli(tmp_path, dataset, str(grader), [{"item_id": "tool-1", "epoch": 1, "model": "m",
                                                         "output_text": TOOL_TEXT, "output_tools": [call]}])
    return graded["m", "tool-1", 1]


# The flat-tool-call probe (verifiers 0.4's traces, which prime-rl's tasksets score): a multi grader reading OpenAI's
# `function.name` and `function.arguments`; the calls as verifiers.v1.types.ToolCall's fields, and as OpenAI writes
# them (what `rfteval grade` reads as output_tools): right, wrong arguments, and a custom tool (no `function`: 0).
FLAT_TOOL_GRADER = {"type": "multi", "name": "tool_call", "calculate_output": "0.5 * name + 0.5 * args", "graders": {
    "name": {"type": "string_check", "name": "n", "input": "{{sample.output_tools[0].function.name}}",
             "reference": "{{item.tool}}", "operation": "eq"},
    "args": {"type": "string_check", "name": "a", "input": "{{sample.output_tools[0].function.arguments}}",
             "reference": "{{item.arguments}}", "operation": "eq"}}}
FLAT_CALLS = [{"id": "c1", "name": "get_weather", "arguments": '{"city": "Paris"}'},
              {"id": "c2", "name": "get_weather", "arguments": '{"city": "Lyon"}'},
              {"id": "c3", "type": "custom", "name": "get_weather", "arguments": '{"city": "Paris"}'}]
FLAT_CALLS_AS_OPENAI = [
    {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
    {"id": "c2", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Lyon"}'}},
    {"id": "c3", "type": "custom", "custom": {"name": "get_weather", "input": '{"city": "Paris"}'}}]
