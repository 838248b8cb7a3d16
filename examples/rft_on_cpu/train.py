"""TRL's GRPOTrainer on CPU with an rfteval grader as its reward, exactly as the README's "Graders as training
rewards" tells users: the dataset written by `rfteval export-dataset --target trl`, loaded with `load_dataset("json")`,
and `rfteval.reward.for_trl(grader)` in `reward_funcs`.

What it leaves behind in OUT:
- `checkpoint-K`, `checkpoint-2K`, ...: the model every K steps (weights, tokenizer, chat template), each with a
  generation config that samples (`do_sample: true`; checked after every save): served as saved, a checkpoint
  without it would answer every request greedily and every epoch of an evaluation would be the same answer;
- `completions/completions_NNNNN.parquet`: TRL's own log of each step's prompts, completions, rewards and
  advantages (`log_completions`), which `completions.jsonl` gathers into one file, the item named on each line;
- `curve.jsonl`: what TRL logs each step (mean reward, its spread, the share of groups with no signal, the loss,
  the completions' length), one line per step: the training curve.

Run by the example (`python -m examples.rft_on_cpu`), as `python -m examples.rft_on_cpu.train --help` shows.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from examples.rft_on_cpu.checkpoint import sample_by_default, samples_by_default


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m examples.rft_on_cpu.train", description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, required=True, help="the train.jsonl `rfteval export-dataset --target trl` wrote")
    p.add_argument("--grader", type=Path, required=True)
    p.add_argument("--base", type=Path, required=True, help="the Hugging Face checkpoint to start from")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--save-every", type=int, default=10)
    p.add_argument("--prompts-per-step", type=int, default=2)
    p.add_argument("--num-generations", type=int, default=8)
    p.add_argument("--max-completion-length", type=int, default=32)
    p.add_argument("--learning-rate", type=float, default=3e-5, help="constant: a few dozen steps leave no room to decay")
    p.add_argument("--seed", type=int, default=38)
    p.add_argument("--threads", type=int, default=1, help="torch's CPU threads")
    p.add_argument("--log", type=Path, help="where TRL's own output goes (its tables, warnings): the terminal keeps "
                   "one line per step")
    return p.parse_args(argv)


def callbacks(out: Path) -> list[Any]:
    """The example's two TrainerCallbacks: one line per step (and curve.jsonl), and the sampling check on each save."""
    from transformers import TrainerCallback

    class StepLog(TrainerCallback):
        """TRL's per-step figures as it logs them, one JSON line each, and one line on the terminal."""

        def __init__(self) -> None:
            self.start = time.monotonic()
            self.path = out / "curve.jsonl"
            self.path.write_text("")

        def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, float] | None = None,
                   **kwargs: Any) -> None:
            if not logs or "reward" not in logs:
                return  # the closing summary (train_runtime, ...), not a step
            line = {"step": state.global_step, "reward": logs["reward"], "reward_std": logs.get("reward_std"),
                    "frac_reward_zero_std": logs.get("frac_reward_zero_std"), "loss": logs.get("loss"),
                    "completion_length": logs.get("completions/mean_length"),
                    "seconds": round(time.monotonic() - self.start, 1)}
            with open(self.path, "a") as fh:
                fh.write(json.dumps(line) + "\n")
            print(f"step {line['step']:>3}  mean reward {line['reward']:.3f}  groups without signal "
                  f"{line['frac_reward_zero_std'] or 0:.2f}  completion length {line['completion_length'] or 0:5.1f}"
                  f"  {line['seconds']:6.0f} s", file=sys.__stdout__, flush=True)

    class SamplingCheckpoints(TrainerCallback):
        """Every saved checkpoint samples by default (the trap: a greedy one looks untrainable when served)."""

        def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            saved = out / f"checkpoint-{state.global_step}"
            sample_by_default(saved)
            if not samples_by_default(saved):
                raise RuntimeError(f"{saved}: its generation config does not sample")
            print(f"saved {saved} (generation config: do_sample true)", file=sys.__stdout__, flush=True)

    return [StepLog(), SamplingCheckpoints()]


def main(args: argparse.Namespace) -> None:
    if args.log is None:
        train(args)
        return
    with open(args.log, "a") as log, contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        train(args)


def train(args: argparse.Namespace) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import importlib

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    import rfteval.reward

    # Hugging Face's datasets, by name: from the checkout's root, the type checker (and the import sorter) would take
    # its datasets/ folder for the package
    load_dataset = importlib.import_module("datasets").load_dataset

    torch.set_num_threads(args.threads)
    args.out.mkdir(parents=True, exist_ok=True)
    ds = load_dataset("json", data_files=str(args.data), split="train")
    reward = rfteval.reward.for_trl(str(args.grader))
    config = GRPOConfig(
        output_dir=str(args.out), max_steps=args.steps, save_steps=args.save_every, save_only_model=True,
        per_device_train_batch_size=args.prompts_per_step * args.num_generations, num_generations=args.num_generations,
        gradient_accumulation_steps=1,  # one generation batch per step: each step's logged completions are its own
        max_completion_length=args.max_completion_length, temperature=1.0, learning_rate=args.learning_rate,
        lr_scheduler_type="constant",
        logging_steps=1, log_completions=True, num_completions_to_print=4, seed=args.seed, use_cpu=True,
        report_to="none", disable_tqdm=True, dataloader_num_workers=0)
    model = AutoModelForCausalLM.from_pretrained(args.base, dtype=torch.float32)
    model.generation_config.do_sample = True  # saved with every checkpoint; SamplingCheckpoints checks it
    trainer = GRPOTrainer(model=model, reward_funcs=[reward], args=config, train_dataset=ds,
                          processing_class=AutoTokenizer.from_pretrained(args.base), callbacks=callbacks(args.out))
    trainer.train()
    gather_completions(args.out, reward.__name__)


def gather_completions(out: Path, reward_name: str) -> int:
    """TRL's per-step completion logs (completions/*.parquet) as one JSONL file: step, item id, completion text,
    reward, advantage. The item is the one whose prompt TRL logged (the dataset's prompts are distinct)."""
    import pandas as pd

    lines = []
    for path in sorted((out / "completions").glob("completions_*.parquet")):
        frame = pd.read_parquet(path)
        for row in frame.to_dict("records"):
            prompt, completion = row["prompt"], row["completion"]
            lines.append({"step": int(row["step"]), "prompt": _jsonable(prompt),
                          "completion": _text(completion), "reward": _float(row[reward_name]),
                          "advantage": _float(row["advantage"])})
    (out / "completions.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return len(lines)


def _jsonable(value: Any) -> Any:
    """A parquet cell (numpy arrays of dicts for a conversation) as plain JSON values."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    return value


def _text(completion: Any) -> str:
    """The completion's text: TRL logs a conversational completion as its messages (one assistant turn here)."""
    value = _jsonable(completion)
    if isinstance(value, str):
        return value
    return "".join(str(m.get("content") or "") for m in value if m.get("role") == "assistant")


def _float(value: Any) -> float | None:
    return None if value is None or value != value else float(value)


if __name__ == "__main__":
    main(parse())
