"""rfteval/run/batch/ray_llm.py and scripts/ray_generate.py: request lines → engine rows → Batch API output lines, sharding
for several `vllm run-batch` nodes and merging their outputs, and both paths end to end: exported by `rfteval run
--export-requests`, generated, imported by `--import-responses` into a run that grades.

No GPU, vLLM or SGLang here: the Ray tests run Ray Data on a one-CPU local cluster with a STAND-IN engine stage
(a map_batches function answering as vLLM's stage does: generated_text, token counts, __inference_error__) between
this module's real preprocess and postprocess. The engine processors themselves (build_processor) are untested;
only their configs are built, to check that the installed Ray takes the options.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from rfteval.cli.app import app
from rfteval.errors import InputError
from rfteval.run.batch.lines import CellInfo, entry_from_result, parse_result_lines
from rfteval.run.batch.ray_llm import (
    REQUEST_COLUMN,
    merge_outputs,
    output_line,
    postprocess_row,
    preprocess_row,
    read_requests,
    sampling_params,
    shard_of,
    shard_requests,
)
from tests.support import REPO
from tests.support.cli_run_files import write_run_files
from tests.support.fake_openai import FakeOpenAI
from tests.support.optional import require

sys.path.insert(0, str(REPO / "scripts"))
import ray_generate  # noqa: E402

N_ITEMS = 6
EPOCHS = 2
WRONG_ITEM = "question 3"  # the stand-in engine answers this one wrongly, so grading has something to tell


def body(**extra: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": "hi"}], **extra}


def request_line(cid: str, b: dict[str, Any] | None = None) -> str:
    return json.dumps({"custom_id": cid, "method": "POST", "url": "/v1/chat/completions", "body": b or body()})


# ---------------------------------------------------------------- preprocess: body → sampling_params


def test_sampling_params_from_a_body_for_vllm() -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    b = body(temperature=0.2, top_p=0.9, max_completion_tokens=64, seed=7, stop="END",
             response_format={"type": "json_schema", "json_schema": {"name": "r", "schema": schema}})
    sp = sampling_params(b, "vllm", 4096)
    assert sp == {"temperature": 0.2, "top_p": 0.9, "max_tokens": 64, "seed": 7, "stop": ["END"],
                  "structured_outputs": {"json": json.dumps(schema, sort_keys=True)}}
    # unset: OpenAI's defaults, the default limit, no seed, no guided decoding, and the same keys every time
    plain = sampling_params(body(), "vllm", 4096)
    assert plain == {"temperature": 1.0, "top_p": 1.0, "max_tokens": 4096, "seed": None, "stop": None,
                     "structured_outputs": None}
    assert sampling_params(body(max_tokens=5), "vllm", None)["max_tokens"] == 5
    assert sampling_params(body(response_format={"type": "json_object"}), "vllm", None)["structured_outputs"] == {
        "json_object": True}
    assert sampling_params(body(response_format={"type": "text"}), "vllm", None)["structured_outputs"] is None


def test_sampling_params_for_sglang_use_its_names() -> None:
    schema = {"type": "object"}
    b = body(temperature=0.0, max_completion_tokens=9, seed=3,
             response_format={"type": "json_schema", "json_schema": {"name": "r", "schema": schema}})
    assert sampling_params(b, "sglang", None) == {"temperature": 0.0, "top_p": 1.0, "max_new_tokens": 9, "stop": None,
                                                  "json_schema": json.dumps(schema), "sampling_seed": 3}
    assert "sampling_seed" not in sampling_params(body(), "sglang", None)  # an older SGLang refuses the key
    with pytest.raises(InputError, match="--engine"):
        sampling_params(b, "tgi", None)


def test_preprocess_keeps_the_request_and_hides_its_model() -> None:
    line = request_line("k1", body(temperature=0.5))
    row = preprocess_row({REQUEST_COLUMN: line}, "vllm", 100)
    assert row["messages"] == [{"role": "user", "content": "hi"}] and row["sampling_params"]["temperature"] == 0.5
    assert row[REQUEST_COLUMN] == line and "model" not in row  # a `model` column would ask vLLM for a LoRA adapter


# ---------------------------------------------------------------- postprocess: engine row → output line


CELL = CellInfo("base", "m", "q1", 1, "chat", False)


def test_an_answer_becomes_a_line_that_import_stores_with_usage() -> None:
    line = request_line("k1", body(max_completion_tokens=10))
    engine_row = {REQUEST_COLUMN: line, "generated_text": "Paris", "num_input_tokens": 12, "num_generated_tokens": 2,
                  "__inference_error__": ""}
    out = json.loads(postprocess_row(engine_row, 4096, None)["line"])
    assert out["custom_id"] == "k1" and out["response"]["status_code"] == 200
    assert out["response"]["body"]["usage"] == {"prompt_tokens": 12, "completion_tokens": 2, "total_tokens": 14}
    [(_, parsed)] = list(parse_result_lines(json.dumps(out), "out.jsonl", strict=True))
    what, entry = entry_from_result("k1", CELL, parsed, "s", tier="import")
    assert what == "stored" and entry is not None
    assert entry.output_text == "Paris" and entry.finish_reason == "stop"
    assert entry.usage is not None and entry.usage["input_tokens"] == 12 and entry.usage["output_tokens"] == 2


def test_a_completion_that_used_the_whole_limit_says_length() -> None:
    row = {"generated_text": "a b c", "num_input_tokens": 1, "num_generated_tokens": 10}
    assert output_line("k", body(max_completion_tokens=10), row, None, None)["response"]["body"]["choices"][0][
        "finish_reason"] == "length"
    assert output_line("k", body(), row, 11, None)["response"]["body"]["choices"][0]["finish_reason"] == "stop"


def test_engine_errors_refused_requests_are_stored_others_resent() -> None:
    refused = output_line("k", body(), {"__inference_error__": "ValueError: prompt is longer than 4096"}, None, None)
    assert refused["response"]["status_code"] == 400
    what, entry = entry_from_result("k", CELL, refused, "s")
    assert what == "error" and entry is not None and entry.error is not None and "longer than" in entry.error.message
    died = output_line("k", body(), {"__inference_error__": "RuntimeError: CUDA out of memory"}, None, None)
    assert died["response"]["status_code"] == 500
    assert entry_from_result("k", CELL, died, "s")[0] == "requeue"  # the next export sends it again


def test_a_row_that_skipped_postprocess_still_becomes_its_error_line() -> None:
    from rfteval.run.batch.ray_llm import result_line

    line = request_line("k7")
    failed = {REQUEST_COLUMN: line, "prompt": "hi", "__inference_error__": "RuntimeError: replica died"}
    out = result_line(failed, None, None)
    assert out is not None and out["custom_id"] == "k7" and out["response"]["status_code"] == 500
    assert "replica died" in out["response"]["body"]["error"]["message"]
    ok = postprocess_row({REQUEST_COLUMN: line, "generated_text": "x", "num_input_tokens": 1,
                          "num_generated_tokens": 1, "__inference_error__": ""}, None, None)
    assert result_line(ok, None, None) == json.loads(ok["line"])
    assert result_line({"prompt": "hi", "__inference_error__": "boom"}, None, None) is None  # no request: missing


# ---------------------------------------------------------------- reading request files


@pytest.mark.parametrize("raw,field", [
    ("not json", None),
    ('{"url": "/v1/chat/completions", "body": {"messages": [1]}}', "custom_id"),
    ('{"custom_id": "a", "url": "/v1/responses", "body": {"input": "x"}}', "url"),
    ('{"custom_id": "a", "url": "/v1/chat/completions", "body": {"messages": []}}', "body.messages"),
    (request_line("k0"), "custom_id"),  # the same custom_id twice
])
def test_a_bad_request_line_names_file_line_and_field(tmp_path: Path, raw: str, field: str | None) -> None:
    path = tmp_path / "req.jsonl"
    path.write_text(request_line("k0") + "\n" + raw + "\n")
    with pytest.raises(InputError) as exc:
        read_requests([path])
    assert str(exc.value).startswith(f"{path}:2: " + (f"{field}: " if field else ""))


def test_a_request_file_that_is_not_utf8_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "req.jsonl"
    path.write_bytes(b"\xff\xfe" + request_line("a").encode() + b"\n")
    with pytest.raises(InputError, match=r"req\.jsonl: not UTF-8 text"):
        read_requests([path])
    # a U+2028 inside a string is not a line break
    path.write_text(request_line("b", body(messages=[{"role": "user", "content": "x\u2028y"}]))
                    .replace("\\u2028", "\u2028") + "\n", encoding="utf-8")
    assert read_requests([path]).requests[0].body["messages"][0]["content"] == "x\u2028y"


def test_body_keys_the_engine_cannot_honour_are_counted(tmp_path: Path) -> None:
    path = tmp_path / "req.jsonl"
    path.write_text(request_line("a", body(tools=[], reasoning_effort="low")) + "\n"
                    + request_line("b", body(reasoning_effort="low")) + "\n")
    assert read_requests([path]).ignored_keys == {"tools": 1, "reasoning_effort": 2}


# ---------------------------------------------------------------- sharding and merging


def test_shards_are_stable_by_custom_id_and_lose_nothing(tmp_path: Path) -> None:
    ids = [f"cell-{i}" for i in range(200)]
    path = tmp_path / "req.jsonl"
    path.write_text("".join(request_line(c) + "\n" for c in ids))
    written = shard_requests(path, 4, tmp_path / "shards")
    assert [p.name for p, _ in written] == [f"req.shard-0{i}-of-04.jsonl" for i in range(1, 5)]
    by_shard = {i: [json.loads(x)["custom_id"] for x in p.read_text().splitlines()] for i, (p, _) in enumerate(written)}
    assert sorted(sum(by_shard.values(), [])) == sorted(ids)
    assert all(shard_of(c, 4) == i for i, cs in by_shard.items() for c in cs)
    assert all(20 < len(cs) < 80 for cs in by_shard.values())  # a hash spreads them; none empty or hoarding
    # a re-export of a subset, in another order: every cell lands on the shard it had
    path.write_text("".join(request_line(c) + "\n" for c in reversed(ids[::3])))
    again = shard_requests(path, 4, tmp_path / "again")
    for i, (p, _) in enumerate(again):
        assert {json.loads(x)["custom_id"] for x in p.read_text().splitlines()} <= set(by_shard[i])


def engine_answer(line: dict[str, Any]) -> dict[str, Any]:
    """What the stand-in engine says to one request: right for every question but WRONG_ITEM."""
    text = line["body"]["messages"][-1]["content"]
    reply = "no idea" if text == WRONG_ITEM else f"answer to {text}"
    return {"generated_text": reply, "num_input_tokens": len(text.split()), "num_generated_tokens": len(reply.split()),
            "__inference_error__": ""}


def fake_run_batch(requests: Path, out: Path) -> None:
    """`vllm run-batch -i requests -o out`, as far as the line formats go (reversed: order must not matter)."""
    lines = [json.loads(x) for x in requests.read_text().splitlines()]
    out.write_text("".join(json.dumps(output_line(x["custom_id"], x["body"], engine_answer(x), None, "hf/model")) + "\n"
                           for x in reversed(lines)))


def test_merge_refuses_duplicates_and_missing_custom_ids(tmp_path: Path) -> None:
    req = tmp_path / "req.jsonl"
    req.write_text("".join(request_line(f"c{i}", body(messages=[{"role": "user", "content": f"q{i}"}])) + "\n"
                           for i in range(10)))
    shards = [p for p, _ in shard_requests(req, 2)]
    outs = [p.with_name(p.name.replace("req.", "res.")) for p in shards]
    for s, o in zip(shards, outs):
        fake_run_batch(s, o)
    merged = tmp_path / "merged.jsonl"
    assert merge_outputs(outs, merged, [req]) == 10
    assert sorted(json.loads(x)["custom_id"] for x in merged.read_text().splitlines()) == [f"c{i}" for i in range(10)]
    # a shard given twice: one line naming where, nothing written
    merged.unlink()
    with pytest.raises(InputError, match=r"res\.shard-01-of-02\.jsonl:1: custom_id: duplicate"):
        merge_outputs([outs[0], outs[1], outs[0]], merged)
    assert not merged.exists()
    # a line for a request that was never asked (another export's output mixed in)
    stray = tmp_path / "stray.jsonl"
    stray.write_text(json.dumps(output_line("other", body(), engine_answer({"body": body()}), None, None)) + "\n")
    with pytest.raises(InputError, match=r"stray\.jsonl:1: custom_id: 'other' is in none of the request files"):
        merge_outputs([*outs, stray], merged, [req])
    assert not merged.exists()
    # a shard that lost a line, against the requests
    outs[1].write_text("".join(outs[1].read_text().splitlines(keepends=True)[1:]))
    with pytest.raises(InputError, match="1 of 10 requests have no output line"):
        merge_outputs(outs, merged, [req])
    assert not merged.exists()


def test_the_script_turns_bad_input_into_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "res.jsonl"
    bad.write_text('{"custom_id": "a", "response": {"status_code": 200, "body": {}}}\nnot json\n')
    assert ray_generate.main(["merge", str(bad), "-o", str(tmp_path / "m.jsonl")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"{bad}:2: invalid JSON")
    assert ray_generate.main(["shard", str(tmp_path / "nope.jsonl"), "--shards", "2"]) == 2
    assert "no such file" in capsys.readouterr().err


# ---------------------------------------------------------------- end to end: export → engine → import → grade


def run_args(files: dict[str, Path], server: FakeOpenAI, *extra: str) -> list[str]:
    return ["run", "--dataset", str(files["dataset"]), "--grader", str(files["grader"]), "--model", "base=fake-base",
            "--model", "tuned=fake-tuned", "--epochs", str(EPOCHS), "--base-url", server.base_url,
            "--out", str(files["out"]), "--quiet", "--no-readiness", "--seed", "11", *extra]


@pytest.fixture
def exported(tmp_path: Path, fake_openai: FakeOpenAI) -> tuple[dict[str, Path], dict[str, Path]]:
    files = write_run_files(tmp_path, N_ITEMS, reference="answer to question")
    proc = CliRunner().invoke(app, run_args(files, fake_openai, "--export-requests", str(tmp_path / "req.jsonl")))
    assert proc.exit_code == 0, proc.output
    per_model = {label: tmp_path / f"req.{label}.jsonl" for label in ("base", "tuned")}
    assert all(len(p.read_text().splitlines()) == N_ITEMS * EPOCHS for p in per_model.values())
    return files, per_model


def assert_graded(files: dict[str, Path], server: FakeOpenAI) -> None:
    s = json.loads((files["out"] / "summary.json").read_text())
    for label in ("base", "tuned"):
        m = s["models"][label]
        assert m["records"] == N_ITEMS * EPOCHS and not m["errors"].get("by_type")
        assert m["mean"] == pytest.approx(1 - 1 / N_ITEMS)  # every item right but WRONG_ITEM, in every epoch
    assert server.requests == []  # nothing went to a server: the engine answered everything


@pytest.mark.slow
def test_sharded_run_batch_end_to_end(exported: tuple[dict[str, Path], dict[str, Path]], fake_openai: FakeOpenAI,
                                      tmp_path: Path) -> None:
    files, per_model = exported
    for label, req in per_model.items():
        assert ray_generate.main(["shard", str(req), "--shards", "3"]) == 0
        shards = sorted(tmp_path.glob(f"req.{label}.shard-*-of-03.jsonl"))
        outs = [tmp_path / s.name.replace("req.", "res.") for s in shards]
        for s, o in zip(shards, outs):
            fake_run_batch(s, o)
        merged = tmp_path / f"res.{label}.jsonl"
        assert ray_generate.main(["merge", *map(str, outs), "-o", str(merged), "--requests", str(req)]) == 0
        proc = CliRunner().invoke(app, run_args(files, fake_openai, "--import-responses", str(merged)))
        assert proc.exit_code == (0 if label == "tuned" else 3), proc.output  # base alone leaves tuned missing
    assert_graded(files, fake_openai)


@pytest.fixture(scope="module")
def local_ray() -> Iterator[Any]:
    ray = require("ray", "ray")
    require("ray.data", "ray")
    # Ray's workers unpickle the stand-in by reference to this module (tests.run.batch.test_ray_llm): they need
    # the checkout on their path, ahead of any installed `tests` package
    tests_dir = str(REPO)
    try:
        ray.init(num_cpus=1, include_dashboard=False, ignore_reinit_error=True, log_to_driver=False,
                 runtime_env={"env_vars": {"PYTHONPATH": tests_dir}})
    except Exception as exc:  # noqa: BLE001 - a machine where Ray cannot start its local cluster: say so, skip
        pytest.skip(f"ray is installed but its local cluster did not start: {type(exc).__name__}: {exc}")
    try:
        yield ray
    finally:
        ray.shutdown()


FAILING_ITEM = "question 5"  # the stand-in engine's replica "dies" on this one when asked to fail


@pytest.mark.slow  # importing ray.data.llm
@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_the_engine_configs_take_the_options(engine: str) -> None:
    """The installed Ray accepts the config's names (the processor itself needs the engine: untested here)."""
    require("ray.data.llm", "ray")
    from rfteval.run.batch.ray_llm import EngineOptions, processor_config

    config = processor_config(EngineOptions(model="org/model", engine=engine, engine_kwargs={"tensor_parallel_size": 2},
                                            concurrency=3, batch_size=16))
    assert type(config).__name__ == ("vLLMEngineProcessorConfig" if engine == "vllm" else "SGLangEngineProcessorConfig")
    assert (config.model_source, config.concurrency, config.batch_size) == ("org/model", 3, 16)
    assert config.engine_kwargs["tensor_parallel_size"] == 2 and config.should_continue_on_error


def standin_stage(batch: dict[str, Any], fail: bool = False) -> dict[str, Any]:
    """vLLM's engine stage, as far as its columns go: it reads messages + sampling_params, keeps every other
    column, and adds generated_text, the token counts and __inference_error__ (set, and nothing else, for a row
    that failed, as with should_continue_on_error)."""
    import numpy as np

    answers = []
    for i in range(len(batch[REQUEST_COLUMN])):
        sp = batch["sampling_params"][i]
        assert sp["seed"] is not None and sp["max_tokens"] == 4096  # --seed went through, the default limit too
        messages = [dict(m) for m in batch["messages"][i]]
        if fail and messages[-1]["content"] == FAILING_ITEM:
            answers.append({"generated_text": "", "num_input_tokens": 0, "num_generated_tokens": 0,
                            "__inference_error__": "RuntimeError: engine replica died"})
        else:
            answers.append(engine_answer({"body": {"messages": messages}}))
    out = {k: v for k, v in batch.items() if k not in ("messages", "sampling_params")}
    for key in ("generated_text", "num_input_tokens", "num_generated_tokens", "__inference_error__"):
        out[key] = np.array([a[key] for a in answers])
    return out


def standin_postprocess(row: dict[str, Any]) -> dict[str, Any]:
    """Ray's wrap_postprocess: a row whose engine call failed skips the user's postprocess, as it is."""
    return row if row["__inference_error__"] else postprocess_row(row, 4096, "hf/model")


def standin_processor(ds: Any, fail: bool = False) -> Any:
    """build_processor's pipeline with the stand-in in the engine's place: the real preprocess and postprocess."""
    return (ds.map(lambda row: preprocess_row(row, "vllm", 4096))
            .map_batches(functools.partial(standin_stage, fail=fail), batch_size=4)
            .map(standin_postprocess))


@pytest.mark.slow
def test_ray_data_end_to_end(local_ray: Any, exported: tuple[dict[str, Path], dict[str, Path]],
                             fake_openai: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                             capsys: pytest.CaptureFixture[str]) -> None:
    from rfteval.run.batch.ray_llm import generate

    files, per_model = exported
    results = {label: tmp_path / f"res.{label}.jsonl" for label in per_model}
    report = generate([per_model["tuned"]], results["tuned"], standin_processor, served_model="hf/model")
    assert report.written == N_ITEMS * EPOCHS and report.errors == 0 and report.missing == []
    first = json.loads(results["tuned"].read_text().splitlines()[0])
    assert first["response"]["body"]["model"] == "hf/model" and first["response"]["body"]["usage"]["total_tokens"] > 0
    proc = CliRunner().invoke(app, run_args(files, fake_openai, "--import-responses", str(results["tuned"])))
    assert proc.exit_code == 3, proc.output  # base is still missing
    # the script's generate, with the stand-in where build_processor's engine would be; one item fails
    monkeypatch.setattr(ray_generate, "build_processor", lambda opts: functools.partial(standin_processor, fail=True))
    both = ["-i", str(per_model["base"]), "-i", str(per_model["tuned"])]
    assert ray_generate.main(["generate", *both, "-o", str(tmp_path / "x.jsonl"), "--model", "hf/model"]) == 2
    assert "one engine serves one model" in capsys.readouterr().err and not (tmp_path / "x.jsonl").exists()
    argv = ["generate", "-i", str(per_model["base"]), "-o", str(results["base"]), "--model", "hf/model"]
    assert ray_generate.main(argv) == 0
    out = capsys.readouterr().out
    assert f"wrote {results['base']}: {N_ITEMS * EPOCHS} lines ({EPOCHS} errors)" in out and "replica died" in out
    proc = CliRunner().invoke(app, run_args(files, fake_openai, "--import-responses", str(results["base"])))
    assert proc.exit_code == 3 and f"{EPOCHS} of {2 * N_ITEMS * EPOCHS} cells have no response yet" in proc.stderr, \
        proc.output
    # the next export holds exactly the failed cells; generated again (the replica is back), imported: complete
    again = tmp_path / "again.jsonl"
    proc = CliRunner().invoke(app, run_args(files, fake_openai, "--export-requests", str(again)))
    assert proc.exit_code == 0, proc.output
    assert [json.loads(x)["body"]["messages"][-1]["content"] for x in again.read_text().splitlines()] == [
        FAILING_ITEM] * EPOCHS
    monkeypatch.setattr(ray_generate, "build_processor", lambda opts: standin_processor)
    assert ray_generate.main(["generate", "-i", str(again), "-o", str(tmp_path / "again.out.jsonl"),
                              "--model", "hf/model"]) == 0
    proc = CliRunner().invoke(app, run_args(files, fake_openai, "--import-responses", str(tmp_path / "again.out.jsonl")))
    assert proc.exit_code == 0, proc.output
    assert_graded(files, fake_openai)
