"""``--out`` directories a failed command created are not left behind, parents included
(streams/tools/outdir.py; the CLI-level rules are in test_attacks_client.py)."""
from __future__ import annotations

import os

import pytest

from dpstream.streams.tools.outdir import OutDir, UnsafeOut


def test_a_failed_command_removes_the_directory_and_the_parents_it_made(tmp_path):
    with pytest.raises(RuntimeError):
        with OutDir(tmp_path / "a" / "b" / "c", private=True):
            assert (tmp_path / "a" / "b" / "c").is_dir()
            raise RuntimeError("the run failed before writing")
    assert os.listdir(tmp_path) == []


def test_a_refusal_after_making_parents_removes_them(tmp_path):
    too_long = tmp_path / "a" / "b" / ("x" * 300)      # the last mkdir fails: ENAMETOOLONG
    with pytest.raises(UnsafeOut, match="cannot create"):
        with OutDir(too_long, private=True):
            pass
    assert os.listdir(tmp_path) == []


def test_what_existed_before_or_holds_files_stays(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "keep.txt").write_text("mine")
    with pytest.raises(RuntimeError):
        with OutDir(tmp_path / "a" / "b" / "c", private=True):
            raise RuntimeError
    assert sorted(os.listdir(tmp_path / "a")) == ["keep.txt"]
    with pytest.raises(RuntimeError):
        with OutDir(tmp_path / "d" / "e", private=True) as out:
            out.write_all({"x.jsonl": b"{}\n"})
            raise RuntimeError                       # written into: kept, with its parent
    assert (tmp_path / "d" / "e" / "x.jsonl").read_bytes() == b"{}\n"


def test_a_successful_command_keeps_what_it_made(tmp_path):
    with OutDir(tmp_path / "a" / "b", private=True) as out:
        out.write_all({"x.jsonl": b""})
        assert [p.name for p in out.made] == ["a", "b"]
    assert (tmp_path / "a" / "b" / "x.jsonl").exists()
    assert oct((tmp_path / "a" / "b").stat().st_mode & 0o777) == "0o700"
