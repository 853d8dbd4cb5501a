"""The README's five-minute tour runs as written: each `prism-strategy` line of its bash block is
run in order in one folder (the placeholders a user brings, train.py and torchtitan.toml, are
fixtures; bench and analyze, which need ranks or a run's log, have their own tests) and exits 0."""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

from typer.testing import CliRunner

from prism_strategy.cli import app

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests/fixtures"
BROUGHT = {
    "train.py": FIXTURES / "scripts/hf_trainer.py",
    "torchtitan.toml": FIXTURES / "configs/torchtitan_llama3_8b.toml",
}
ELSEWHERE = ("bench", "analyze")  # multi-rank / a run's log: tests/distributed, tests/cli analyze tests


def tour_lines() -> list[str]:
    text = (ROOT / "README.md").read_text()
    tour = text[text.index("## A five-minute tour") :]
    block = re.search(r"```bash\n(.*?)```", tour, re.S).group(1)
    return [line.split("  #")[0].strip() for line in block.splitlines() if line.startswith("prism-strategy ")]


def test_the_tours_commands_run_in_order(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name, src in BROUGHT.items():
        shutil.copy(src, tmp_path / name)
    lines = tour_lines()
    assert len(lines) >= 8, "the tour lost its commands"
    ran = 0
    for line in lines:
        argv = shlex.split(line)[1:]
        if argv[0] in ELSEWHERE:
            continue
        out = None
        if ">" in argv:  # `--json > plan.json`
            out, argv = argv[argv.index(">") + 1], argv[: argv.index(">")]
        res = CliRunner().invoke(app, argv)
        assert res.exit_code == 0, f"{line}\n{res.output}"
        if out:
            Path(out).write_text(res.stdout)
        ran += 1
    assert ran >= 7
