"""The Stop hook's pathlib-free Path means what pathlib.Path means, for what it offers."""

from __future__ import annotations

import os
import pathlib

from hypothesis import given
from hypothesis import strategies as st

from loopwright.state.fspath import Path

PIECES = st.lists(
    st.sampled_from(["", "/", "//", "///", ".", "..", "a", "b.txt", ".hidden", "x.tar.gz", "é"])
)
TEXT = PIECES.map("/".join) | PIECES.map("".join)


@given(TEXT)
def test_text_and_properties_match_pathlib(text):
    ours, real = Path(text), pathlib.PurePosixPath(text)
    assert str(ours) == str(real)
    assert (ours.name, ours.suffix, ours.stem, ours.parts) == (real.name, real.suffix, real.stem, real.parts)
    assert str(ours.parent) == str(real.parent)
    assert [str(p) for p in ours.parents] == [str(p) for p in real.parents]
    assert ours.is_absolute() == real.is_absolute()
    assert ours == pathlib.Path(text) and pathlib.Path(text) == ours


@given(TEXT, TEXT)
def test_joining_matches_pathlib(a, b):
    assert str(Path(a) / b) == str(pathlib.PurePosixPath(a) / b)
    assert str(Path(a, b)) == str(pathlib.PurePosixPath(a, b))
    assert str(a / Path(b)) == str(a / pathlib.PurePosixPath(b))


def test_files(tmp_path):
    d = Path(tmp_path) / "x" / "y"
    d.mkdir(parents=True)
    d.mkdir(exist_ok=True)
    f = d / "f.json"
    f.write_text("{}")
    assert f.read_bytes() == b"{}" and f.is_file() and d.is_dir() and f.exists()
    assert sorted(p.name for p in d.parent.iterdir()) == ["y"]
    assert [p.name for p in d.glob("*.json")] == ["f.json"]  # handed to pathlib
    assert f.relative_to(tmp_path) == pathlib.Path("x/y/f.json")
    assert f.with_name("g.json") == pathlib.Path(tmp_path, "x/y/g.json") and os.fspath(f).endswith("f.json")
    f.unlink()
    f.unlink(missing_ok=True)
    assert not f.exists()
