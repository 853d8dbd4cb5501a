"""Issue 26, what is left, item 4: an error's fix is concrete where the command knows it (the path
it was given, the platform, the nearest valid name); a placeholder stays only where the value is
the user's to supply, and then it is one docs/commands.md defines ("Placeholders in error
messages"). A corpus of bad inputs to those messages, and a scan of every SpecError message in
src/ for placeholders outside the documented table."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from prism_strategy.cli import app

ROOT = Path(__file__).resolve().parents[2]
NCCL_LOG = ROOT / "tests" / "fixtures" / "imports" / "all_reduce_perf_2x8_a100_oci.out"
FILLABLE = re.compile(r"(?<![\w-])(DIR|PATH|NAME|PRESET|MODEL|PLATFORM|STRATEGY)(?![\w-])|<path>|<name>")
"""Placeholders for what the command was given or can list: never left in a message."""
DOCUMENTED = {"FILE", "PLAN", "ENCODER", "<preset>", "<module>", "<bytes>", "<bytes|max>", "..."}
PLACEHOLDER = re.compile(r"(?<![\w-])([A-Z]{3,})(?![\w-])|<[a-z][a-z |]*>|(?<!\()\.\.\.(?!\))")
NOT_PLACEHOLDERS = {
    "TOML",
    "JSON",
    "JSONL",
    "YAML",
    "CCL",
    "NCCL",
    "MAD",
    "PRISM",
    "TIMING",
    "TCP",
    "RANK",
    "CUDA",
    "GPU",
    "CPU",
    "FSDP",
    "HSDP",
    "DDP",
}
"""Formats, libraries, log markers and variable names: words, not values to fill."""


def _files(tmp_path: Path) -> dict[str, str]:
    plan = tmp_path / "my plan.json"
    plan.write_text(json.dumps({"inputs": {}, "options": []}))
    return {"plan": str(plan), "log": str(NCCL_LOG), "missing": str(tmp_path / "nowhere" / "plan.json")}


CORPUS = [
    # (argv with {plan}/{log}/{missing}, what the one line must name)
    (["doctor", "--launcher", "{plan}"], ["emit --from-plan", "--out", "my plan-emitted"]),
    (["results", "import", "{log}", "--published", "aurora-prism"], ["{log}", "--published aurora-prism"]),
    (["results", "import"], ["aurora-prism"]),
    (["results", "import", "{log}", "--format", "nccl-tests"], ["give --platform"]),
    (["emit", "--from-plan", "{missing}", "--out", "{missing}.d"], ["> {missing}"]),
    (["plan", "--model", "qwen3-8"], ["did you mean 'qwen3-8b'?"]),
    (["plan", "--model", "qwen3-8b", "--platform", "aurra"], ["did you mean 'aurora'?"]),
    (["plan", "--model", "qwen3-8b", "--env-profile", "cpu-glo"], ["did you mean 'cpu-gloo'?"]),
    (["commbench", "--env-profile", "cpu-glo"], ["did you mean 'cpu-gloo'?"]),
    (["commbench", "--env-profile", "{missing}.toml"], ["{missing}.toml does not exist"]),
    (["bench", "--strategies", "ddp,zero22"], ["did you mean 'zero2'?"]),
    (["calibrate", "--fit", "comm", "--platform", "h100-96gb-500w", "--db", "{db}"], ["--platform h100-96gb-500w"]),
]


@pytest.mark.parametrize("argv, names", CORPUS, ids=[" ".join(a[:2]) + f" {i}" for i, (a, _) in enumerate(CORPUS)])
def test_bad_input_names_the_concrete_fix(tmp_path, monkeypatch, argv, names):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    f = _files(tmp_path) | {"db": str(tmp_path / "empty.db")}
    res = CliRunner().invoke(app, [a.format(**f) for a in argv])
    lines = res.stderr.strip().splitlines()
    assert res.exit_code == 2 and len(lines) == 1, res.output
    for name in names:
        assert name.format(**f) in lines[0], lines[0]
    assert not FILLABLE.search(lines[0]), lines[0]


def _messages() -> list[tuple[str, str]]:
    """(file:line, the constant text) of every SpecError(...) raised in src/."""
    out = []
    for path in sorted((ROOT / "src" / "prism_strategy").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            func = getattr(node, "func", None)
            if isinstance(node, ast.Call) and getattr(func, "id", getattr(func, "attr", None)) == "SpecError":
                text = "".join(
                    s.value for s in ast.walk(node) if isinstance(s, ast.Constant) and isinstance(s.value, str)
                )
                out.append((f"{path.relative_to(ROOT)}:{node.lineno}", text))
    return out


def test_every_placeholder_left_in_a_message_is_one_the_docs_define():
    messages = _messages()
    assert len(messages) > 200  # the scan sees the messages
    docs = (ROOT / "docs" / "commands.md").read_text()
    table = docs.split("## Placeholders in error messages")[1].split("\n## ")[0]
    for p in DOCUMENTED:
        assert f"`{p}" in table or f"`{p.replace('|', chr(92) + '|')}`" in table, p
    bad = []
    for where, text in messages:
        for m in PLACEHOLDER.finditer(text):
            word = m.group(0)
            if word not in DOCUMENTED and word not in NOT_PLACEHOLDERS:
                bad.append(f"{where}: {word!r} in {text[:100]!r}")
    assert not bad, "\n".join(bad)
