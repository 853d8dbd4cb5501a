"""Write a set of files so that they appear complete or not at all.

Everything is written into a temporary folder beside the target, flushed to disk, then renamed
into place. An existing folder with files in it is replaced only with `force`, and then by
renames too: the old folder is moved aside and removed only once the new one is in place.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from prism_strategy.specs.errors import SpecError


@dataclass(frozen=True, kw_only=True, slots=True)
class FileText:
    name: str
    """A plain file name (no folders)."""
    text: str
    executable: bool = False
    description: str = ""


def write_files_atomically(out: Path, files: list[FileText], *, force: bool = False) -> Path:
    """Write `files` into the folder `out`; returns its resolved path. Raises SpecError for a
    target that is a file, or a non-empty folder without `force`."""
    out = Path(out)
    _check_target(out, files, force=force)
    parent = out.absolute().parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise SpecError(f"cannot create {parent}: {e.strerror}") from None
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=parent))
    try:
        for f in files:
            _write_one(tmp / f.name, f)
        _fsync_dir(tmp)
        _move_into_place(tmp, out.absolute())
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out.resolve()


def _check_target(out: Path, files: list[FileText], *, force: bool) -> None:
    names = [f.name for f in files]
    if len(set(names)) != len(names) or any(Path(n).name != n or n in ("", ".", "..") for n in names):
        raise SpecError(f"emit: bad file names {names}")
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise SpecError(f"--out {out} exists and is not a folder; pass a folder path")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise SpecError(f"--out {out} already has files; pass --force to replace them, or pick an empty folder")


def _write_one(path: Path, f: FileText) -> None:
    data = f.text.encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o755 if f.executable else 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _move_into_place(tmp: Path, out: Path) -> None:
    tmp.chmod(0o755)
    if not out.exists():
        try:
            os.rename(tmp, out)
            return
        except OSError as e:
            raise SpecError(f"cannot create {out}: {e.strerror}") from None
    old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
    old.rmdir()
    os.rename(out, old)
    try:
        os.rename(tmp, out)
    except OSError as e:
        os.rename(old, out)  # put the previous folder back: nothing half-replaced
        raise SpecError(f"cannot replace {out}: {e.strerror}") from None
    shutil.rmtree(old, ignore_errors=True)
    _fsync_dir(out.parent)
