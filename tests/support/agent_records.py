"""Record files of agent runs, written as /work/agents-contract.md fixes them, without the runner that will write them.

An agent run's record is today's record with five fields after the existing ones: `turns`, `stop_reason`,
`tool_calls`, `tool_errors` ({type: count}) and `transcript` (the rollout's generated messages as JSON text). A JSON
line carries them last, in that order; a Parquet file carries them as columns (the transcript a string column, the
tool errors a map). The same records written without them are a plain run's files: the tests compare the two.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from rfteval.data.records import Record, make_record, to_arrow, write_jsonl, write_parquet

AGENT_FIELDS = ("turns", "stop_reason", "tool_calls", "tool_errors", "transcript")


@dataclass(frozen=True)
class Rollout:
    """What an agent run adds to one record."""

    turns: int
    stop_reason: str = "no_tool_calls"
    tool_calls: int = 0
    tool_errors: dict[str, int] = field(default_factory=dict)
    transcript: str | None = None  # None: one made of `turns` turns (transcript_text)

    def fields(self) -> dict[str, object]:
        text = self.transcript if self.transcript is not None else transcript_text(self.turns, self.tool_calls)
        return {"turns": self.turns, "stop_reason": self.stop_reason, "tool_calls": self.tool_calls,
                "tool_errors": dict(self.tool_errors), "transcript": text}


def transcript_text(turns: int, calls: int, result_chars: int = 200) -> str:
    """A rollout's generated messages as JSON text, OpenAI's chat shape: a tool call and its result per turn but the
    last, then the answer. Quotes, backslashes and a line break inside, as real tool output has."""
    messages: list[dict[str, object]] = []
    for t in range(max(turns - 1, 0)):
        call = {"id": f"c{t}", "type": "function",
                "function": {"name": "search", "arguments": json.dumps({"query": f'say "{t}"\\n', "top_k": 3})}}
        messages.append({"role": "assistant", "content": "", "tool_calls": [call] if t < calls else []})
        messages.append({"role": "tool", "tool_call_id": f"c{t}",
                         "content": ('a "quoted" result,\nwith a \\ backslash; ' * result_chars)[:result_chars]})
    messages.append({"role": "assistant", "content": 'The answer: {"transcript": "not a key"}'})
    return json.dumps(messages)


def agent_record(label: str, item: str, epoch: int, score: float | None, rollout: Rollout | None, *,
                 model: str | None = None, usage: Mapping[str, int | None] | None = None,
                 latency_s: float | None = 1.0, error: dict[str, str] | None = None) -> tuple[Record, Rollout | None]:
    r = make_record(run_id="t", model_label=label, model=model or f"m-{label}", item_id=item, epoch=epoch,
                    output_text="final answer", usage=usage or {"input_tokens": 100, "output_tokens": 20,
                                                                "reasoning_tokens": None},
                    latency_s=latency_s, error=error)  # type: ignore[arg-type]
    r.score = score
    return r, rollout


AgentRecords = Sequence[tuple[Record, Rollout | None]]


def _line(record: Record, rollout: Rollout | None, encoder: msgspec.json.Encoder) -> bytes:
    data = msgspec.structs.asdict(record)
    for name in AGENT_FIELDS:  # a Record that already declares them holds them in place; else they go last
        data.pop(name, None)
    if rollout is not None:
        data.update(rollout.fields())
    return encoder.encode(data) + b"\n"


def write_agent_jsonl(records: AgentRecords, path: Path) -> Path:
    """The records as an agent run's JSONL: each line its record, then the agent fields (none on a record whose
    rollout is None, as a failed generation may have)."""
    encoder = msgspec.json.Encoder()
    path.write_bytes(b"".join(_line(r, ro, encoder) for r, ro in records))
    return path


def write_agent_parquet(records: AgentRecords, path: Path) -> Path:
    """The records as an agent run's Parquet file: the record's columns, then one per agent field."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = to_arrow(r for r, _ in records)
    rollouts = [ro.fields() if ro is not None else None for _, ro in records]
    types = {"turns": pa.int64(), "stop_reason": pa.string(), "tool_calls": pa.int64(),
             "tool_errors": pa.map_(pa.string(), pa.int64()), "transcript": pa.string()}
    for name, typ in types.items():
        values = [None if f is None else f[name] for f in rollouts]
        if name == "tool_errors":
            values = [None if v is None else list(v.items()) for v in values]  # type: ignore[attr-defined]
        column = pa.array(values, typ)
        if name in table.column_names:
            table = table.set_column(table.column_names.index(name), name, column)
        else:
            table = table.append_column(name, column)
    pq.write_table(table, path)
    return path


def write_agent(records: AgentRecords, path: Path) -> Path:
    """JSONL or Parquet by the file's suffix."""
    return (write_agent_parquet if path.suffix == ".parquet" else write_agent_jsonl)(records, path)


def write_plain(records: AgentRecords, path: Path) -> Path:
    """The same records without the agent fields: a plain run's file."""
    plain = [r for r, _ in records]
    (write_parquet if path.suffix == ".parquet" else write_jsonl)(plain, path)
    return path


def agent_side(label: str, rollouts: Mapping[str, Sequence[tuple[float, Rollout]]], *, tokens: int = 120,
               latency_s: float = 1.0, model: str | None = None) -> list[tuple[Record, Rollout | None]]:
    """One side: per item, its epochs' (score, rollout); usage and latency grow with the rollout's turns (`tokens`
    and `latency_s` per turn), as a real agent's do."""
    out = []
    for item, epochs in rollouts.items():
        for e, (score, ro) in enumerate(epochs):
            usage = {"input_tokens": tokens * ro.turns - 20 * ro.turns, "output_tokens": 20 * ro.turns,
                     "reasoning_tokens": None}
            out.append(agent_record(label, item, e, score, ro, model=model, usage=usage,
                                    latency_s=latency_s * ro.turns))
    return out
