"""rfteval.data.outfile: output paths checked up front, written whole or not at all, never over an input."""

from __future__ import annotations

import json
import os

import pytest

from rfteval.data.outfile import check_output, replace_atomically, write_json_atomic, write_output
from rfteval.errors import InputError


def test_writes_whole_files_and_creates_parents(tmp_path):
    out = write_output(tmp_path / "a" / "b.txt", lambda p: p.write_text("done"))
    assert out.read_text() == "done" and list(out.parent.iterdir()) == [out]


@pytest.mark.parametrize("make, message", [
    (lambda t: t / "dir", "is a directory"),
    (lambda t: t / "file.txt" / "sub.json", "it is a file, not a directory"),
])
def test_bad_paths_are_one_line(tmp_path, make, message):
    (tmp_path / "dir").mkdir()
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(InputError, match=message) as exc:
        check_output(make(tmp_path), flag="--out")
    assert "\n" not in str(exc.value) and "--out" in str(exc.value)


def test_an_input_is_never_overwritten(tmp_path):
    src = tmp_path / "outputs.jsonl"
    src.write_text("keep")
    with pytest.raises(InputError, match="is also an input"):
        write_output(tmp_path / "." / "outputs.jsonl", lambda p: p.write_text("lost"), inputs=[None, src])
    assert src.read_text() == "keep"


def test_a_failed_write_leaves_nothing(tmp_path):
    def boom(path):
        path.write_text("half")
        raise RuntimeError("stop")

    with pytest.raises(RuntimeError):
        write_output(tmp_path / "r.json", boom)
    assert list(tmp_path.iterdir()) == []


def test_library_writes_replace_whole_files_with_the_usual_mode(tmp_path):
    path = tmp_path / "summary.json"
    path.write_text("old")

    def crash(tmp):
        tmp.write_text("half")
        raise RuntimeError("killed mid-write")

    with pytest.raises(RuntimeError):
        replace_atomically(path, crash)
    assert path.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["summary.json"]
    write_json_atomic(path, {"mean": 0.5})
    assert json.loads(path.read_text()) == {"mean": 0.5}
    umask = os.umask(0)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask
