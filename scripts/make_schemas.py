#!/usr/bin/env python3
"""Write the JSON Schemas of rfteval's input files into docs/schemas/, generated from the types that read them.

- dataset-line.schema.json: one line of a dataset (rfteval.data.dataset.DatasetLine, msgspec's schema of it);
- grader.schema.json: a grader file: one grader of any registered type (each type's pydantic config), also as
  {"grader": ...} or inside a fine-tuning job, as `rfteval.graders.load_grader` takes them;
- spec.schema.json: an eval spec (rfteval.run.spec.RunSpec), for TOML editors that take a JSON Schema.

    python scripts/make_schemas.py           rewrite the schema files that are out of date
    python scripts/make_schemas.py --check   exit 1, naming them, when any is out of date
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "schemas"
sys.path.insert(0, str(ROOT))  # the rfteval beside this script, whichever one is installed
DRAFT = "https://json-schema.org/draft/2020-12/schema"


def dataset_line_schema() -> dict[str, Any]:
    import msgspec

    from rfteval.data.dataset import DatasetLine

    schema: dict[str, Any] = msgspec.json.schema(DatasetLine)
    return {"$schema": DRAFT, "title": "rfteval dataset line",
            "description": "One line of an RFT dataset (JSONL): the prompt's `messages` and any fields of the item's "
                           "own, which graders read as item.*. Generated from rfteval.data.dataset.DatasetLine by "
                           "scripts/make_schemas.py.", **schema}


def _sub_grader(definition: dict[str, Any]) -> None:
    """A grader config's definition as rfteval reads it: `name` may be left out (the loader fills it in with the
    multi key, else the type: GraderConfig._default_name, which the schema of the fields alone cannot show)."""
    required = definition.get("required", [])
    if "name" in required:
        required.remove("name")
    definition["properties"]["name"]["description"] = ("OpenAI's API asks for one; rfteval fills in the multi key "
                                                       "for a sub-grader, else the type, and says so")


def grader_schema() -> dict[str, Any]:
    from pydantic.json_schema import models_json_schema

    import rfteval.graders  # noqa: F401  (registers every grader type)
    from rfteval.graders.base import REGISTRY
    from rfteval.graders.loader import JOB_REFUSES
    from rfteval.graders.multi import MultiConfig

    configs = tuple(entry.config for entry in REGISTRY.values())
    _, generated = models_json_schema([(c, "validation") for c in configs], ref_template="#/$defs/{model}")
    defs: dict[str, Any] = dict(generated["$defs"])
    for name in (c.__name__ for c in configs):
        _sub_grader(defs[name])
    defs.pop("GraderConfig", None)  # the base class a multi's `graders` is typed with: its members are these

    def one_of(names: list[str]) -> dict[str, Any]:
        return {"oneOf": [{"$ref": f"#/$defs/{n}"} for n in names],
                "discriminator": {"propertyName": "type", "mapping": {
                    t: f"#/$defs/{c.__name__}" for t, c in ((e.name, e.config) for e in REGISTRY.values())
                    if c.__name__ in names}}}

    every = [c.__name__ for c in configs]
    inside_multi = [n for n in every if n != MultiConfig.__name__]  # a multi holds no multi
    in_job = [n for n in every if defs[n]["properties"]["type"].get("const") not in JOB_REFUSES]
    defs["Grader"] = one_of(every)
    defs["SubGrader"] = one_of(inside_multi)
    defs["JobGrader"] = one_of(in_job)
    # a multi's graders: named sub-graders, or the API reference's one grader object
    defs[MultiConfig.__name__]["properties"]["graders"] = {
        "anyOf": [{"type": "object", "additionalProperties": {"$ref": "#/$defs/SubGrader"}, "minProperties": 1,
                   "propertyNames": {"pattern": "^[A-Za-z_][A-Za-z0-9_]*$"}},
                  {"$ref": "#/$defs/SubGrader"}],
        "description": "the sub-graders by the name calculate_output uses for each"}
    return {"$schema": DRAFT, "title": "rfteval grader file",
            "description": "A grader in OpenAI's format (a grader object, {\"grader\": ...}, or a reinforcement "
                           "fine-tuning job holding one). Generated from rfteval's grader configs by "
                           "scripts/make_schemas.py.",
            "anyOf": [{"$ref": "#/$defs/Grader"},
                      {"type": "object", "required": ["grader"], "properties": {"grader": {"$ref": "#/$defs/Grader"}}},
                      {"type": "object", "required": ["method"], "properties": {"method": {
                          "type": "object", "required": ["reinforcement"], "properties": {"reinforcement": {
                              "type": "object", "required": ["grader"],
                              "properties": {"grader": {"$ref": "#/$defs/JobGrader"}}}}}}}],
            "$defs": dict(sorted(defs.items()))}


def spec_schema() -> dict[str, Any]:
    from rfteval.graders.judged import REASONING_EFFORTS
    from rfteval.run.spec import RunSpec

    schema = copy.deepcopy(RunSpec.model_json_schema())
    for table in ("SamplingSpec", "ModelSpec"):  # checked by a validator, so the generated schema only says string
        effort = schema["$defs"][table]["properties"]["reasoning_effort"]
        effort["anyOf"][0]["enum"] = list(REASONING_EFFORTS)
    return {"$schema": DRAFT, "title": "rfteval eval spec",
            "description": "An eval spec (TOML) for `rfteval run` and `rfteval validate spec`. Paths are relative to "
                           "the spec file; an API key never goes in it, only the name of the variable holding one "
                           "(api_key_env). Generated from rfteval.run.spec.RunSpec by scripts/make_schemas.py.",
            **schema}


def render(schema: dict[str, Any]) -> str:
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def files(out: Path = OUT) -> dict[Path, str]:
    return {out / "dataset-line.schema.json": render(dataset_line_schema()),
            out / "grader.schema.json": render(grader_schema()),
            out / "spec.schema.json": render(spec_schema())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when a committed schema is out of date")
    parser.add_argument("--out", type=Path, default=OUT, help="the folder to write into (default: docs/schemas)")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT / "scripts"))
    from generated_files import write_or_check

    return write_or_check(files(args.out), args.check, "scripts/make_schemas.py")


if __name__ == "__main__":
    sys.exit(main())
