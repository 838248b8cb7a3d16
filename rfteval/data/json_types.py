"""Names for JSON-shaped data, so a signature says what crosses it instead of `Any`.

Dataset items, server bodies, grader configs and result lines are JSON: `JSONValue` says so precisely, and a
reader narrows it (`isinstance`) before use, which is the check `Any` let code skip. `JSONObject` is the parsed
object; `JSONMapping` is what a function only reads (a Mapping is covariant, so a `dict[str, int]` passes).
Opaque values that are only carried, never read, are `object`, not one of these. `JSONField` is JSONValue for the
fields of msgspec Structs and pydantic models, which read their annotations at run time (see below).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, TypeAlias

JSONScalar: TypeAlias = None | bool | int | float | str
JSONValue: TypeAlias = "JSONScalar | list[JSONValue] | dict[str, JSONValue]"
JSONObject: TypeAlias = "dict[str, JSONValue]"
# read-only views: what a function that only reads JSON takes
JSONInput: TypeAlias = "JSONScalar | Sequence[JSONInput] | Mapping[str, JSONInput]"
JSONMapping: TypeAlias = "Mapping[str, JSONInput]"

if TYPE_CHECKING:
    JSONField: TypeAlias = JSONValue
else:
    # msgspec and pydantic evaluate field annotations at run time, and neither takes the string alias above
    # (msgspec 0.23 takes no recursive alias at all): there the field is left free, which is what a JSON decoder
    # produces anyway (None, bool, int, float, str, list, dict: a JSONValue), with no per-value validation walk.
    # The checker sees JSONValue, so every reader of such a field narrows it.
    from typing import Any

    JSONField = Any
