"""`emit --format torchtitan` launches torchtitan's entry point with the TOML it writes (issue 36),
as torchtitan's own run_train.sh does (pytorch/torchtitan@b5bcd76 run_train.sh:
`torchrun ... -m torchtitan.train ...`; the --job.config_file flag of JobConfig at 238fa99)."""

import shlex

from typer.testing import CliRunner

from prism_strategy.cli import app

runner = CliRunner()


def _emit(tmp_path, *extra: str):
    r = runner.invoke(
        app, ["plan", "--model", "qwen3-8b", "--platform", "dgx-h100", "--nodes", "2", "--seq-len", "4096", "--json"]
    )
    assert r.exit_code in (0, 1), r.output
    tmp_path.mkdir(parents=True, exist_ok=True)
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(r.stdout)
    out = tmp_path / "tt"
    r = runner.invoke(app, ["emit", "--from-plan", str(plan_file), "--format", "torchtitan", "--out", str(out), *extra])
    assert r.exit_code == 0, r.output
    return out


def _runs(text: str, head: str) -> list[str]:
    (line,) = [ln for ln in text.splitlines() if ln.strip().startswith(head)]
    return shlex.split(line.strip())


def test_the_launchers_run_torchtitans_entry_point_with_the_written_toml(tmp_path):
    out = _emit(tmp_path)
    toml = str((out / "torchtitan.toml").resolve())
    rank = _runs((out / "launch.slurm").read_text(), "exec python3")
    assert rank[2:] == ["-m", "torchtitan.train", "--job.config_file", toml]
    local = _runs((out / "torchrun.sh").read_text(), "exec torchrun")
    assert local[-4:] == ["-m", "torchtitan.train", "--job.config_file", toml]
    assert "train.py" not in (out / "launch.slurm").read_text().split("exec python3", 1)[1].splitlines()[0]


def test_arguments_after_the_config_reach_torchtitan_and_a_named_script_is_kept(tmp_path):
    out = _emit(tmp_path, "--", "--training.steps", "10")
    assert _runs((out / "launch.slurm").read_text(), "exec python3")[-2:] == ["--training.steps", "10"]
    mine = _emit(tmp_path / "mine", "--script", "my_train.py")
    assert _runs((mine / "launch.slurm").read_text(), "exec python3")[2:] == ["my_train.py"]
