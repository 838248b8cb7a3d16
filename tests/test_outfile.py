"""rfteval.outfile: output paths checked up front, written whole or not at all, never over an input."""

from __future__ import annotations

import pytest

from rfteval.errors import InputError
from rfteval.outfile import check_output, write_output


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
