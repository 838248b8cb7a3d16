"""Generate `rfteval run --export-requests` files on several nodes, for `rfteval run --import-responses`.

    # Ray Data LLM over a Ray cluster (run on its head node; one model per invocation):
    python scripts/ray_generate.py generate -i requests.jsonl -o results.jsonl \
        --model Qwen/Qwen3-8B --engine vllm --engine-kwargs '{"tensor_parallel_size": 2}' --concurrency 4

    # or N `vllm run-batch` nodes, no Ray:
    python scripts/ray_generate.py shard requests.jsonl --shards 4
    # (node i: vllm run-batch -i requests.shard-0i-of-04.jsonl -o results.shard-0i-of-04.jsonl --model ...)
    python scripts/ray_generate.py merge results.shard-*.jsonl -o results.jsonl --requests requests.jsonl

Bad input is one `FILE:LINE: field: message` line and exit 2; nothing is half-written.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from rfteval.errors import InputError
from rfteval.run.batch.ray_llm import (
    ENGINES,
    EngineOptions,
    build_processor,
    generate,
    merge_outputs,
    read_requests,
    shard_requests,
)


def _json_object(text: str, option: str, example: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise InputError(f"not JSON: {exc}", field=option) from None
    if not isinstance(value, dict):
        raise InputError(f"must be a JSON object, e.g. '{example}'", field=option)
    return value


def cmd_generate(a: argparse.Namespace) -> int:
    import ray

    inputs = [Path(p) for p in a.input]
    models = read_requests(inputs).models
    if len(models) > 1:
        raise InputError(f"requests for {len(models)} models ({', '.join(models)}): one engine serves one model, "
                         "run once per exported file", field="--input")
    opts = EngineOptions(model=a.model, engine=a.engine,
                         engine_kwargs=_json_object(a.engine_kwargs, "--engine-kwargs", '{"tensor_parallel_size": 2}'),
                         concurrency=a.concurrency, batch_size=a.batch_size,
                         default_max_tokens=a.max_tokens_default or None, served_model=a.served_model,
                         chat_template_kwargs=_json_object(a.chat_template_kwargs, "--chat-template-kwargs",
                                                           '{"enable_thinking": false}') or None)
    ray.init(address=a.address, include_dashboard=False, ignore_reinit_error=True)
    report = generate(inputs, Path(a.output), build_processor(opts), opts.default_max_tokens, opts.served_model)
    if report.ignored_keys:
        keys = ", ".join(f"{k} ({n} lines)" for k, n in sorted(report.ignored_keys.items()))
        print(f"not honoured by the engine path and left out: {keys}", file=sys.stderr)
    print(f"wrote {a.output}: {report.written} lines ({report.errors} errors)"
          + (f", first error: {report.first_error[:200]}" if report.errors else ""))
    if report.missing:
        print(f"{len(report.missing)} requests came back with no row (first: {report.missing[0]}); "
              "import what was written, then export again for the rest", file=sys.stderr)
        return 3
    print(f"next: rfteval run SPEC --import-responses {a.output}")
    return 0


def cmd_shard(a: argparse.Namespace) -> int:
    for path, n in shard_requests(Path(a.requests), a.shards, Path(a.out_dir) if a.out_dir else None):
        print(f"{path}\t{n} lines")
    return 0


def cmd_merge(a: argparse.Namespace) -> int:
    n = merge_outputs([Path(p) for p in a.outputs], Path(a.output), [Path(p) for p in a.requests] or None)
    print(f"wrote {a.output}: {n} lines; next: rfteval run SPEC --import-responses {a.output}")
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ray_generate.py", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("generate", help="run request files through Ray Data LLM (vLLM or SGLang)")
    g.add_argument("-i", "--input", action="append", required=True, help="an --export-requests file (repeat it)")
    g.add_argument("-o", "--output", required=True, help="the Batch API output file to write")
    g.add_argument("--model", required=True, help="what the engine loads: a Hugging Face id or a local path")
    g.add_argument("--engine", choices=ENGINES, default="vllm")
    g.add_argument("--engine-kwargs", default="{}", help="JSON object for the engine, e.g. tensor_parallel_size")
    g.add_argument("--chat-template-kwargs", default="{}",
                   help="JSON object for the chat template, e.g. enable_thinking for Qwen3")
    g.add_argument("--concurrency", type=int, default=1, help="engine replicas (each with its own GPUs)")
    g.add_argument("--batch-size", type=int, default=64, help="rows per batch sent to a replica")
    g.add_argument("--max-tokens-default", type=int, default=4096,
                   help="output limit for requests that set none (0: the engine's own)")
    g.add_argument("--served-model", default=None, help="the model name written in the outputs (default: the request's)")
    g.add_argument("--address", default=None, help="Ray cluster address (default: the one this node is in, else local)")
    g.set_defaults(fn=cmd_generate)
    s = sub.add_parser("shard", help="split an export into N files by custom_id, for N `vllm run-batch` nodes")
    s.add_argument("requests")
    s.add_argument("--shards", type=int, required=True)
    s.add_argument("--out-dir", default=None, help="default: beside the request file")
    s.set_defaults(fn=cmd_shard)
    m = sub.add_parser("merge", help="join the shards' output files into one, refusing duplicates and gaps")
    m.add_argument("outputs", nargs="+")
    m.add_argument("-o", "--output", required=True)
    m.add_argument("--requests", action="append", default=[], help="the request file(s): every custom_id must be back")
    m.set_defaults(fn=cmd_merge)
    return p


def main(argv: list[str] | None = None) -> int:
    a = parser().parse_args(argv)
    try:
        return int(a.fn(a))
    except InputError as exc:
        print(str(exc), file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
