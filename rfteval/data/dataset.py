"""RFT dataset loading: OpenAI's JSONL format, streamed, every problem named by file and line."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from rfteval.errors import InputError, InputErrors

if TYPE_CHECKING:
    from rfteval.data.json_types import JSONInput, JSONMapping, JSONObject, JSONValue

ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})


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
                yield lineno, InputError(f"invalid JSON: {exc.msg} (column {exc.colno})", path, lineno)


def _check_message(msg: JSONInput, index: int, path: Path, lineno: int) -> InputError | None:
    where = f"messages[{index}]"
    if not isinstance(msg, dict):
        return InputError("must be an object with role and content", path, lineno, where)
    role = msg.get("role")
    if not isinstance(role, str) or role not in ROLES:
        return InputError(f"role must be one of {', '.join(sorted(ROLES))}, got {role!r}", path, lineno, f"{where}.role")
    if "content" not in msg and not msg.get("tool_calls"):
        return InputError("missing content", path, lineno, f"{where}.content")
    content = msg.get("content")
    if content is not None and not isinstance(content, (str, list)):
        return InputError("must be a string or a list of content parts", path, lineno, f"{where}.content")
    return None


TOOL_CHOICES = ("auto", "required", "none")


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
    if messages is None:
        return InputError("missing", path, lineno, "messages")
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


def check_dataset(path: str | Path) -> tuple[int, list[InputError]]:
    """Every problem in a dataset (for `validate dataset`): (valid item count, errors)."""
    errors: list[InputError] = []
    count = sum(1 for _ in iter_items(path, skip_invalid=True, skipped=errors))
    return count, errors


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
