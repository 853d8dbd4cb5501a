"""Issue #26 finding 3: the doctor command `emit` prints runs as printed (it named `<file>`), over
the files it wrote, and exits 0 (emitted files carry no finding)."""

from __future__ import annotations

import shlex

from typer.testing import CliRunner

from prism_strategy.cli import app


def test_emits_check_command_runs_on_the_files_it_wrote(tmp_path):
    out = tmp_path / "my job"  # a space: the printed command quotes it
    res = CliRunner().invoke(
        app, ["emit", "--strategy", "ddp", "--platform", "dgx-h100", "--nodes", "2", "--out", str(out)]
    )
    assert res.exit_code == 0, res.output
    (line,) = [x for x in res.output.splitlines() if x.startswith("check them: ")]
    argv = shlex.split(line.removeprefix("check them: "))
    assert argv[:2] == ["prism-strategy", "doctor"] and str(out / "launch.slurm") in argv
    done = CliRunner().invoke(app, argv[1:])
    assert done.exit_code == 0, done.output
