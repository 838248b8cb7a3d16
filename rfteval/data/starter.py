"""`rfteval init DIR`: a starter eval that works as written: a dataset, a grader, a spec naming them, a CI gate and a
short README, which `rfteval validate` passes and `rfteval run` runs once the spec's endpoint is a real server.

The files are the formats' own examples (an RFT dataset, OpenAI's grader JSON, rfteval's spec), so they live beside
the formats; tests/cli/test_init.py validates, runs and gates them, so an example that drifts from its format fails
there, not in a user's first run.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from rfteval.data.outfile import check_output, write_text_atomic
from rfteval.errors import InputError

DEFAULT_NAME = "starter"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")  # a run directory's name, as the spec's labels are
PLACEHOLDER_URL = "http://127.0.0.1:8000/v1"  # a server on this machine (vLLM's port): nothing leaves it unasked
KEY_ENV = "OPENAI_API_KEY"

# Short questions with one-word answers: any chat model answers them, and a contains-check grades them, so the first
# run says something before a real dataset exists.
ITEMS = (
    ("What is the capital of France? Answer with one word.", "Paris"),
    ("What is 7 times 8? Answer with the number only.", "56"),
    ("Which planet is known as the Red Planet? Answer with one word.", "Mars"),
    ("What is the chemical symbol for gold? Answer with the symbol only.", "Au"),
    ("How many sides does a hexagon have? Answer with the number only.", "6"),
    ("What is the largest ocean on Earth? Answer with its name only.", "Pacific"),
    ("Who wrote 'Pride and Prejudice'? Answer with the author's surname only.", "Austen"),
    ("At sea level, at how many degrees Celsius does water boil? Answer with the number only.", "100"),
)

GRADER = {
    "type": "string_check",
    "name": "contains_answer",
    "input": "{{ sample.output_text }}",
    "reference": "{{ item.answer }}",
    "operation": "ilike",  # the answer anywhere in the output, case aside: "Paris." and "paris" both pass
}


@dataclass(frozen=True)
class Starter:
    """What `write_starter` wrote: the folder, the run's name, and each file in the order written."""

    directory: Path
    name: str
    files: tuple[Path, ...]


def dataset_text() -> str:
    return "".join(json.dumps({"id": f"q{n}", "messages": [{"role": "user", "content": question}], "answer": answer})
                   + "\n" for n, (question, answer) in enumerate(ITEMS, 1))


def grader_text() -> str:
    return json.dumps(GRADER, indent=2) + "\n"


def spec_text(name: str) -> str:
    return f'''# The eval spec of `rfteval run` (README: "The spec"). Paths are relative to this file.
name = "{name}"
dataset = "dataset.jsonl"
grader = "grader.json"
epochs = 3                              # samples per item and model: the statistics need several
out = "runs/{name}"

[endpoint]                              # any OpenAI-compatible server: vLLM, SGLang, llama.cpp, Ollama, OpenAI
base_url = "{PLACEHOLDER_URL}"  # a placeholder: your server's (remove the line for OpenAI's)
api_key_env = "{KEY_ENV}"         # the NAME of the variable holding the key, never the key itself

[sampling]
temperature = 1.0
max_output_tokens = 256

[models.base]                           # the baseline: the model before fine-tuning, as the server names it
model = "base-model"

[models.tuned]                          # the candidate: the fine-tuned checkpoint
model = "tuned-model"
'''


def ci_text(directory: str, name: str) -> str:
    return f'''# A GitHub Actions workflow: copy it to .github/workflows/rft-eval.yml. On every pull request it checks the
# inputs, runs base and tuned, and fails the check when the tuned model is shown worse than the base by more than
# 0.02 (the gate: `--require-improvement` asks for a shown improvement instead). The comparison is the job summary.
name: rft-eval
on: pull_request
jobs:
  eval:
    runs-on: ubuntu-latest
    steps:
      - uses: actions/checkout@v4
      - uses: actions/setup-python@v5
        with: {{python-version: "3.11"}}
      # rfteval is not on PyPI: set the repository variable RFTEVAL_PIP_SPEC to what pip installs it from (a git URL
      # such as "rfteval @ git+https://github.com/OWNER/rfteval", or a wheel of yours); unset, this step fails here
      - run: pip install "${{{{ vars.RFTEVAL_PIP_SPEC }}}}"
      - name: Check the inputs (no model is called)
        run: rfteval validate spec {directory}/spec.toml
      - name: Run base and tuned
        env: {{{KEY_ENV}: "${{{{ secrets.{KEY_ENV} }}}}"}}
        run: rfteval run {directory}/spec.toml --base-url "${{{{ vars.RFTEVAL_BASE_URL }}}}" -q
      - name: The gate
        run: rfteval compare {directory}/runs/{name} --max-drop 0.02 --markdown compare.md
      - name: Job summary
        if: always()
        run: '[ -f compare.md ] && cat compare.md >> "$GITHUB_STEP_SUMMARY" || true'
'''


def readme_text(directory: str, name: str) -> str:
    return f'''# {name}: an RFT eval

Written by `rfteval init`. Replace the examples with your task, then check before you spend:

- `dataset.jsonl`: one item per line in OpenAI's RFT format: the prompt's `messages`, and the fields the grader
  reads (`answer` here, read as `{{{{ item.answer }}}}`).
- `grader.json`: OpenAI's grader format, as uploaded to the fine-tuning API (here a `string_check`: the answer
  anywhere in the output, case aside).
- `spec.toml`: the run: the dataset, the grader, the endpoint (a placeholder address: set your server's), the key's
  variable (its name; the key never goes in a file) and the models.
- `ci-gate.yml`: a GitHub Actions workflow running the eval and the gate on every pull request. It needs three
  settings of your repository: the variables `RFTEVAL_PIP_SPEC` (where pip installs rfteval from: it is not on
  PyPI) and `RFTEVAL_BASE_URL` (your server), and the secret named in `spec.toml`.

```sh
rfteval validate dataset {directory}/dataset.jsonl --grader {directory}/grader.json
rfteval validate grader {directory}/grader.json --dataset {directory}/dataset.jsonl
rfteval validate spec {directory}/spec.toml
rfteval run {directory}/spec.toml                    # base and tuned, 3 epochs each, into {directory}/runs/{name}
rfteval compare {directory}/runs/{name} --max-drop 0.02
```
'''


def starter_name(directory: Path) -> str:
    """The run's name: the folder's, when it is a plain name, else "starter"."""
    name = directory.resolve().name
    return name if _NAME.match(name) else DEFAULT_NAME


def write_starter(directory: str | Path) -> Starter:
    """Write the starter into `directory` (made when missing). Nothing is overwritten: when any of its files is
    already there, or cannot be written, one InputError names it before anything is written."""
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise InputError("is a file; give a folder to write the starter into", directory)
    name, shown = starter_name(directory), directory.as_posix()
    texts = {"dataset.jsonl": dataset_text(), "grader.json": grader_text(), "spec.toml": spec_text(name),
             "ci-gate.yml": ci_text(shown, name), "README.md": readme_text(shown, name)}
    paths = [directory / file for file in texts]
    for path in paths:
        if path.exists():
            raise InputError("already exists: rfteval init overwrites nothing (give a new folder, or move it away)",
                             path)
        check_output(path)
    written: list[Path] = []
    try:
        directory.mkdir(parents=True, exist_ok=True)
        for path, text in zip(paths, texts.values()):
            written.append(write_text_atomic(path, text))
    except OSError as exc:  # a starter is whole or absent: a half of one would pass for one
        for path in written:
            path.unlink(missing_ok=True)
        raise InputError(f"cannot write ({exc.strerror})", directory) from None
    return Starter(directory, name, tuple(paths))
