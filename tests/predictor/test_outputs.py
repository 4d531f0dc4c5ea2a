"""predictor.common.outputs: results are whole or absent, never half-written."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from predictor.common.outputs import OutputError, atomic_dir, atomic_file, check_writable, claim_folder, write_text


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    path = write_text(tmp_path / "a.txt", "old")
    with pytest.raises(RuntimeError):
        with atomic_file(path) as tmp:
            tmp.write_text("half")
            raise RuntimeError("the writer failed")
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["a.txt"]


def test_an_os_error_becomes_one_line_naming_the_file(tmp_path):
    with pytest.raises(OutputError, match=r"cannot write .*a\.txt: No space left on device"):
        with atomic_file(tmp_path / "a.txt"):
            raise OSError(28, "No space left on device")


def test_a_folder_is_replaced_only_when_the_new_one_is_complete(tmp_path):
    with atomic_dir(tmp_path / "run") as tmp:
        (tmp / "old.txt").write_text("1")
    with pytest.raises(RuntimeError):
        with atomic_dir(tmp_path / "run") as tmp:
            (tmp / "new.txt").write_text("2")
            raise RuntimeError
    assert [p.name for p in (tmp_path / "run").iterdir()] == ["old.txt"]
    with atomic_dir(tmp_path / "run") as tmp:
        (tmp / "new.txt").write_text("2")
    assert [p.name for p in (tmp_path / "run").iterdir()] == ["new.txt"]
    assert [p.name for p in tmp_path.iterdir()] == ["run"]


def test_a_folder_of_another_run_is_refused_and_a_file_is_no_folder(tmp_path):
    assert claim_folder(tmp_path / "new") == tmp_path / "new"
    (tmp_path / "new" / "jobs.parquet").write_text("x")
    with pytest.raises(OutputError, match="already holds files of another run.*--overwrite"):
        claim_folder(tmp_path / "new")
    with pytest.raises(OutputError, match="is a file, not a folder"):
        claim_folder(tmp_path / "new" / "jobs.parquet")
    with pytest.raises(OutputError, match="cannot write to"):
        check_writable(tmp_path / "new" / "jobs.parquet" / "below")


def test_a_folder_whose_final_rename_fails_keeps_the_old_one_in_place(tmp_path, monkeypatch):
    with atomic_dir(tmp_path / "run") as tmp:
        (tmp / "old.txt").write_text("1")
    real = os.replace

    def install_fails(src, dst):
        if Path(dst) == tmp_path / "run" and ".tmp-" in Path(src).name:
            raise OSError(errno.EIO, "Input/output error")
        return real(src, dst)

    monkeypatch.setattr(os, "replace", install_fails)
    with pytest.raises(OutputError, match=r"cannot write .*run: Input/output error"):
        with atomic_dir(tmp_path / "run") as tmp:
            (tmp / "new.txt").write_text("2")
    assert [p.name for p in tmp_path.iterdir()] == ["run"]  # no hidden leftover either
    assert [p.name for p in (tmp_path / "run").iterdir()] == ["old.txt"]
