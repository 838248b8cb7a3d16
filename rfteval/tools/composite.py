"""Several tool boxes as one: python tools (tools.py), Agent RFT's tool endpoints and MCP servers in one run.

Each call goes to the box that has its tool; a name two boxes have is refused when the run starts (one line,
exit 2), since a call could then mean either. A turn's calls still run in order: a stretch of consecutive calls to
one box is one `run_turn` of that box (a python turn stays one sandbox unit), and the state goes through the boxes
in that order. Only python tools keep a state here (a tool server keeps its own, by trace_id), so the state a run
stores is the python tools' own, as without endpoints.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence
from typing import TYPE_CHECKING

from rfteval.errors import InputError
from rfteval.tools.base import UNKNOWN_TOOL, ToolBox, ToolCall, ToolResult, error_result

if TYPE_CHECKING:
    from rfteval.data.json_types import JSONObject, JSONValue


class CompositeTools:
    """Tool boxes routed by tool name; `boxes` are (what they came from, the box), e.g. ("tools.py", PythonTools)."""

    def __init__(self, boxes: Sequence[tuple[str, ToolBox]]):
        self.boxes = list(boxes)
        owner: dict[str, str] = {}
        for source, box in self.boxes:
            for name in sorted(box.names()):
                if name in owner:
                    raise InputError(f"tool {name!r} is both in {owner[name]} and in {source}: a tool name must be "
                                     "one tool's (rename or drop one of them)", source,
                                     field="--mcp" if source == "[tools] mcp" else "--tool-endpoints")
                owner[name] = source
        self._route = {name: box for _, box in self.boxes for name in box.names()}
        self._identity = hashlib.sha256("|".join(box.identity for _, box in self.boxes).encode()).hexdigest()

    @property
    def identity(self) -> str:
        """A hash of every box's identity: any of them changing changes it."""
        return self._identity

    def names(self) -> frozenset[str]:
        return frozenset(self._route)

    async def init_state(self, item: JSONObject) -> JSONObject:
        state: JSONObject = {}
        for _, box in self.boxes:
            state.update(await box.init_state(item))
        return state

    async def run_turn(self, rollout_id: str, item: JSONObject, calls: Sequence[ToolCall],
                       state: JSONObject) -> tuple[list[ToolResult], JSONObject]:
        results: list[ToolResult] = []
        i = 0
        while i < len(calls):
            box = self._route.get(calls[i].name)
            if box is None:
                known = ", ".join(sorted(self._route))
                results.append(error_result(calls[i], UNKNOWN_TOOL,
                                            f"no tool named {calls[i].name!r} (the tools are: {known})"))
                i += 1
                continue
            j = i + 1
            while j < len(calls) and self._route.get(calls[j].name) is box:
                j += 1
            done, state = await box.run_turn(rollout_id, item, calls[i:j], state)
            results += done
            i = j
        return results, state

    @property
    def offered(self) -> list[JSONValue] | None:
        """The function tools the boxes list themselves (MCP servers'), offered to items that declare none."""
        lists = [offered for _, box in self.boxes if (offered := getattr(box, "offered", None)) is not None]
        return [tool for tools in lists for tool in tools] if lists else None

    async def end_rollout(self, rollout_id: str) -> None:
        """The rollout is over: each box that keeps something per rollout (an MCP server's process) lets it go."""
        for _, box in self.boxes:
            end = getattr(box, "end_rollout", None)
            if end is not None:
                await end(rollout_id)

    async def aclose(self) -> None:
        outcomes = await asyncio.gather(*(box.aclose() for _, box in self.boxes), return_exceptions=True)
        failed = [o for o in outcomes if isinstance(o, BaseException)]
        if failed:
            raise failed[0]
