#!/usr/bin/env bash
# `make demo`: `rfteval run` on four examples, base vs tuned, 3 epochs each, all offline and free:
#   1. ChipStack (a python grader), then `rfteval compare` as the CI gate;
#   2. Accordance (a score_model judge grading tax analyses against a rubric), then a short compare;
#   3. Support as an agent (`rfteval run --tools --group-models`): a group judge ranks each item's rollouts of both
#      models together as whole trajectories (RULER-style), then a short compare;
#   4. Inventory, an agent run (`rfteval run --tools`): each (model, item, epoch) a rollout whose tool calls run
#      datasets/inventory/tools.py in the python sandbox; compare with its agent table; a viewer bundle.
# The judge in 2 and 3 is scripts/local_judge.py: a SCRIPTED STAND-IN, NOT A MODEL (a rubric-keyword heuristic
# on 127.0.0.1), started here and killed on exit. All recordings are illustrative outputs written for the
# examples, not outputs of a real model. The model turns in 3 and 4 come from scripts/local_agent.py, likewise a
# SCRIPTED STAND-IN, NOT A MODEL (scripted-base and scripted-tuned play set courses over the real tools' results).
#
# Against a real endpoint the ChipStack run is:
#   rfteval run --dataset datasets/chipstack/items.jsonl --grader graders/chipstack.json \
#     --base-url http://127.0.0.1:8000/v1 --model base=Qwen/Qwen3-8B --model tuned=acme/qwen3-8b-rft --epochs 3 \
#     --response-format datasets/chipstack/schema.json --out runs/chipstack
# Usage: scripts/demo.sh [VENV_BIN_DIR]   (make passes .venv/bin)
set -euo pipefail

BIN="${1:-.venv/bin}"
BIN="$(cd "$BIN" && pwd)"
cd "$(dirname "${BASH_SOURCE[0]}")/.."

DATA=datasets/chipstack
GRADER=graders/chipstack.json
OUT=runs/demo-chipstack
for f in "$DATA/items.jsonl" "$GRADER" "$DATA/recordings/base.jsonl" "$DATA/recordings/tuned.jsonl" \
         datasets/accordance/items.jsonl graders/accordance.json datasets/accordance/recordings/base.jsonl \
         datasets/accordance/recordings/tuned.jsonl datasets/support/agent_items.jsonl datasets/support/grader.json \
         datasets/support/tools.py scripts/local_judge.py \
         datasets/inventory/items.jsonl datasets/inventory/grader.json datasets/inventory/tools.py \
         scripts/local_agent.py tests/support/fake_openai.py; do
  if [ ! -f "$f" ]; then echo "demo: missing $f" >&2; exit 2; fi
done

echo "== rfteval run: ChipStack VIP parameter binding, base vs tuned, 3 epochs each =="
echo "   (replayed recordings: illustrative outputs written for the example, not a real model's)"
echo
"$BIN/rfteval" run \
  --dataset "$DATA/items.jsonl" \
  --grader "$GRADER" \
  --model "base=replay:$DATA/recordings/base.jsonl" \
  --model "tuned=replay:$DATA/recordings/tuned.jsonl" \
  --epochs 3 \
  --out "$OUT" \
  --per-item

echo
echo "== rfteval compare $OUT/base.jsonl $OUT/tuned.jsonl --require-improvement (the CI gate) =="
"$BIN/rfteval" compare "$OUT/base.jsonl" "$OUT/tuned.jsonl" --top 5 --require-improvement
echo
echo "Run again and nothing is re-generated or re-graded (the run directory is a cache); --fresh starts over."

# ---------------------------------------------------------------- model judges, with the scripted local judge

[ -t 1 ] || export COLUMNS="${COLUMNS:-120}"  # logs and CI: wide enough that compare's tables do not wrap

# The judge's calls and tokens are printed under each run's table (and kept in summary.json under "judge").

TMP="$(mktemp -d)"
JUDGE_PID=""
AGENT_PID=""
cleanup() {
  for pid in $JUDGE_PID $AGENT_PID; do kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

"$BIN/python" scripts/local_judge.py --port 0 >"$TMP/judge.out" &
JUDGE_PID=$!
JUDGE_URL=""
for _ in $(seq 100); do  # its first stdout line is its base URL
  JUDGE_URL="$(head -n 1 "$TMP/judge.out" 2>/dev/null || true)"
  if [ -n "$JUDGE_URL" ] || ! kill -0 "$JUDGE_PID" 2>/dev/null; then break; fi
  sleep 0.1
done
case "$JUDGE_URL" in
  http://127.0.0.1:*/v1) ;;
  *) echo "demo: the local judge did not start (scripts/local_judge.py)" >&2; exit 1 ;;
esac

echo
echo "== Model judges. The judge below is scripts/local_judge.py at $JUDGE_URL: a SCRIPTED STAND-IN, NOT A MODEL =="
echo "   (a transparent rubric-keyword heuristic, so the demo runs offline and free). Its scores show that the"
echo "   pipeline works, not how good the outputs are. The recordings are illustrative, not a real model's."
echo "   Against a real judge, leave out --judge-base-url/--judge-model (the grader's own model is asked)."

ACC=datasets/accordance
ACC_OUT=runs/demo-accordance
echo
echo "== rfteval run: Accordance tax analysis, score_model judge (graders/accordance.json, 10 rubric points) =="
"$BIN/rfteval" run \
  --dataset "$ACC/items.jsonl" \
  --grader graders/accordance.json \
  --model "base=replay:$ACC/recordings/base.jsonl" \
  --model "tuned=replay:$ACC/recordings/tuned.jsonl" \
  --epochs 3 \
  --judge-base-url "$JUDGE_URL" --judge-model local-scripted-judge \
  --out "$ACC_OUT" --fresh \
  --no-readiness
echo
echo "== rfteval compare $ACC_OUT/base.jsonl $ACC_OUT/tuned.jsonl --by difficulty =="
"$BIN/rfteval" compare "$ACC_OUT/base.jsonl" "$ACC_OUT/tuned.jsonl" --dataset "$ACC/items.jsonl" --by difficulty \
  --top 3
echo "(each record's grade_details.steps holds the judge's per-rubric-line reasoning: $ACC_OUT/tuned.jsonl)"

# The support example as an agent: RULER over trajectories. The model turns come from the scripted local agent (a
# stand-in, not a model), so it is started here; part 4 uses it too.
"$BIN/python" scripts/local_agent.py --port 0 >"$TMP/agent.out" &
AGENT_PID=$!
AGENT_URL=""
for _ in $(seq 100); do  # its first stdout line is its base URL
  AGENT_URL="$(head -n 1 "$TMP/agent.out" 2>/dev/null || true)"
  if [ -n "$AGENT_URL" ] || ! kill -0 "$AGENT_PID" 2>/dev/null; then break; fi
  sleep 0.1
done
case "$AGENT_URL" in
  http://127.0.0.1:*/v1) ;;
  *) echo "demo: the local agent did not start (scripts/local_agent.py)" >&2; exit 1 ;;
esac

SUP=datasets/support
SUP_OUT=runs/demo-support
echo
echo "== rfteval run --tools --group-models: RAG customer support as an agent, judged RULER-style over trajectories =="
echo "   The model turns come from scripts/local_agent.py at $AGENT_URL: a SCRIPTED STAND-IN, NOT A MODEL"
echo "   (scripted-base and scripted-tuned play set courses over the real tools' results: $SUP/tools.py, a help-centre"
echo "   search and an article reader, run in the python sandbox). The group judge (rfteval extension; the scripted"
echo "   judge above, NOT A MODEL) ranks each item's 6 rollouts (3 epochs x 2 models, shuffled with a recorded seed;"
echo "   it never sees which model) in one call, each shown whole: its tool calls, their results, its final answer."
"$BIN/rfteval" run \
  --dataset "$SUP/agent_items.jsonl" \
  --grader "$SUP/grader.json" \
  --model base=scripted-base \
  --model tuned=scripted-tuned \
  --base-url "$AGENT_URL" \
  --tools "$SUP/tools.py" --max-turns 6 \
  --epochs 3 --seed 7 --group-models \
  --judge-base-url "$JUDGE_URL" --judge-model local-scripted-judge \
  --out "$SUP_OUT" --fresh \
  --no-readiness
echo
echo "== rfteval compare $SUP_OUT/base.jsonl $SUP_OUT/tuned.jsonl =="
"$BIN/rfteval" compare "$SUP_OUT/base.jsonl" "$SUP_OUT/tuned.jsonl" --top 3
echo "(each record's grade_details.explanation is the judge's reason: $SUP_OUT/tuned.jsonl; a group too long for the"
echo "judge's context is cut from each trajectory's middle, tool results first, and its records say so under \"cut\")"
echo
echo "Judge answers are cached in each run directory (judge_cache.jsonl): re-running a judged run with the same"
echo "judge asks it nothing. (This demo passes --fresh, because its local judge gets a new port each time.)"
echo "The scores above come from a scripted judge and scripted or illustrative outputs: they demonstrate rfteval,"
echo "not the models."

# ---------------------------------------------------------------- an agent: python tools, the scripted local agent

INV=datasets/inventory
AGENT_OUT=runs/demo-agent
echo
echo "== Agents. The model turns below come from scripts/local_agent.py at $AGENT_URL: a SCRIPTED STAND-IN, NOT A"
echo "   MODEL. scripted-base and scripted-tuned are transparent scripts that read the tools' results and play set"
echo "   courses (the base one sometimes answers without a call, passes a product name as a SKU or calls until"
echo "   --max-turns). The tools are real: $INV/tools.py runs in the python sandbox, each turn in a fresh process."
echo
echo "== rfteval validate tools: the items' declared tools against $INV/tools.py, before anything is sent =="
"$BIN/rfteval" validate tools --dataset "$INV/items.jsonl" --tools "$INV/tools.py" --max-turns 8
echo
echo "== rfteval run --tools: inventory stock desk, each (model, item, epoch) a rollout of up to 8 model turns =="
"$BIN/rfteval" run \
  --dataset "$INV/items.jsonl" \
  --grader "$INV/grader.json" \
  --model base=scripted-base \
  --model tuned=scripted-tuned \
  --base-url "$AGENT_URL" \
  --tools "$INV/tools.py" --max-turns 8 \
  --epochs 3 --seed 7 \
  --out "$AGENT_OUT" --fresh \
  --no-readiness
echo
echo "== rfteval compare $AGENT_OUT/base.jsonl $AGENT_OUT/tuned.jsonl (the agent table under the score table) =="
"$BIN/rfteval" compare "$AGENT_OUT/base.jsonl" "$AGENT_OUT/tuned.jsonl" --top 3
echo
echo "== rfteval view $AGENT_OUT --bundle $AGENT_OUT/view: each sample card shows its turns, calls, results, stop reason =="
"$BIN/rfteval" view "$AGENT_OUT" --bundle "$AGENT_OUT/view"
echo "(every model turn and tool turn is stored in $AGENT_OUT/store/: the same command without --fresh resumes a cut"
echo "rollout where it stopped; this demo passes --fresh, because its local agent gets a new port each time)"
echo "The agent's scores come from a scripted stand-in playing set courses: they demonstrate rfteval, not a model."
echo
echo "== Look at the samples: both models' outputs side by side, sorted by the paired delta (rfteval view) =="
echo "   $BIN/rfteval view runs/demo-chipstack      (or runs/demo-accordance for the judge's steps; needs the view extra)"
echo "   $AGENT_OUT/view/index.html                (the agent run's pages, opened from disk: no server needed)"
