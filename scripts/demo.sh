#!/usr/bin/env bash
# `make demo`: `rfteval run` on the ChipStack example (base and tuned, 3 epochs) through the replay provider,
# then the comparison as `rfteval compare` (the CI gate) prints it.
#
# The recordings in datasets/chipstack/recordings/ are illustrative outputs written for this example, not
# outputs of a real model. Against a real endpoint the same run is:
#   rfteval run --dataset datasets/chipstack/items.jsonl --grader graders/chipstack.json \
#     --model base=o4-mini-2025-04-16 --model tuned=ft:o4-mini-2025-04-16:acme::abc123 --epochs 3 \
#     --response-format datasets/chipstack/schema.json --out runs/chipstack
# Usage: scripts/demo.sh [VENV_BIN_DIR]   (make passes .venv/bin)
set -euo pipefail

BIN="${1:-.venv/bin}"
BIN="$(cd "$BIN" && pwd)"
cd "$(dirname "${BASH_SOURCE[0]}")/.."

DATA=datasets/chipstack
GRADER=graders/chipstack.json
OUT=runs/demo-chipstack
for f in "$DATA/items.jsonl" "$GRADER" "$DATA/recordings/base.jsonl" "$DATA/recordings/tuned.jsonl"; do
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
