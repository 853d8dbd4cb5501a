"""The watchdog's ``hang_report.json`` (`prism_strategy.runtime.watchdog`): one JSON object with
the stuck step and phase, the ranks that reached it (``ranks_reached``) and those that did not
(``ranks_not_reached``: rank -> {step, phase}), ``timeout_s`` and ``written`` (a Unix time). It
holds no step times: `analyze` reads it as a hang, `results import` has nothing to store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prism_strategy.readers.training_log import ParsedLog
from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.safe_files import load_json

FORMAT = "hang-report"
SUFFIXES = (".json",)
NAME = "hang_report.json"


def looks_like(path: Path) -> bool:
    return path.name == NAME


def _check(rep: dict[str, Any], where: str) -> None:
    """The fields `analyze` reads, with the types the watchdog writes them in."""
    for key in ("step", "timeout_s", "written"):
        if key in rep and (isinstance(rep[key], bool) or not isinstance(rep[key], (int, float))):
            raise SpecError(f"{where}: hang report field {key!r} must be a number, got {rep[key]!r}")
    behind = rep.get("ranks_not_reached", {})
    if not isinstance(behind, dict) or not all(isinstance(v, dict) for v in behind.values()):
        raise SpecError(f"{where}: hang report field 'ranks_not_reached' must map ranks to {{step, phase}}")
    for r in list(behind) + list(rep.get("ranks_reached") or []):
        if not str(r).isdigit():
            raise SpecError(f"{where}: hang report names a rank {r!r}; ranks are integers")
    if not isinstance(rep.get("ranks_reached", []), list):
        raise SpecError(f"{where}: hang report field 'ranks_reached' must be a list of ranks")


def read(path: Path) -> ParsedLog:
    rep = load_json(path, "hang report")  # regular, capped, depth and numbers checked
    if not isinstance(rep, dict):
        raise SpecError(f"{path}: a hang report is a JSON object, got {type(rep).__name__}")
    _check(rep, str(path))
    rep["_path"] = str(path)
    return ParsedLog(format=FORMAT, files=[path], hang_reports=[rep])
