"""Atomic writes: a folder of files appears complete or not at all."""

import pytest

import prism_strategy.emit.files as files_mod
from prism_strategy.emit.files import FileText, write_files_atomically
from prism_strategy.specs import SpecError

FILES = [FileText(name="a.sh", text="echo a\n", executable=True), FileText(name="b.toml", text="x = 1\n")]


def _entries(folder):
    """The folder's files, less emit's manifest (tests/unit/emit/test_emit_manifest.py reads it)."""
    return sorted(p.name for p in folder.iterdir() if p.name != ".prism-emit.json")


def test_new_folder_with_modes(tmp_path):
    out = write_files_atomically(tmp_path / "deep" / "out", FILES)
    assert _entries(out) == ["a.sh", "b.toml"]
    assert (out / "a.sh").stat().st_mode & 0o111 and not (out / "b.toml").stat().st_mode & 0o111
    assert _entries(tmp_path / "deep") == ["out"]


def test_empty_folder_is_filled_without_force(tmp_path):
    (tmp_path / "out").mkdir()
    write_files_atomically(tmp_path / "out", FILES)
    assert _entries(tmp_path / "out") == ["a.sh", "b.toml"]


def test_folder_with_files_needs_force_and_keeps_the_users_files(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "old.txt").write_text("keep me")
    with pytest.raises(SpecError, match="--force"):
        write_files_atomically(out, FILES)
    assert _entries(out) == ["old.txt"]
    write_files_atomically(out, FILES, force=True)
    assert _entries(out) == ["a.sh", "b.toml", "old.txt"] and (out / "old.txt").read_text() == "keep me"
    assert _entries(tmp_path) == ["out"]


def test_out_that_is_a_file_is_refused(tmp_path):
    target = tmp_path / "file"
    target.write_text("x")
    with pytest.raises(SpecError, match="not a folder"):
        write_files_atomically(target, FILES, force=True)
    assert target.read_text() == "x"


def test_failure_mid_write_leaves_nothing(tmp_path, monkeypatch):
    real = files_mod._write_one
    calls = []

    def failing(path, f):
        calls.append(f.name)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        real(path, f)

    monkeypatch.setattr(files_mod, "_write_one", failing)
    with pytest.raises(SpecError, match="the disk is full"):
        write_files_atomically(tmp_path / "out", FILES)
    assert _entries(tmp_path) == []


def test_failed_replace_keeps_the_old_folder(tmp_path, monkeypatch):
    out = tmp_path / "out"
    out.mkdir()
    (out / "old.txt").write_text("keep me")
    real_rename = files_mod.os.rename

    def rename(src, dst):
        if ".tmp-" in str(src) and "/.old/" not in str(src):  # new files moving in; a put-back works
            raise OSError(18, "Invalid cross-device link")
        real_rename(src, dst)

    monkeypatch.setattr(files_mod.os, "rename", rename)
    with pytest.raises(SpecError, match="cannot replace"):
        write_files_atomically(out, FILES, force=True)
    monkeypatch.undo()
    assert _entries(out) == ["old.txt"] and _entries(tmp_path) == ["out"]
    write_files_atomically(out, FILES, force=True)  # emit's own files of an earlier emit:
    (out / "a.sh").write_text("emit's, replaced")
    monkeypatch.setattr(files_mod.os, "rename", rename)
    with pytest.raises(SpecError, match="cannot replace"):
        write_files_atomically(out, FILES, force=True)
    assert (out / "a.sh").read_text() == "emit's, replaced"  # put back as it was
    assert _entries(out) == ["a.sh", "b.toml", "old.txt"] and _entries(tmp_path) == ["out"]


def test_bad_file_names_are_refused(tmp_path):
    with pytest.raises(SpecError):
        write_files_atomically(tmp_path / "out", [FileText(name="../x", text="")])
