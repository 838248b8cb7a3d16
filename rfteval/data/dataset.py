"""RFT dataset loading: OpenAI's JSONL format, streamed, every problem named by file and line."""

from __future__ import annotations

import json
import typing
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import msgspec

from rfteval.data.json_types import JSONField
from rfteval.errors import InputError, InputErrors
from rfteval.typos import closest, curly_quotes, did_you_mean

if TYPE_CHECKING:
    from rfteval.data.json_types import JSONInput, JSONMapping, JSONObject, JSONValue

Role = Literal["system", "developer", "user", "assistant", "tool"]
ToolChoiceWord = Literal["auto", "required", "none"]
ROLES = frozenset(typing.get_args(Role))
TOOL_CHOICES: tuple[str, ...] = typing.get_args(ToolChoiceWord)
# the keys a Chat API message takes: any other key beside a missing role or content may be its misspelling
MESSAGE_KEYS = frozenset({"role", "content", "name", "tool_calls", "tool_call_id", "refusal", "function_call"})


# ---- the line's shape as a type: what docs/schemas/dataset-line.schema.json is generated from
# (scripts/make_schemas.py). validate_row checks the same rules by hand, to name the field and line of each problem in
# words; tests/data/test_dataset.py holds the two to the same verdict on every line it tries.

class LineMessage(msgspec.Struct, omit_defaults=True):
    """One message of the prompt, as the Chat API takes it; other keys (name, tool_call_id, ...) pass as given."""

    role: Role
    content: str | list[JSONField] | None = None  # a string, or content parts
    tool_calls: list[JSONField] | None = None  # an assistant's turn may hold tool calls instead of content


_HAS_CONTENT: JSONObject = {"anyOf": [{"required": ["content"]},
                                     {"required": ["tool_calls"], "properties": {"tool_calls": {"minItems": 1}}}]}
# an object choice is typed; a forced function names it, in chat's shape (an object `function`) or Responses'
_NAME: JSONObject = {"type": "string", "minLength": 1}
_TOOL_CHOICE_OBJECT: JSONObject = {
    "required": ["type"], "properties": {"type": {"type": "string"}},
    "if": {"properties": {"type": {"const": "function"}}},
    "then": {"anyOf": [
        {"required": ["function"],
         "properties": {"function": {"type": "object", "required": ["name"], "properties": {"name": _NAME}}}},
        {"required": ["name"], "properties": {"function": {"not": {"type": "object"}}, "name": _NAME}}]},
}


class FollowUp(msgspec.Struct):
    """A scripted user turn given as a message: the user's, its content a string or content parts."""

    role: Literal["user"]
    content: str | list[JSONField]


class DatasetLine(msgspec.Struct):
    """One line of an RFT dataset (OpenAI's JSONL format): the prompt's messages and, beside them, any fields of
    the item's own (a reference answer, metadata), which graders read as `item.*`."""

    messages: Annotated[list[Annotated[LineMessage, msgspec.Meta(extra_json_schema=_HAS_CONTENT)]],
                        msgspec.Meta(min_length=1)]
    tools: list[JSONField] | None = None  # function tools the model may call
    tool_choice: ToolChoiceWord | Annotated[dict[str, JSONField], msgspec.Meta(
        extra_json_schema=_TOOL_CHOICE_OBJECT)] | None = None  # the item's own tool choice (rfteval's)
    id: Annotated[str, msgspec.Meta(min_length=1)] | int | None = None  # a stable id; else a hash of the line
    # scripted user turns (rfteval's): each sent after an answer without a tool call, in order (an agent run)
    rfteval_followups: list[str | FollowUp] | None = None


@dataclass(frozen=True, slots=True)
class Item:
    """One dataset row. `data` is the whole line: it is `item` for templates and python graders."""

    id: str
    line: int
    data: JSONObject

    @property
    def messages(self) -> list[JSONValue]:
        """The line's messages, as it has them (validate_row checked: a non-empty list of message objects)."""
        messages = self.data["messages"]
        return messages if isinstance(messages, list) else []

    @property
    def tools(self) -> list[JSONValue] | None:
        """The line's tools, as it has them (validate_row checked: a list, when given)."""
        tools = self.data.get("tools")
        return tools if isinstance(tools, list) else None

    @property
    def tool_choice(self) -> JSONValue:
        """The item's own tool_choice ("auto", "required", "none" or a named function), as `tools` is its own."""
        return self.data.get("tool_choice")

    @property
    def followups(self) -> list[JSONObject]:
        """The item's scripted user turns (`rfteval_followups`) as user messages, in order; [] when it has none
        (validate_row checked: strings or user messages)."""
        return followup_messages(self.data.get(FOLLOWUPS))


@dataclass
class Dataset:
    path: Path
    items: list[Item]
    skipped: list[InputError] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.items)

    def __iter__(self) -> Iterator[Item]:
        return iter(self.items)

    def by_id(self) -> dict[str, Item]:
        return {it.id: it for it in self.items}


FOLLOWUPS = "rfteval_followups"  # the item field of scripted user turns (rfteval.run.rollout plays them)
_FOLLOWUP_SHAPE = 'a list of user messages: strings or {"role": "user", "content": ...}'


def followup_messages(value: object) -> list[JSONObject]:
    """A line's `rfteval_followups` as user messages: a string is the content of one; a message is kept as given."""
    out: list[JSONObject] = []
    for turn in value if isinstance(value, list) else ():
        if isinstance(turn, str):
            out.append({"role": "user", "content": turn})
        elif isinstance(turn, dict):
            out.append(dict(turn))
    return out


def _check_followups(value: JSONInput, path: Path, lineno: int) -> InputError | None:
    if not isinstance(value, list):
        return InputError(f"must be {_FOLLOWUP_SHAPE}", path, lineno, FOLLOWUPS)
    for i, turn in enumerate(value):
        if isinstance(turn, str):
            continue
        where = f"{FOLLOWUPS}[{i}]"
        if not isinstance(turn, dict):
            return InputError(f"must be a string or a user message, got {type(turn).__name__}", path, lineno, where)
        if turn.get("role") != "user":
            return InputError(f"a scripted turn is the user's: role must be user, got {turn.get('role')!r}", path,
                              lineno, f"{where}.role")
        content = turn.get("content")
        if not isinstance(content, (str, list)):
            return InputError("must be a string or a list of content parts" if "content" in turn else "missing",
                              path, lineno, f"{where}.content")
    return None


def iter_jsonl(path: Path) -> Iterator[tuple[int, JSONValue | InputError]]:
    """Yield (line number, parsed value or the error) for each non-blank line; BOM and CRLF are fine."""
    try:
        fh = open(path, encoding="utf-8-sig", newline=None)
    except FileNotFoundError:
        raise InputError("no such file", path) from None
    except IsADirectoryError:
        raise InputError("is a directory, expected a JSONL file", path) from None
    with fh:
        lineno = 0
        while True:
            try:
                raw = fh.readline()
            except UnicodeDecodeError as exc:
                raise InputError(f"not UTF-8 text ({exc.reason})", path, lineno + 1) from None
            if not raw:
                break
            lineno += 1
            text = raw.strip()
            if not text:
                continue
            try:
                yield lineno, json.loads(text)
            except json.JSONDecodeError as exc:
                curly = curly_quotes(text)
                hint = f"; {curly}" if curly else ""
                yield lineno, InputError(f"invalid JSON: {exc.msg} (column {exc.colno}){hint}", path, lineno)


def _check_message(msg: JSONInput, index: int, path: Path, lineno: int) -> InputError | None:
    where = f"messages[{index}]"
    if not isinstance(msg, dict):
        return InputError("must be an object with role and content", path, lineno, where)
    role = msg.get("role")
    if "role" not in msg:  # a misspelt key is named, not reported as a role of None
        return InputError("missing" + _has_typo(msg, "role"), path, lineno, f"{where}.role")
    if not isinstance(role, str) or role not in ROLES:
        hint = did_you_mean(role, ROLES) if isinstance(role, str) else ""
        return InputError(f"role must be one of {', '.join(sorted(ROLES))}, got {role!r}" + (f" ({hint})" if hint else ""),
                          path, lineno, f"{where}.role")
    if "content" not in msg and not msg.get("tool_calls"):
        return InputError("missing content" + _has_typo(msg, "content"), path, lineno, f"{where}.content")
    content = msg.get("content")
    if content is not None and not isinstance(content, (str, list)):
        return InputError("must be a string or a list of content parts", path, lineno, f"{where}.content")
    return None


def _has_typo(msg: dict[str, JSONInput], key: str) -> str:
    """" (the message has `rol`: did you mean `role`?)" when one of the message's keys is `key` misspelt, else ""."""
    typo = closest(key, [k for k in msg if k not in MESSAGE_KEYS])
    return f" (the message has `{typo}`: did you mean `{key}`?)" if typo else ""


def _named_tool(choice: JSONInput) -> bool:
    """An object choice: a forced function, in chat's shape {"type": "function", "function": {"name"}} or
    Responses' {"type": "function", "name"}; other typed objects (OpenAI's allowed_tools, custom) pass as given."""
    if not isinstance(choice, dict) or not isinstance(choice.get("type"), str):
        return False
    if choice["type"] != "function":
        return True
    fn = choice.get("function")
    name = fn.get("name") if isinstance(fn, dict) else choice.get("name")
    return isinstance(name, str) and bool(name)


def validate_row(row: JSONInput, path: Path, lineno: int) -> InputError | None:
    """The first problem with one parsed line, or None."""
    if not isinstance(row, dict):
        return InputError(f"expected a JSON object, got {type(row).__name__}", path, lineno)
    messages = row.get("messages")
    if messages is None:  # any other field is the item's own, so a misspelt `messages` is only found missing
        typo = closest("messages", [k for k in row if isinstance(row.get(k), list)])
        return InputError("missing" + (f" (the line has `{typo}`: did you mean `messages`?)" if typo else ""),
                          path, lineno, "messages")
    if not isinstance(messages, list) or not messages:
        return InputError("must be a non-empty list of messages", path, lineno, "messages")
    for i, msg in enumerate(messages):
        err = _check_message(msg, i, path, lineno)
        if err:
            return err
    tools = row.get("tools")
    if tools is not None and not isinstance(tools, list):
        return InputError("must be a list of function tools", path, lineno, "tools")
    choice = row.get("tool_choice")
    if choice is not None and not (choice in TOOL_CHOICES or _named_tool(choice)):
        return InputError(f"must be one of {', '.join(TOOL_CHOICES)} or an object such as {{\"type\": \"function\", "
                          "\"function\": {\"name\": ...}}", path, lineno, "tool_choice")
    followups = row.get(FOLLOWUPS)
    if followups is not None and (err := _check_followups(followups, path, lineno)) is not None:
        return err
    rid = row.get("id")
    if rid is not None and (isinstance(rid, bool) or not isinstance(rid, (str, int)) or str(rid) == ""):
        return InputError("must be a non-empty string or an integer", path, lineno, "id")
    return None


CONTENT_ID_HEX = 12  # 48 bits: a collision needs ~16 million distinct lines (birthday bound)


def content_id(row: JSONMapping) -> str:
    """The id of a line without `id`: a short hash of its canonical JSON (keys sorted, no spaces, UTF-8).

    OpenAI's RFT format has no id field, and a line number moves whenever a line is inserted, removed or a blank
    line added, which would silently pair the wrong items across runs. The content hash stays put; it changes
    only when the line's content does (and then it is another item).
    """
    import hashlib

    canonical = json.dumps(row, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:CONTENT_ID_HEX]


def iter_items(path: str | Path, skip_invalid: bool = False, skipped: list[InputError] | None = None,
               check_duplicates: bool = True) -> Iterator[Item]:
    """Stream items. Raises the first InputError unless skip_invalid, which appends it to `skipped`.

    `check_duplicates=False` skips the duplicate-id bookkeeping (a dict of every id), for a pass over a dataset
    whose ids were already checked: it then holds one item at a time.
    """
    path = Path(path)
    seen: dict[str, int] = {}
    repeats: dict[str, int] = {}  # content ids seen so far, for identical lines
    for lineno, row in iter_jsonl(path):
        err = row if isinstance(row, InputError) else validate_row(row, path, lineno)
        if err is None and isinstance(row, dict):  # validate_row refuses every line that is not an object
            if row.get("id") is not None:
                item_id = str(row["id"])
            else:  # identical lines (an upsampled item) are numbered in file order: abc123, abc123-2, ...
                item_id = content_id(row)
                count = repeats[item_id] = repeats.get(item_id, 0) + 1
                if count > 1:
                    item_id = f"{item_id}-{count}"
            if check_duplicates and item_id in seen:
                err = InputError(f"duplicate id {item_id!r} (first on line {seen[item_id]})", path, lineno, "id")
            else:
                if check_duplicates:
                    seen[item_id] = lineno
                yield Item(item_id, lineno, row)
                continue
        if err is not None:
            if not skip_invalid:
                raise err
            if skipped is not None:
                skipped.append(err)


def check_dataset(path: str | Path, format_check: FormatCheck | None = None) -> tuple[int, list[InputError]]:
    """Every problem in a dataset (for `validate dataset`): (valid item count, errors); each valid item also goes
    through `format_check` (the RFT format's rules) when one is given."""
    errors: list[InputError] = []
    count = 0
    for item in iter_items(path, skip_invalid=True, skipped=errors):
        count += 1
        if format_check is not None:
            format_check.add(item)
    return count, errors


@dataclass
class DatasetCheck:
    """`validate dataset`'s findings. Every non-blank line is counted once: valid, or with a problem (a line that
    cannot be read as an item, or an item the RFT format's rules refuse); warnings are findings apart, counted on
    their own, so that valid + with problems is every line."""

    path: Path
    items: int  # lines read as items; the format check saw each
    unreadable: list[InputError]  # one per line that is not an item
    format: FormatCheck
    # the grader's `item.*` templates resolved on every item (`--grader`): problems of the grader with this data,
    # named apart so that the line counts still add up
    template_problems: list[InputError] = field(default_factory=list)

    @property
    def problems(self) -> list[InputError]:
        return self.unreadable + self.format.problems() + self.template_problems

    @property
    def lines(self) -> int:
        return self.items + len(self.unreadable)

    @property
    def with_problems(self) -> int:
        return len(self.unreadable) + self.format.error_lines

    @property
    def valid(self) -> int:
        return self.items - self.format.error_lines

    def summary(self) -> str:
        """The closing line: the lines, split into valid and with problems, and the warnings apart."""
        n = len(self.format.warnings())
        apart = (f" ({n} warning{'s' if n != 1 else ''} above, not counted as "
                 f"{'a problem' if n == 1 else 'problems'})") if n else ""
        n_t = len(self.template_problems)
        templates = f"; {n_t} problem{'s' if n_t != 1 else ''} of the grader's item fields above" if n_t else ""
        if self.with_problems or templates:
            return (f"{self.path}: {self.lines} line{'s' if self.lines != 1 else ''}: {self.valid} valid, "
                    f"{self.with_problems} with problems"
                    f"{templates}{apart}")
        if not self.lines:
            return f"{self.path}: the dataset has no items"
        return f"{self.path}: {self.valid} items, no problems{apart}"


def inspect_dataset(path: str | Path, allow_trailing_assistant: bool = False,
                    reference_fields: frozenset[str] | None = None) -> DatasetCheck:
    """Every problem and warning of a dataset file (`validate dataset`), each line counted once."""
    path = Path(path)
    rft = FormatCheck(path, allow_trailing_assistant, reference_fields)
    count, unreadable = check_dataset(path, rft)
    return DatasetCheck(path, count, unreadable, rft)


def load_dataset(path: str | Path, skip_invalid: bool = False) -> Dataset:
    """Load a whole dataset. Without skip_invalid, every problem is collected and raised together."""
    path = Path(path)
    skipped: list[InputError] = []
    items = list(iter_items(path, skip_invalid=True, skipped=skipped))
    if skipped and not skip_invalid:
        raise InputErrors(skipped)
    if not items and not skipped:
        raise InputError("the dataset has no items", path)
    return Dataset(path, items, skipped)


# ---- the RFT format's own rules, beyond what makes a line readable -----------------------------------------------

ALLOW_TRAILING_ASSISTANT = "--allow-trailing-assistant"
# Keys of a line that are not data a grader compares with: OpenAI reserves messages and tools; tool_choice and id
# are rfteval's (the item's own tool choice, its stable id), and so are its scripted user turns.
RESERVED_KEYS = frozenset({"messages", "tools", "tool_choice", "id", "rfteval_followups"})
_LINES_NAMED = 5


def _lines(lines: list[int]) -> str:
    shown = ", ".join(str(n) for n in lines[:_LINES_NAMED])
    return f"line{'s' if len(lines) > 1 else ''} {shown}" + (f", … (+{len(lines) - _LINES_NAMED})"
                                                             if len(lines) > _LINES_NAMED else "")


@dataclass
class FormatCheck:
    """The RFT format's rules over a dataset's items, one item at a time (a run's dataset may be large).

    An RFT line is a prompt: Azure's RFT requires its last message to be the user's and refuses `system`
    messages; OpenAI's RFT schema has the roles developer, user, assistant and tool (no system) and reads every
    field but messages and tools as `item.*`. Azure's published sample lines (system + user + the assistant's
    answer, no reference field) break all three: the model is sent the answer and continues it, and no grader
    can read a reference from them.

    `reference_fields`: the top-level fields the configured grader reads from an item (None: no grader known, so
    any field but the reserved ones counts as a reference).
    """

    path: Path
    allow_trailing_assistant: bool = False
    reference_fields: frozenset[str] | None = None
    limit: int = 50
    errors: list[InputError] = field(default_factory=list)
    items: int = 0
    system_lines: list[int] = field(default_factory=list)
    no_reference_lines: list[int] = field(default_factory=list)
    not_user_last: dict[str, list[int]] = field(default_factory=dict)  # the last role (tool, ...) → lines
    _more: int = 0

    def add(self, item: Item) -> None:
        self.items += 1
        messages = [m for m in item.messages if isinstance(m, dict)]
        last = len(item.messages) - 1
        if not self.allow_trailing_assistant and messages and messages[-1].get("role") == "assistant":
            if len(self.errors) < self.limit:
                if messages[-1].get("tool_calls") and not messages[-1].get("content"):
                    # a tool call with no tool result after it: no server takes it, and it is no answer either
                    message = ("the last message is the assistant's tool call, with no tool message holding its "
                               "result after it: end the line with the tool's result (or the user's message), or "
                               f"pass {ALLOW_TRAILING_ASSISTANT} to send it anyway")
                else:
                    message = ("the last message is the assistant's: an RFT line is a prompt, so the model would be "
                               "sent the answer and continue it; end the line with the user's message and move the "
                               "answer to a field the grader reads (e.g. reference_answer), or pass "
                               f"{ALLOW_TRAILING_ASSISTANT} to send it anyway")
                self.errors.append(InputError(message, self.path, item.line, f"messages[{last}].role"))
            else:
                self._more += 1
        role = messages[-1].get("role") if messages else None
        if isinstance(role, str) and role not in ("user", "assistant"):  # assistant: the error above
            self.not_user_last.setdefault(role, []).append(item.line)
        if any(m.get("role") == "system" for m in messages):
            self.system_lines.append(item.line)
        fields = set(item.data) - RESERVED_KEYS
        wanted = fields if self.reference_fields is None else fields & self.reference_fields
        # a grader that reads no item field (a rubric judge over {{ item.messages }} and the answer, as the
        # cookbook's HealthBench RFT grades) needs no reference: no line lacks one
        if not wanted and self.reference_fields != frozenset():
            self.no_reference_lines.append(item.line)

    @property
    def error_lines(self) -> int:
        """The lines refused, each once: those named in `problems()` and those only counted in its last."""
        return len(self.errors) + self._more

    def problems(self) -> list[InputError]:
        """The errors (one per line, `limit` at most, the rest counted in the last)."""
        if self._more and self.errors:
            last = self.errors[-1]
            return [*self.errors[:-1], InputError(f"{last.message} (and {self._more} more such lines)", last.file,
                                                  last.line, last.field)]
        return list(self.errors)

    def warnings(self) -> list[str]:
        """One line per finding that is not an error, each with its count and the first lines."""
        out = []
        if self.system_lines:
            n = len(self.system_lines)
            out.append(f"{self.path}: {n} of {self.items} lines hold a system message ({_lines(self.system_lines)}): "
                       "Azure's RFT refuses them and OpenAI's RFT format has no system role (developer is its role)")
        for role, lines in self.not_user_last.items():
            out.append(f"{self.path}: {len(lines)} of {self.items} lines end with a {role} message ({_lines(lines)}): "
                       "Azure's RFT requires the last message to be the user's (OpenAI's RFT takes the line as a "
                       "prompt either way)")
        if self.no_reference_lines:
            n = len(self.no_reference_lines)
            if self.reference_fields is None:
                what = "hold no field but messages, so no grader can read a reference from them"
            else:
                names = ", ".join(f"item.{f}" for f in sorted(self.reference_fields))
                what = f"hold no field the grader reads as a reference ({names})"
            out.append(f"{self.path}: {n} of {self.items} lines {what} ({_lines(self.no_reference_lines)})")
        return out


def check_format(items: Iterable[Item], path: str | Path, allow_trailing_assistant: bool = False,
                 reference_fields: frozenset[str] | None = None) -> FormatCheck:
    """The RFT format's rules over `items` (see FormatCheck)."""
    check = FormatCheck(Path(path), allow_trailing_assistant, reference_fields)
    for item in items:
        check.add(item)
    return check
