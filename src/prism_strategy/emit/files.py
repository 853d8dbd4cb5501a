"""Write a set of files so that they appear complete or not at all, and never delete a file emit
did not write.

Every file is first written into a temporary folder on the target's filesystem and flushed to
disk: a new --out folder is that temporary folder renamed into place; in an existing folder each
file is renamed into it (the files it replaces moved aside first, and put back if a rename fails).
A full or read-only filesystem therefore fails before anything is in place, with one line.

Emit writes a manifest (`.prism-emit.json`) listing the files it wrote. `force` replaces (and, when
a new emit no longer writes one, removes) only those; any other file in the folder is the user's
and stays, and a user's file in the way of one emit would write is refused, not overwritten.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from prism_strategy.specs.errors import SpecError

MANIFEST = ".prism-emit.json"
"""The files emit wrote into a folder: what --force may replace there."""
_HINTS = {
    errno.EROFS: "a read-only filesystem; pick an --out on a writable one",
    errno.ENOSPC: "the disk is full; free some space or pick an --out on another filesystem",
    errno.EDQUOT: "the disk quota is used up; free some space or pick an --out on another filesystem",
    errno.EACCES: "permission denied; pick an --out you can write to",
    errno.EPERM: "permission denied; pick an --out you can write to",
}


@dataclass(frozen=True, kw_only=True, slots=True)
class FileText:
    name: str
    """A plain file name (no folders)."""
    text: str
    executable: bool = False
    description: str = ""


def write_files_atomically(out: Path, files: list[FileText], *, force: bool = False) -> Path:
    """Write `files` (and the manifest) into the folder `out`; returns its resolved path. Raises
    SpecError for a target that is a file, a folder with files in it without `force`, a user's
    file in the way, or a filesystem that refuses the write (nothing is changed then)."""
    out = Path(out)
    _check_names(files)
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise SpecError(f"--out {out} exists and is not a folder; pass a folder path")
    manifest = FileText(name=MANIFEST, text=_manifest_text(files))
    try:
        if out.is_dir():
            _write_into(out, [*files, manifest], force=force)
        else:
            _write_new(out, [*files, manifest])
    except OSError as e:
        raise SpecError(_fs_error(out, e)) from None
    return out.resolve()


def emitted_names(folder: Path) -> set[str]:
    """The files the manifest of `folder` says emit wrote (empty: no manifest, or not one of ours)."""
    try:
        data = json.loads((folder / MANIFEST).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return set()
    names = data.get("files") if isinstance(data, dict) else None
    if not isinstance(names, list):
        return set()
    return {n for n in names if isinstance(n, str) and _plain(n)} | {MANIFEST}


def _plain(name: str) -> bool:
    return Path(name).name == name and name not in ("", ".", "..")


def _check_names(files: list[FileText]) -> None:
    names = [f.name for f in files]
    if len(set(names)) != len(names) or not all(map(_plain, names)) or MANIFEST in names:
        raise SpecError(f"emit: bad file names {names}")


def _manifest_text(files: list[FileText]) -> str:
    return json.dumps({"written_by": "prism-strategy emit", "files": sorted(f.name for f in files)}, indent=2) + "\n"


def _fs_error(out: Path, e: OSError) -> str:
    why = _HINTS.get(e.errno or 0, e.strerror or str(e))
    return f"cannot write --out {out}: {why} (nothing was written)"


def _write_new(out: Path, files: list[FileText]) -> None:
    """A folder that does not exist yet: filled beside it, then renamed into place whole."""
    parent = out.absolute().parent
    parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.absolute().name}.tmp-", dir=parent))
    try:
        _fill(tmp, files)
        tmp.chmod(0o755)
        try:
            os.rename(tmp, out.absolute())
        except OSError as e:
            raise SpecError(f"cannot create {out}: {e.strerror}") from None
        _fsync_dir(parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _write_into(out: Path, files: list[FileText], *, force: bool) -> None:
    """An existing folder: emit's own earlier files (per its manifest) are replaced or removed,
    every other file is left alone."""
    present = {p.name for p in out.iterdir()}
    # a listed name that is now a folder or a link is the user's doing: never moved, never removed
    ours = {n for n in emitted_names(out) if not (out / n).is_symlink() and ((out / n).is_file() or n not in present)}
    if present and not force:
        raise SpecError(
            f"--out {out} already has files; pass --force to replace the files emit wrote there "
            "(yours are kept), or pick an empty folder"
        )
    theirs = sorted(f.name for f in files if f.name in present and f.name not in ours)
    if theirs:
        raise SpecError(
            f"--out {out} has {', '.join(theirs)} that emit did not write (not in its {MANIFEST}); "
            "move them away or pick another folder"
        )
    tmp = Path(tempfile.mkdtemp(prefix=".prism-emit.tmp-", dir=out))
    try:
        _fill(tmp, files)
        _swap(out, tmp, [f.name for f in files], sorted(ours & present))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _swap(out: Path, tmp: Path, new: list[str], old: list[str]) -> None:
    """Move emit's old files aside into tmp/.old, the new ones from tmp into `out`; on a failed
    rename put everything back as it was."""
    aside = tmp / ".old"
    aside.mkdir()
    moved: list[str] = []
    placed: list[str] = []
    try:
        for name in old:
            os.rename(out / name, aside / name)
            moved.append(name)
        for name in new:
            os.rename(tmp / name, out / name)
            placed.append(name)
    except OSError as e:
        for name in placed:
            os.rename(out / name, tmp / name)
        for name in moved:
            os.rename(aside / name, out / name)
        raise SpecError(f"cannot replace the files in {out}: {e.strerror} (nothing was changed)") from None
    _fsync_dir(out)


def _fill(folder: Path, files: list[FileText]) -> None:
    for f in files:
        _write_one(folder / f.name, f)
    _fsync_dir(folder)


def _write_one(path: Path, f: FileText) -> None:
    data = f.text.encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o755 if f.executable else 0o644)
    try:
        view = memoryview(data)
        while view:  # os.write may write less than asked
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
