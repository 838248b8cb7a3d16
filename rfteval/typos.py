"""The typos a user makes, named in the one-line error that reports them: a key spelled almost like a known one,
and quotes a word processor curled.

Pure functions over strings and model classes: the grader loader, the spec and the dataset reader call them, so
this module sits at the bottom with errors.py and imports nothing of rfteval's (nor pydantic: a model class is
read through its `model_fields`, the one attribute pydantic gives every model).
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Iterable, Mapping, Sequence

CURLY_QUOTES = "\u201c\u201d\u2018\u2019"  # “ ” ‘ ’: what a word processor or a chat window makes of " and '
_HELD_WORD = 4  # a shorter word is held by too many keys by chance ("in", "id") to name one
_KEYS_LISTED = 12  # past this many, a list of the valid keys is longer than the line it should fit in


def closest(word: str, choices: Iterable[str]) -> str | None:
    """The choice `word` is most likely a misspelling of, or None when none is close: difflib's ratio >= 0.6 (the
    threshold of its get_close_matches, which catches one dropped, doubled or swapped letter in short keys), case
    aside; else the one choice that holds the word whole (`metric` for `evaluation_metric`)."""
    pool = [c for c in dict.fromkeys(choices) if c != word]
    folded = {c.lower(): c for c in reversed(pool)}  # the case-folded match maps back to the choice as spelled
    found = difflib.get_close_matches(word, pool, n=1) or [
        folded[f] for f in difflib.get_close_matches(word.lower(), list(folded), n=1)]
    if found:
        return found[0]
    holding = [c for c in pool if len(word) >= _HELD_WORD and word.lower() in c.lower()]
    return holding[0] if len(holding) == 1 else None


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """"did you mean `X`?" for the closest choice, or "" when none is close."""
    match = closest(word, choices)
    return f"did you mean `{match}`?" if match is not None else ""


def model_keys(model: type, loc: Sequence[int | str]) -> list[str] | None:
    """The keys a pydantic model takes at `loc` (a validation error's location, the bad key's parent): a nested
    model's fields, through lists, dicts and optional unions; None when `loc` leads to no model."""
    current: object = model
    parts = list(loc)
    while True:
        fields = getattr(current, "model_fields", None)
        if not isinstance(fields, Mapping):
            return None
        if not parts:
            return [str(getattr(info, "alias", None) or name) for name, info in fields.items()]
        name = parts.pop(0)
        info = fields.get(name)
        if info is None:
            return None
        current = _descend(getattr(info, "annotation", None), parts)


def _descend(annotation: object, parts: list[int | str]) -> object:
    """The model class inside an annotation, consuming the dict keys and list indices of `parts` on the way."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return _descend(args[0], parts)
    if origin in (typing.Union, types.UnionType):
        models = [a for a in args if a is not type(None)]
        return _descend(models[0], parts) if len(models) == 1 else None
    if origin in (dict, Mapping) and len(args) == 2:
        if parts:
            parts.pop(0)  # the dict's own key (a model's label)
            return _descend(args[1], parts)
        return None
    if origin in (list, tuple, Sequence) and args:
        if parts and isinstance(parts[0], int):
            parts.pop(0)
            return _descend(args[0], parts)
        return None
    return annotation


def unknown_key(model: type, loc: Sequence[int | str]) -> str:
    """The message for an unknown key at `loc` inside `model`: the key it is most likely a typo of, else the
    keys that level takes (when they are few enough to read)."""
    key = str(loc[-1]) if loc else ""
    keys = model_keys(model, loc[:-1]) or []
    hint = did_you_mean(key, keys)
    if hint:
        return f"unknown key ({hint})"
    if keys and len(keys) <= _KEYS_LISTED:
        return f"unknown key (expected one of {', '.join(keys)})"
    return "unknown key"


E = typing.TypeVar("E", bound=Mapping[str, object])


def typo_first(model: type, errors: Sequence[E]) -> E:
    """The validation error to report: an unknown key close to a known one first (the typo is why a required key
    is "missing", and fixing it fixes both), else the first."""
    for error in errors:
        loc = error.get("loc")
        if error.get("type") == "extra_forbidden" and isinstance(loc, tuple) and loc:
            if closest(str(loc[-1]), model_keys(model, loc[:-1]) or []) is not None:
                return error
    return errors[0]


def curly_quotes(text: str) -> str | None:
    """Where a file that failed to parse holds a curly quote, as the hint its one-line error ends with; None when
    it holds none (a curly quote inside a string is valid, so this is said only once parsing has failed)."""
    at = min((i for i in (text.find(q) for q in CURLY_QUOTES) if i >= 0), default=-1)
    if at < 0:
        return None
    line = text.count("\n", 0, at) + 1
    column = at - (text.rfind("\n", 0, at) + 1) + 1
    where = f"line {line}, column {column}" if "\n" in text.rstrip("\n") else f"column {column}"  # a JSONL line
    return f"contains curly quotes ({text[at]} at {where}): replace them with straight quotes"
