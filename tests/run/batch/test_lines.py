"""run/batch/lines.py: batch result lines matched on custom_id and classified (stored, re-queued, the cell's error)."""

from __future__ import annotations

from rfteval.run.batch.lines import CellInfo, entry_from_result, parse_result_lines


def test_result_lines_match_on_custom_id_and_classify() -> None:

    cell = CellInfo("base", "m", "q1", 1, "chat", False)
    ok = {"custom_id": "k", "response": {"status_code": 200, "body": {
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1}}}, "error": None}
    what, entry = entry_from_result("k", cell, ok, "s")
    assert what == "stored" and entry is not None and entry.output_text == "hi" and entry.tier == "batch"
    assert entry_from_result("k", cell, {"custom_id": "k", "response": None,
                                         "error": {"code": "batch_expired", "message": ""}}, "s")[0] == "requeue"
    assert entry_from_result("k", cell, {"custom_id": "k", "response": {"status_code": 429, "body": {}}}, "s")[0] == "requeue"
    what, entry = entry_from_result("k", cell, {"custom_id": "k", "response": {"status_code": 400, "body": {
        "error": {"message": "nope"}}}}, "s")
    assert what == "error" and entry is not None and entry.error_type == "bad_request"
    assert [n for n, _ in parse_result_lines(b'{"custom_id": "a", "response": null}\n\nnot json\n')] == [1]
