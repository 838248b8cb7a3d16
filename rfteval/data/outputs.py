"""Outputs files for `rfteval grade`: one existing model output per line, checked against the dataset."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from rfteval.data.dataset import iter_jsonl
from rfteval.data.reasoning import REASONING_FIELDS
from rfteval.data.transcripts import EPISODE, Transcript, prompt_key, read_transcript, without_system
from rfteval.errors import InputError

if TYPE_CHECKING:
    from collections.abc import Mapping

    from rfteval.data.json_types import JSONMapping, JSONValue


@dataclass(frozen=True, slots=True)
class Output:
    item_id: str
    epoch: int
    model: str
    output_text: str
    output_tools: list[JSONValue] = field(default_factory=list)  # carried into the sample as given
    line: int = 0
    # what a reasoning model's server sent beside the content (`reasoning_content` or `reasoning`) and why it
    # stopped: a sample cut off ("length") while still thinking is then marked and counted, as `rfteval run` does
    reasoning: str | None = None
    finish_reason: str | None = None
    # the label the output was made under (a run's records carry both: `model_label` "base", `model` the name the
    # endpoint serves); kept on the graded records, so a re-grade pairs with the run it came from (`rfteval agree`)
    model_label: str | None = None
    # an agent run made elsewhere (rfteval.data.transcripts): its generated messages, graded as a rollout
    transcript: Transcript | None = None

    @property
    def label(self) -> str:
        """The model label of the records graded from this output: its own `model_label`, else its `model`."""
        return self.model_label or self.model


def iter_outputs(path: str | Path, known_items: set[str] | None = None, default_model: str = "outputs",
                 unknown: list[Output] | None = None, prompts: Mapping[str, str | None] | None = None
                 ) -> Iterator[Output]:
    """Stream outputs lines `{"item_id", "output_text", "epoch"?, "model"?, "model_label"?, "output_tools"?,
    "finish_reason"?, "reasoning_content"? | "reasoning"?}`; errors name file:line.

    A line may hold an agent's transcript instead of `output_text` (rfteval.data.transcripts: `messages`, verifiers'
    `completion`, ART's `messages_and_choices`, a verifiers 0.4 Episode); its item is `item_id` (ART: also
    `metadata.item_id`; an Episode: its task's `info.id`, `id`, `item_id`), else the item whose messages are the
    prompt the line holds (`prompts`: prompt_key → item id, None where two items share it).

    A line without `epoch` is the next epoch of its (label, item) in file order: repeated lines of one item are
    epochs 1, 2, 3, as a hand-written outputs file means them. The label is `model_label` (a run's records
    carry it), else `model`. With `unknown` given, an output whose item is not in
    `known_items` (its dataset line was skipped as invalid) is set aside there instead of being an error.
    """
    path = Path(path)
    seen: dict[tuple[str, str, int], int] = {}
    counts: dict[tuple[str, str], int] = {}
    for lineno, row in iter_jsonl(path):
        if isinstance(row, InputError):
            raise row
        if not isinstance(row, dict):
            raise InputError(f"expected a JSON object, got {type(row).__name__}", path, lineno)
        transcript = read_transcript(row, path, lineno)
        item_id = row.get("item_id")
        if transcript is not None and item_id is None:
            item_id = _transcript_item(row, transcript, prompts, known_items, path, lineno)
        if item_id is None or isinstance(item_id, (bool, dict, list)):
            raise InputError("missing or not a string", path, lineno, "item_id")
        item_id = str(item_id)
        set_aside = known_items is not None and item_id not in known_items
        if set_aside and unknown is None:
            raise InputError(f"no item {item_id!r} in the dataset", path, lineno, "item_id")
        text = row.get("output_text") if transcript is None else transcript.output_text
        if not isinstance(text, str):
            raise InputError("missing or not a string", path, lineno, "output_text")
        model = row.get("model", default_model)
        if not isinstance(model, str) or not model:
            raise InputError("must be a non-empty string", path, lineno, "model")
        label = row.get("model_label")
        if label is not None and (not isinstance(label, str) or not label):
            raise InputError("must be a non-empty string or null", path, lineno, "model_label")
        label = label or model
        n = counts[(label, item_id)] = counts.get((label, item_id), 0) + 1
        epoch = row.get("epoch", n)
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 1:
            raise InputError("must be an integer >= 1", path, lineno, "epoch")
        tools = row.get("output_tools") or []
        if not isinstance(tools, list):
            raise InputError("must be a list of tool calls", path, lineno, "output_tools")
        finish_reason = row.get("finish_reason")
        if finish_reason is not None and not isinstance(finish_reason, str):
            raise InputError("must be a string (e.g. \"stop\", \"length\") or null", path, lineno, "finish_reason")
        reasoning = _reasoning(row, path, lineno)
        key = (label, item_id, epoch)
        if key in seen:
            raise InputError(f"duplicate (model label, item_id, epoch) {key} (first on line {seen[key]})", path,
                             lineno)
        seen[key] = lineno
        output = Output(item_id, epoch, model, text, tools, lineno, reasoning, finish_reason,
                        label if label != model else None, transcript)
        if set_aside and unknown is not None:
            unknown.append(output)
            continue
        yield output


def _reasoning(row: JSONMapping, path: Path, lineno: int) -> str | None:
    """The thinking sent beside the content, read as the provider reads a chat message's (the first non-empty of
    the two fields; "" when one was sent empty: the model reasoned and showed none of it)."""
    texts = []
    for name in REASONING_FIELDS:
        value = row.get(name)
        if value is not None and not isinstance(value, str):
            raise InputError("must be a string or null", path, lineno, name)
        if value is not None:
            texts.append(value)
    return next((t for t in texts if t), texts[0] if texts else None)


def _transcript_item(row: JSONMapping, transcript: Transcript, prompts: Mapping[str, str | None] | None,
                     known_items: set[str] | None, path: Path, lineno: int) -> str | None:
    """The item of a transcript line without `item_id`: ART's `metadata.item_id`; the first of the ids a verifiers
    trace's task names that is an item; else the item sent its prompt (as given, else without the harness's leading
    system message); else the first id named (then no item of the dataset: an error, or set aside)."""
    metadata = row.get("metadata")
    if isinstance(metadata, dict) and isinstance(metadata.get("item_id"), (str, int)):
        return str(metadata["item_id"])
    named = transcript.item_ids
    known = [i for i in named if known_items is None or i in known_items]
    if known:
        return known[0]
    if transcript.prompt is None or prompts is None:
        return named[0] if named else None
    try:
        return _prompt_item(transcript.prompt, prompts, path, lineno, transcript.shape == EPISODE)
    except InputError:
        if named:
            return named[0]
        raise


def _prompt_item(given: list[JSONValue], prompts: Mapping[str, str | None], path: Path, lineno: int,
                 episode: bool) -> str:
    """The item sent a prompt; a verifiers trace's prompt is its nodes before the first sampled one, and its item
    is named by its task's `info.id` (what rfteval's export writes)."""
    fix, field = ("give its task an info.id", f"{EPISODE}[0].nodes") if episode else ("give the line an item_id",
                                                                                      "prompt")
    for prompt in (given, without_system(given)):
        key = prompt_key(prompt)
        if key in prompts:
            found = prompts[key]
            if found is None:
                raise InputError(f"two items of the dataset have this prompt: {fix}", path, lineno,
                                 field if episode else "item_id")
            return found
    raise InputError(f"no item of the dataset has this line's prompt: {fix}", path, lineno, field)


def prompt_index(items: Iterable[tuple[str, object]]) -> dict[str, str | None]:
    """(item id, its messages) → the index of items by prompt iter_outputs reads: prompt_key → item id, None where
    two items share the prompt; each item also under its prompt without leading system messages, where that
    does not clash."""
    exact: dict[str, str | None] = {}
    bare: dict[str, str | None] = {}
    for item_id, messages in items:
        for index, prompt in ((exact, messages), (bare, without_system(messages) if isinstance(messages, list)
                                                  else messages)):
            key = prompt_key(prompt)
            index[key] = item_id if key not in index else None
    return {**bare, **exact}
