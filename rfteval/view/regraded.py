"""Which of the paths given to `rfteval view` hold the same samples graded by different graders: the pairs the Runs
page links to an Agree page."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from rfteval.errors import InputError


def _graded_keys(path: Path) -> dict[tuple[str, str, int], tuple[str, float | None]] | None:
    """Each sample's (model_label, item_id, epoch) -> (its output text's digest, its score), from a run directory
    or record file (the files `agree` reads); None when it cannot be read as graded records."""
    import hashlib

    import pyarrow as pa

    from rfteval.data.records import iter_jsonl_records, iter_parquet_records
    from rfteval.data.rundir import find_records

    out: dict[tuple[str, str, int], tuple[str, float | None]] = {}
    try:
        for f in find_records(path, pick="all").files:
            rows = (iter_parquet_records(f, ("model_label", "item_id", "epoch", "output_text", "score"))  # a batch
                    if f.suffix == ".parquet" else iter_jsonl_records(f))  # of texts at a time, never all of them
            for r in rows:
                text, score = r.get("output_text"), r.get("score")
                epoch = r.get("epoch")
                key = (str(r.get("model_label")), str(r.get("item_id")), int(epoch) if isinstance(epoch, (int, float))
                       else 1)
                out[key] = (hashlib.sha1(str(text).encode("utf-8", "replace")).hexdigest(),
                            float(score) if isinstance(score, (int, float)) else None)
    except (InputError, OSError, ValueError, TypeError, pa.ArrowException):
        return None
    return out or None


def same_samples_regraded(paths: Sequence[Path]) -> list[tuple[Path, Path]]:
    """The pairs of paths whose records are the same samples (the same model_label/item_id/epoch keys and the same
    output texts) graded differently: another grader's grades of the same outputs (`rfteval agree A --regrade G
    --out B.jsonl`, `rfteval grade`). Two copies of the same grades are not a pair; nor are two runs of a model
    (their outputs differ). Their grader files, when both are named and differ, make a pair of equal scores too."""
    from rfteval.compare.graded import load_graded

    if len(paths) < 2:
        return []
    keys = {p: _graded_keys(p) for p in paths}
    out: list[tuple[Path, Path]] = []
    for i, a in enumerate(paths):
        for b in paths[i + 1:]:
            ka, kb = keys[a], keys[b]
            if ka is None or kb is None or ka.keys() != kb.keys():
                continue
            if any(ka[k][0] != kb[k][0] for k in ka):
                continue  # different outputs: different samples
            differ = any(ka[k][1] != kb[k][1] for k in ka)
            if not differ:
                try:
                    ga, gb = load_graded(a, "A").grader, load_graded(b, "B").grader
                except InputError:
                    continue
                differ = ga is not None and gb is not None and ga != gb
            if differ:
                out.append((a, b))
    return out
