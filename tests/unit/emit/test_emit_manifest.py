"""Issue 38 item 4: emit writes atomically and never deletes what it did not write. `--force`
replaces only the files listed in emit's manifest (.prism-emit.json); a read-only or full
filesystem is exit 2 in one line with nothing partial. Tests run as root, where a chmod'ed folder
stays writable, so the filesystem faults are raised from the writer's os-level write."""

from __future__ import annotations

import errno
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import prism_strategy
import prism_strategy.emit.files as files_mod
from prism_strategy.cli import app
from prism_strategy.emit.files import MANIFEST, FileText, write_files_atomically
from prism_strategy.specs import SpecError

EMIT = ["emit", "--platform", "cpu"]
SRC = str(Path(prism_strategy.__file__).parents[1])


def _emit(*args: str):
    return CliRunner().invoke(app, [*EMIT, *args])


def _tree(folder):
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_out_dot_force_keeps_the_users_files_and_replaces_only_emits(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("print('mine')\n")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "x.bin").write_bytes(b"\0\1")
    res = _emit("--strategy", "zero3", "--out", ".")
    assert res.exit_code == 2 and "--force" in res.output and res.output.count("\n") == 1
    res = _emit("--strategy", "zero3", "--out", ".", "--force")
    assert res.exit_code == 0, res.output
    listed = json.loads((tmp_path / MANIFEST).read_text())["files"]
    assert "ds_config.json" in listed and "torchrun.sh" in listed and "train.py" not in listed
    res = _emit("--strategy", "ddp", "--out", ".", "--force")  # ddp writes no ds_config.json
    assert res.exit_code == 0, res.output
    assert not (tmp_path / "ds_config.json").exists()  # emit's own, from the zero3 emit: removed
    assert (tmp_path / "train.py").read_text() == "print('mine')\n" and (tmp_path / "data" / "x.bin").exists()
    assert 'strategy = "ddp"' in (tmp_path / "strategy.toml").read_text()
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]


def test_a_users_file_where_emit_would_write_is_refused_not_overwritten(tmp_path):
    out = tmp_path / "job"
    out.mkdir()
    (out / "torchrun.sh").write_text("#!/bin/bash\necho my own launcher\n")
    before = _tree(out)
    res = _emit("--strategy", "ddp", "--out", str(out), "--force")
    assert res.exit_code == 2 and res.output.count("\n") == 1
    assert "torchrun.sh" in res.output and MANIFEST in res.output
    assert _tree(out) == before


def test_a_tampered_manifest_cannot_name_a_file_outside_the_folder(tmp_path):
    out = tmp_path / "job"
    out.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    (out / MANIFEST).write_text(json.dumps({"files": ["../victim.txt", "/etc/hostname", 3]}))
    write_files_atomically(out, [FileText(name="a.sh", text="true\n")], force=True)
    assert victim.read_text() == "keep" and (out / "a.sh").exists()


def test_a_listed_name_the_user_turned_into_a_folder_or_link_is_theirs(tmp_path):
    out = tmp_path / "job"
    files = [FileText(name="a.sh", text="true\n"), FileText(name="b.txt", text="x\n")]
    write_files_atomically(out, files)
    (out / "a.sh").unlink()
    (out / "a.sh").mkdir()
    (out / "a.sh" / "notes.txt").write_text("mine")
    (out / "b.txt").unlink()
    (out / "b.txt").symlink_to(tmp_path / "elsewhere.txt")
    (tmp_path / "elsewhere.txt").write_text("mine too")
    with pytest.raises(SpecError, match="a.sh, b.txt that emit did not write"):
        write_files_atomically(out, files, force=True)
    write_files_atomically(out, [FileText(name="c.sh", text="true\n")], force=True)  # neither is in the way
    assert (out / "a.sh" / "notes.txt").read_text() == "mine" and (tmp_path / "elsewhere.txt").read_text() == "mine too"
    assert (out / "b.txt").is_symlink() and (out / "c.sh").exists()


@pytest.mark.parametrize(
    ("code", "words"),
    [(errno.EROFS, "read-only filesystem"), (errno.ENOSPC, "disk is full"), (errno.EDQUOT, "quota")],
)
@pytest.mark.parametrize("existing", [False, True])
def test_a_filesystem_that_refuses_the_write_is_one_line_and_leaves_nothing(
    tmp_path, monkeypatch, code, words, existing
):
    out = tmp_path / "job"
    if existing:  # an earlier emit's folder: stays exactly as it was
        assert _emit("--strategy", "ddp", "--out", str(out)).exit_code == 0
    before = _tree(tmp_path)
    real, calls = files_mod._write_one, []

    def write_one(path, f):
        calls.append(f.name)
        if len(calls) == 3:  # a few files in: the disk fills, or the mount turns read-only
            raise OSError(code, "refused")
        real(path, f)

    monkeypatch.setattr(files_mod, "_write_one", write_one)
    res = _emit("--strategy", "zero3", "--out", str(out), "--force")
    assert res.exit_code == 2, res.output
    assert res.output.count("\n") == 1 and words in res.output and "Traceback" not in res.output
    assert _tree(tmp_path) == before and sorted(p.name for p in tmp_path.iterdir()) == (["job"] if existing else [])


def test_a_folder_emit_cannot_create_a_temporary_folder_in_is_one_line(tmp_path, monkeypatch):
    def refuse(*a, **k):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(files_mod.tempfile, "mkdtemp", refuse)
    with pytest.raises(SpecError, match="read-only filesystem") as err:
        write_files_atomically(tmp_path / "job", [FileText(name="a.sh", text="true\n")])
    assert "\n" not in str(err.value) and list(tmp_path.iterdir()) == []


def _in_namespace(shell: str, tmp_path) -> subprocess.CompletedProcess:
    """`shell` as root of a private user and mount namespace (no root needed); skip where refused."""
    if shutil.which("unshare") is None or subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode:
        pytest.skip("no unprivileged mount namespace here (unshare -rm)")
    env = {"PYTHONPATH": SRC, "PATH": "/usr/bin:/bin", "PY": sys.executable, "HOME": str(tmp_path)}
    res = subprocess.run(["unshare", "-rm", "sh", "-c", shell], env=env, capture_output=True, text=True, timeout=120)
    if "mount:" in res.stderr:
        pytest.skip(f"the kernel refused the test mount: {res.stderr.strip()[:200]}")
    return res


@pytest.mark.parametrize("kind", ["read-only", "full"])
def test_a_real_read_only_or_full_filesystem_is_one_line_exit_2(tmp_path, kind):
    folder = tmp_path / "fs"
    folder.mkdir()
    (folder / "train.py").write_text("print('mine')\n")
    mount = (
        f'mount --bind "{folder}" "{folder}" && mount -o remount,ro,bind "{folder}"'
        if kind == "read-only"
        else f'mount -t tmpfs -o size=64k none "{folder}" && echo mine > "{folder}/train.py" && '
        f'(dd if=/dev/zero of="{folder}/filler" bs=4k 2>/dev/null || true)'
    )
    emit = f'"$PY" -m prism_strategy.cli emit --strategy zero3 --platform aurora --out "{folder}" --force'
    res = _in_namespace(f'{mount} || exit 9; {emit}; echo "rc=$?"; ls -A "{folder}"', tmp_path)
    assert res.returncode == 0, (res.stdout, res.stderr)
    rc, *left = res.stdout.split()
    assert rc == "rc=2" and res.stderr.count("\n") == 1 and "Traceback" not in res.stderr, res.stderr
    assert ("read-only filesystem" if kind == "read-only" else "the disk is full") in res.stderr, res.stderr
    assert left == (["train.py"] if kind == "read-only" else ["filler", "train.py"])  # nothing partial
