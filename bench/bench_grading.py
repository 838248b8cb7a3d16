"""Benchmark of grading throughput, and of the python worker pool against a plain in-process loop.

(a) 20,000 ChipStack samples graded with the published source (../shared/seed-graders/chipstack.py) through the
    worker pool, against calling its grade() in a plain loop in this process. Synthetic, deterministic data
    (random.Random(0)): 1,000 items of 8-40 {name, value} pairs, 20 samples each that drop, change or add pairs,
    in epoch-major order as a runner produces them. Pool times are for a started pool (start-up is paid once per
    worker, not per sample) and, separately, from cold. Target: the pool is not slower than the loop.
(b) Samples per second for string_check and text_similarity fuzzy_match (through GradingEngine), and for the
    Runloop published source (ast-grep over TypeScript in <plan>/<code> outputs) through the pool and in-process.

Run: .venv/bin/python bench/bench_grading.py   (or `make bench`). Prints a table; main() returns the figures.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SEEDS = ROOT.parent / "shared" / "seed-graders"
sys.path.insert(0, str(ROOT))

CHIPSTACK_ITEMS, CHIPSTACK_EPOCHS = 1000, 20  # 20,000 samples
TEXT_SAMPLES = 20_000
RUNLOOP_ITEMS, RUNLOOP_EPOCHS = 250, 20  # 5,000 samples
REPEATS = 3

Pair = tuple[dict[str, Any], dict[str, Any]]


# ---------------------------------------------------------------- data


def chipstack_pairs(rng: random.Random) -> list[Pair]:
    from rfteval.sample import make_sample

    items = []
    for i in range(CHIPSTACK_ITEMS):
        pairs = [{"name": f"{rng.choice(['clk', 'rst', 'data', 'addr', 'valid', 'ready'])}_{rng.randrange(64)}",
                  "value": rng.choice(["1'b0", "1'b1", f"8'h{rng.randrange(256):02x}", f"u_dut.port{rng.randrange(32)}"])}
                 for _ in range(rng.randint(8, 40))]
        items.append({"id": f"vip-{i}", "messages": [
            {"role": "system", "content": "Wire the verification IP. Answer as JSON {\"predicted\": [{name, value}]}."},
            {"role": "user", "content": f"Module m{i} with {len(pairs)} ports: " + ", ".join(p["name"] for p in pairs)}],
            "reference_answer": pairs})
    out = []
    for _ in range(CHIPSTACK_EPOCHS):  # epoch-major, as a runner grades
        for item in items:
            predicted = []
            for pair in item["reference_answer"]:
                roll = rng.random()
                if roll < 0.1:
                    continue  # dropped
                if roll < 0.25:
                    predicted.append({"name": pair["name"], "value": f"u_dut.port{rng.randrange(32)}"})  # changed
                else:
                    predicted.append(dict(pair))
            for _ in range(rng.choice([0, 0, 0, 1, 2])):  # added
                predicted.append({"name": f"extra_{rng.randrange(99)}", "value": "1'b0"})
            rng.shuffle(predicted)
            out.append((make_sample(json.dumps({"predicted": predicted})), item))
    return out


STRIPE_CALLS = [
    ("stripe.customers.create($$$)", "const customer = await stripe.customers.create({ email: input.email });"),
    ("stripe.paymentIntents.create($$$)",
     "const intent = await stripe.paymentIntents.create({ amount: 2000, currency: 'usd' });"),
    ("stripe.subscriptions.create($$$)",
     "const sub = await stripe.subscriptions.create({ customer: id, items: [{ price }] });"),
    ("stripe.refunds.create($$$)", "await stripe.refunds.create({ payment_intent: pi.id });"),
    ("stripe.webhooks.constructEvent($$$)",
     "const event = stripe.webhooks.constructEvent(body, signature, process.env.STRIPE_WEBHOOK_SECRET);"),
]


def runloop_pairs(rng: random.Random) -> list[Pair]:
    from rfteval.sample import make_sample

    items = []
    for i in range(RUNLOOP_ITEMS):
        wanted = rng.sample(range(len(STRIPE_CALLS)), rng.randint(1, 3))
        greps = [{"file_path_mask": "/home/user/testbed/src/", "pattern": STRIPE_CALLS[w][0],
                  "additional_greps": ["stripe"] if rng.random() < 0.5 else None} for w in wanted]
        items.append({"id": f"stripe-{i}", "messages": [{"role": "user", "content": f"Task {i}: use the Stripe API."}],
                      "reference_answer": {"ast_greps": greps}, "wanted": wanted})
    out = []
    for _ in range(RUNLOOP_EPOCHS):
        for item in items:
            calls = [w for w in item["wanted"] if rng.random() < 0.7] + (
                [rng.randrange(len(STRIPE_CALLS))] if rng.random() < 0.3 else [])
            body = "\n".join(["import Stripe from 'stripe';", "const stripe = new Stripe(process.env.KEY!);",
                              "export async function handler(input: any, id: string, price: string) {"]
                             + ["  " + STRIPE_CALLS[c][1] for c in calls] + ["}"])
            path = rng.choice(["src/handler.ts", "src/api/pay.ts", "lib/handler.ts"])
            lang = rng.choice(["typescript", "typescript", "ts", "javascript"])
            code = f"```{lang} {path}\n{body}\n```"
            roll = rng.random()
            if roll < 0.1:
                text = f"Here is the code:\n{code}"  # no tags
            elif roll < 0.15:
                text = f"<code>{code}</code><plan>Plan first.</plan>"  # wrong order
            elif roll < 0.2:
                text = f"<plan>Call Stripe.</plan>\n<code>\n{code}\n</code>\nDone!"  # text after the code
            else:
                text = f"<plan>Create the objects with the Stripe SDK, then return.</plan>\n<code>\n{code}\n</code>"
            out.append((make_sample(text), item))
    return out


# ---------------------------------------------------------------- timing


def best_of(fn: Callable[[], Any], repeats: int = REPEATS) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return min(times), result


def in_process(source: str) -> Callable[[list[Pair]], list[float]]:
    import types

    module = types.ModuleType(f"bench_grader_{abs(hash(source))}")
    sys.modules[module.__name__] = module  # pydantic models in the source resolve their annotations here
    exec(compile(source, "<grader>", "exec"), module.__dict__)
    grade = module.grade

    def run(pairs: list[Pair]) -> list[float]:
        return [grade(sample, item) for sample, item in pairs]

    return run


def through_pool(source: str, pairs: list[Pair], workers: int | None = None) -> dict[str, Any]:
    """Warm: a started pool (a warm-up batch of other items first); cold: pool creation included."""
    from rfteval.graders.sandbox import WorkerPool

    warm, cold, scores = [], [], None
    warmup = [({"output_text": "", "output_json": {"predicted": []}}, {"reference_answer": []})] * 4
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        pool = WorkerPool(workers=workers)
        try:
            pool.grade(source, warmup * pool.workers)  # start every worker
            t1 = time.perf_counter()
            results = pool.grade(source, pairs)
            t2 = time.perf_counter()
        finally:
            pool.close()
        warm.append(t2 - t1)
        cold.append(t2 - t0)
        errors = [r.error for r in results if r.error]
        scores = [r.score for r in results]
    return {"warm_s": min(warm), "cold_s": min(cold), "scores": scores, "errors": len(errors),
            "workers": pool.workers}


def quiet_in_process(run: Callable[[list[Pair]], list[float]]) -> Callable[[list[Pair]], list[float]]:
    """The Runloop source prints on every call; in-process that goes to /dev/null (the pool captures it)."""
    import contextlib

    def wrapped(pairs: list[Pair]) -> list[float]:
        with open(os.devnull, "w") as null, contextlib.redirect_stdout(null):
            return run(pairs)

    return wrapped


def engine_rate(config: dict[str, Any], pairs: list[Pair]) -> float:
    from rfteval.graders import GradingEngine, parse_config

    with GradingEngine(parse_config(config)) as engine:
        seconds, _ = best_of(lambda: engine.grade_batch(pairs))
    return len(pairs) / seconds


# ---------------------------------------------------------------- main


def main() -> dict[str, Any]:
    figures: dict[str, Any] = {"cpus": os.cpu_count()}
    if not SEEDS.is_dir():
        print(f"skipped the published graders: {SEEDS} not found")
        return figures

    rng = random.Random(0)
    chip_src = (SEEDS / "chipstack.py").read_text()
    chip = chipstack_pairs(rng)
    loop_s, loop_scores = best_of(lambda: in_process(chip_src)(chip))
    pool = through_pool(chip_src, chip)
    assert pool["errors"] == 0 and pool["scores"] == loop_scores, "pool and in-process scores differ"
    figures["chipstack"] = {"samples": len(chip), "in_process_s": loop_s, "pool_warm_s": pool["warm_s"],
                            "pool_cold_s": pool["cold_s"], "speedup_warm": loop_s / pool["warm_s"],
                            "speedup_cold": loop_s / pool["cold_s"], "workers": pool["workers"],
                            "mean_score": statistics.fmean(loop_scores)}

    text_pairs = [(s, {"reference_answer": json.dumps(i["reference_answer"][:6])}) for s, i in chip[:TEXT_SAMPLES]]
    text_pairs = [({**s, "output_text": json.dumps(s["output_json"]["predicted"][:6])}, i) for s, i in text_pairs]
    rates: dict[str, float | None] = {}
    rates["string_check"] = engine_rate({"type": "string_check", "name": "eq", "input": "{{ sample.output_text }}",
                                         "reference": "{{ item.reference_answer }}", "operation": "eq"}, text_pairs)
    try:
        rates["fuzzy_match"] = engine_rate({"type": "text_similarity", "name": "fz", "input": "{{ sample.output_text }}",
                                            "reference": "{{ item.reference_answer }}",
                                            "evaluation_metric": "fuzzy_match"}, text_pairs)
    except Exception as exc:  # text_similarity is written by someone else; absent or broken: say so
        print(f"fuzzy_match not measured: {type(exc).__name__}: {exc}")
        rates["fuzzy_match"] = None

    run_src = (SEEDS / "runloop.py").read_text()
    runloop = runloop_pairs(random.Random(0))
    rl_loop_s, rl_scores = best_of(lambda: quiet_in_process(in_process(run_src))(runloop), repeats=1)
    rl_pool = through_pool(run_src, runloop)
    assert rl_pool["errors"] == 0 and rl_pool["scores"] == rl_scores, "Runloop: pool and in-process differ"
    rates["runloop_pool"] = len(runloop) / rl_pool["warm_s"]
    rates["runloop_in_process"] = len(runloop) / rl_loop_s
    rates["chipstack_pool"] = len(chip) / pool["warm_s"]
    rates["chipstack_in_process"] = len(chip) / loop_s
    figures["samples_per_s"] = rates
    figures["runloop"] = {"samples": len(runloop), "mean_score": statistics.fmean(rl_scores),
                          "in_process_s": rl_loop_s, "pool_warm_s": rl_pool["warm_s"], "pool_cold_s": rl_pool["cold_s"]}

    c = figures["chipstack"]
    print(f"CPUs: {figures['cpus']}, pool workers: {c['workers']}; best of {REPEATS}")
    print(f"{'ChipStack, 20,000 samples':<34}{'seconds':>10}{'vs loop':>10}")
    print(f"{'  in-process loop':<34}{c['in_process_s']:>10.3f}{1.0:>10.2f}")
    print(f"{'  pool, started':<34}{c['pool_warm_s']:>10.3f}{c['speedup_warm']:>10.2f}")
    print(f"{'  pool, from cold':<34}{c['pool_cold_s']:>10.3f}{c['speedup_cold']:>10.2f}")
    print(f"{'throughput':<34}{'samples/s':>10}")
    for name, rate in rates.items():
        print(f"{'  ' + name:<34}{(f'{rate:,.0f}' if rate else 'n/a'):>10}")
    verdict = "ok" if c["speedup_warm"] >= 1.0 else "SLOWER"
    print(f"pool vs in-process loop (ChipStack, started pool): {c['speedup_warm']:.2f}x  [{verdict}]")
    return figures


if __name__ == "__main__":
    main()
