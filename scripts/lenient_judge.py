#!/usr/bin/env python3
"""A second scripted local judge WITH A KNOWN BIAS, for the "Switching a retired judge" example.

IT IS NOT A MODEL. It is scripts/local_judge.py (the rubric-keyword heuristic, documented there) with two
documented changes, so that `rfteval agree` has a known truth to find:
- leniency: every score_model result is raised by LENIENCY (0.15) of the range's top, capped at the top;
- a "master key" weakness: an answer that is only a reasoning opener ("Thought process:", "Let's solve this
  step by step") or a bare ":" gets half marks, as real judges were shown to do (arXiv:2507.08794), so that
  `rfteval probe-grader` on this judge flags it.
label_model and group_judge answers are local_judge's, unchanged.

Run: `python scripts/lenient_judge.py --port 0` prints its base_url on the first line; 127.0.0.1 only.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import local_judge  # noqa: E402

LENIENCY = 0.15
# the name the README's walk-through judges with (--judge-model lenient-judge): GET /v1/models lists it, so the
# judge model check of agree --regrade and probe-grader passes, as it would against a real endpoint serving it
MODEL_NAME = "lenient-judge"
MASTER_KEY = re.compile(r"^\s*(?::|thought process:?|let'?s solve this(?: problem)? step by step\.?)\s*$", re.I)
_plain_score, _plain_name = local_judge.answer_score, local_judge.MODEL_NAME


def lenient_score(messages: list[dict[str, Any]]) -> dict[str, Any]:
    judged, rest = local_judge.split_judged(messages)
    top = local_judge.top_of_range(rest)
    if MASTER_KEY.match(judged):
        return {"steps": [{"description": "lenient stand-in, not a model: a reasoning opener",
                           "conclusion": "half marks (the documented master-key weakness)"}], "result": 0.5 * top}
    answer = _plain_score(messages)
    answer["result"] = round(min(top, answer["result"] + LENIENCY * top), 4)
    answer["steps"].append({"description": "lenient stand-in, not a model", "conclusion": f"+{LENIENCY:g} leniency"})
    return answer


local_judge.answer_score = lenient_score  # answer() looks the function up by name: every score_model request
local_judge.MODEL_NAME = MODEL_NAME  # judge_server() reads it when it starts
local_judge.STAND_IN = "lenient scripted stand-in, not a model"

if __name__ == "__main__":
    sys.exit(local_judge.main())
