"""`plan --script FILE`: what a training script does that its memory depends on, as plan() inputs.

The script is read statically (inputs/script_reads.py, one reader per input); each input is
told when every candidate that can run agrees, and otherwise is "could not tell" with the plan's
assumption named. A flag given on the command line wins over what the script says; the JSON
section (`inputs.script` of plan --json) records, per input, the value read, its line and code,
what was planned and by whom (script, command line or assumption). It plans nothing: flags.py
merges what it read into the flags, builds the Scenario and plans it (the CLI's plan,
`plan_for_script`); planning/ never sees this module.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prism_strategy.inputs import script_batch as batch
from prism_strategy.inputs import script_lora
from prism_strategy.inputs import script_reads as reads
from prism_strategy.inputs import script_wrapping as wrapping
from prism_strategy.inputs.script_file import read_script
from prism_strategy.inputs.script_reads import Found, Reader
from prism_strategy.specs.errors import SpecError

FLAGS = {
    "loss": "--loss",
    "ckpt_freq": "--ckpt-freq",
    "optimizer": "--optimizer",
    "precision": "--precision",
    "reduce_dtype": "--reduce-dtype",
    "compile": "--compile",
    "micro_batch": "--micro-batch",
    "grad_accum": "--grad-accum",
    "global_batch": "--global-batch",
    "lora": "--lora",
}
"""plan()'s flags a script can set, with their command-line spelling."""
QUIET = {"micro_batch", "grad_accum", "global_batch", "lora"}
"""Inputs the plan searches or derives when the script does not fix them: not listed as untold."""
ASSUMED = {
    "loss": "assumed upcast (HF default: transformers' ForCausalLMLoss casts the logits to fp32)",
    "ckpt_freq": "assumed auto (each option searches none, every k-th block and sac)",
    "optimizer": "assumed adamw in torch's default implementation (foreach on cuda/xpu, the loop on cpu)",
    "precision": "assumed bf16-mixed (the plan's default)",
    "reduce_dtype": "assumed each engine's default",
    "compile": "assumed eager (no torch.compile read)",
    "micro_batch": "searched (the largest that fits)",
    "grad_accum": "1, unless --global-batch says",
    "global_batch": "micro-batch x accumulation x ranks",
    "lora": "full fine-tuning (every parameter trains)",
}
NOTHING = "nothing in the script sets it"
READERS: dict[str, Callable[[Reader], list[Found]]] = {
    "loss": reads.loss,
    "ckpt_freq": reads.ckpt,
    "optimizer": reads.optimizer,
    "precision": lambda r: wrapping.precision(r)[0],
    "reduce_dtype": lambda r: wrapping.precision(r)[1],
    "compile": reads.compile_,
    "micro_batch": batch.micro_batch,
    "grad_accum": batch.grad_accum,
    "global_batch": batch.global_batch,
    "lora": script_lora.lora,
    "strategy": wrapping.strategy,
}


@dataclass(frozen=True, kw_only=True, slots=True)
class ScriptRead:
    input: str
    value: Any
    """None: could not tell."""
    line: int | None = None
    evidence: str = ""
    note: str = ""


@dataclass(frozen=True, kw_only=True, slots=True)
class ScriptInputs:
    path: Path
    reads: tuple[ScriptRead, ...]

    def get(self, name: str) -> ScriptRead:
        return next(r for r in self.reads if r.input == name)

    def plan_inputs(
        self, current: Mapping[str, Any], given: set[str], *, source: str = "command line"
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """(plan() keywords, the JSON section). current: plan()'s values of FLAGS' keywords as the
        command line has them; given: the keywords whose flags were given there (those win);
        source: where they were given ("command line", or "keyword" from Python)."""
        kwargs, entries, untold = {}, {}, []
        for name in (*FLAGS, "strategy"):
            r = self.get(name)
            entry: dict[str, Any] = {"read": r.value, "line": r.line, "evidence": r.evidence}
            if name in given:
                said = (
                    f"; the script's {_shown(r.value)} (line {r.line}) is not used"
                    if r.value not in (None, current.get(name))
                    else ""
                )
                flag = "--no-compile" if current.get(name) is False else FLAGS[name]
                given_as = f"{flag} given on the command line" if source == "command line" else f"{name}= given"
                entry |= {"planned": current.get(name), "by": source, "note": f"{given_as}{said}"}
            elif name not in FLAGS:
                entry |= {"planned": "every strategy", "by": "script" if r.value is not None else "assumed"}
            elif r.value is not None:
                entry |= {"planned": r.value, "by": "script"}
                kwargs[name] = r.value
            else:
                entry |= {"planned": current.get(name), "by": "assumed"}
                why = f" [{r.note}]" if r.note and r.note != NOTHING else ""
                if name not in QUIET or r.note != NOTHING:
                    untold.append(f"{_label(name)}: could not tell; {ASSUMED[name]}{why}")
            if r.note and "note" not in entry:
                entry["note"] = r.note
            entries[name] = entry
        return kwargs, {"file": str(self.path), "inputs": entries, "could_not_tell": untold}


def _shown(v: Any) -> str:
    return ("on" if v else "off") if isinstance(v, bool) else str(v)


def _label(name: str) -> str:
    return {"ckpt_freq": "checkpointing", "reduce_dtype": "gradient reduction dtype"}.get(name, name)


def read_plan_inputs(path: str | Path) -> ScriptInputs:
    """Read `path` (SpecError with one line when it cannot be read as Python) and tell each input."""
    if _is_binary(Path(path)):
        raise SpecError(f"--script {path} is a binary file, not a Python script; pass the training script (.py)")
    s = read_script(Path(path))
    source = Path(path).read_text(errors="replace").splitlines()
    r = Reader(s=s, vals=s.values(), source=source, tree=ast.parse("\n".join(source)))
    return ScriptInputs(path=Path(path), reads=tuple(decide(name, fn(r)) for name, fn in READERS.items()))


def script_error(e: SpecError, section: dict[str, Any]) -> SpecError:
    """A plan's bad-input error, saying which of its inputs the script set (a flag overrides them)."""
    by_script = [
        f"{k} {e_['planned']} (line {e_['line']})"
        for k, e_ in section["inputs"].items()
        if e_["by"] == "script" and k in FLAGS
    ]
    if not by_script:
        return e
    return SpecError(f"{e} [--script {section['file']} set {', '.join(by_script)}; a flag given overrides it]")


def _is_binary(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            return b"\0" in f.read(8192)
    except OSError:
        return False  # read_script names the problem


def decide(name: str, found: list[Found]) -> ScriptRead:
    """Told when every candidate agrees on a value and surely runs; otherwise could not tell, naming each."""
    if not found:
        return ScriptRead(input=name, value=None, note=NOTHING)
    values = {repr(f.value) for f in found}
    first = found[0]
    if len(values) == 1 and first.value is not None and all(f.sure for f in found):
        also = [f.line for f in found[1:] if f.line != first.line]
        note = "; ".join(x for x in (first.note, f"also line {', '.join(map(str, also))}" if also else "") if x)
        return ScriptRead(input=name, value=first.value, line=first.line, evidence=first.evidence, note=note)
    cands = "; ".join(
        f"line {f.line}: {'unreadable' if f.value is None else f.value}" + (f" ({f.note})" if f.note else "")
        for f in found[:4]
    )
    why = (
        "the script's candidates disagree"
        if len(values) > 1
        else "its value is not one the script fixes"
        if first.value is None
        else "it runs only under a test the script leaves open"
    )
    return ScriptRead(input=name, value=None, line=first.line, evidence=first.evidence, note=f"{why}: {cands}")
