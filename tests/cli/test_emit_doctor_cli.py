"""`prism-strategy emit` and `prism-strategy doctor` through typer's CliRunner: options, output,
exit codes (0 ok, 1 an error finding, 2 bad input on one line, no traceback, nothing written)."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from prism_strategy.cli import app

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "doctor"
runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, list(args))


def test_emit_writes_the_files_and_summarises_them(tmp_path):
    out = tmp_path / "job"
    res = invoke(
        "emit",
        "--strategy",
        "zero3",
        "--platform",
        "aurora",
        "--nodes",
        "2",
        "--out",
        str(out),
        "--account",
        "proj",
        "--script",
        "train.py",
        "--",
        "--lr",
        "1e-4",
        "--name",
        "a b",
    )
    assert res.exit_code == 0, res.output
    written = sorted(p.name for p in out.iterdir() if p.name != ".prism-emit.json")  # the manifest: what emit wrote
    assert written == [
        "bench.pbs", "bench_torchrun.sh", "commbench.pbs", "ds_config.json", "env.sh", "launch.pbs",
        "strategy.toml", "torchrun.sh",
    ]  # fmt: skip
    for name in written:
        assert name in res.output
    assert "exec python3 train.py --lr 1e-4 --name 'a b'" in (out / "launch.pbs").read_text()


def test_emit_json_summary_and_options(tmp_path):
    out = tmp_path / "job"
    res = invoke(
        "emit",
        "--strategy",
        "ddp",
        "--platform",
        "dgx-h100",
        "--nodes",
        "4",
        "--out",
        str(out),
        "--json",
        "--static-graph",
        "--precision",
        "fp32",
        "--ckpt-freq",
        "2",
        "--compile",
        "--queue",
        "batch",
    )
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["strategy"] == "ddp" and data["ranks_per_node"] == 8 and data["env_profile"] == "cuda-nccl"
    assert [f["name"] for f in data["files"]] == [
        "env.sh",
        "launch.slurm",
        "commbench.sbatch",
        "bench.sbatch",
        "torchrun.sh",
        "bench_torchrun.sh",
        "strategy.toml",
    ]
    toml = (out / "strategy.toml").read_text()
    for line in ("static_graph = true", 'mixed_precision = "none"', "ckpt_freq = 2", "compile = true"):
        assert line in toml.splitlines()


@pytest.mark.parametrize(
    "args",
    [
        ("--strategy", "fsdp", "--platform", "aurora"),
        ("--strategy", "ddp", "--platform", "nowhere"),
        ("--strategy", "ddp", "--platform", "aurora", "--env-profile", "nope"),
        ("--strategy", "ddp", "--platform", "aurora", "--nodes", "0"),
        ("--strategy", "zero2", "--platform", "aurora", "--compile", "--nodes", "1"),
        ("--strategy", "ddp", "--platform", "aurora", "--walltime", "90"),
        ("--strategy", "ddp", "--platform", "aurora", "--job-name", "a\nb"),
        ("--strategy", "ddp", "--platform", "aurora", "--nodes", "8", "--queue", "debug"),
        ("--strategy", "ddp", "--platform", "aurora", "--nodes", "20", "--walltime", "06:00:00"),
        ("--strategy", "ddp", "--platform", "polaris", "--queue", "prod"),
    ],
)
def test_emit_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, args):
    res = invoke("emit", *args, "--out", str(tmp_path / "job"))
    assert res.exit_code == 2, res.output
    assert res.output.startswith("error: ") and res.output.count("\n") == 1
    assert "Traceback" not in res.output and list(tmp_path.iterdir()) == []


def test_emit_refuses_a_file_and_a_full_folder_without_force(tmp_path):
    target = tmp_path / "afile"
    target.write_text("x")
    res = invoke("emit", "--strategy", "ddp", "--platform", "cpu", "--out", str(target))
    assert res.exit_code == 2 and "not a folder" in res.output
    full = tmp_path / "full"
    full.mkdir()
    (full / "mine.txt").write_text("keep")
    res = invoke("emit", "--strategy", "ddp", "--platform", "cpu", "--out", str(full))
    assert res.exit_code == 2 and "--force" in res.output and (full / "mine.txt").exists()
    res = invoke("emit", "--strategy", "ddp", "--platform", "cpu", "--out", str(full), "--force")
    assert res.exit_code == 0 and (full / "mine.txt").read_text() == "keep" and (full / "torchrun.sh").exists()


def test_hostile_names_are_accepted_and_markup_is_not_interpreted(tmp_path):
    out = tmp_path / "[bold]out $(touch pwned)"
    res = invoke(
        "emit",
        "--strategy",
        "ddp",
        "--platform",
        "aurora",
        "--out",
        str(out),
        "--job-name",
        "x;`y`",
        "--account",
        "p_z",  # a hostile account is refused: tests/unit/emit/test_emit_hostile_fields.py
        "--",
        "$(touch pwned)",
    )
    assert res.exit_code == 0, res.output
    assert "[bold]out" in res.output
    assert not any(p.name == "pwned" for p in tmp_path.rglob("*"))


def test_doctor_json_schema_and_exit_1_on_error():
    res = invoke("doctor", "--script", str(FIXTURES / "scripts" / "bad_device_id.py"), "--json")
    assert res.exit_code == 1, res.output
    data = json.loads(res.output)
    assert set(data) >= {"findings", "environment", "summary"}
    [finding] = data["findings"]
    assert list(finding) == ["severity", "rule", "file", "line", "message", "fix", "source"]
    assert finding["severity"] == "error" and finding["rule"] == "xpu-no-device-id" and finding["line"] == 10


def test_doctor_warnings_exit_0_and_render_for_humans():
    res = invoke("doctor", "--script", str(FIXTURES / "scripts" / "bad_probe.py"))
    assert res.exit_code == 0, res.output
    assert "allreduce-one-element-probe" in res.output and "fix:" in res.output and "source:" in res.output
    res = invoke("doctor", "--launcher", str(FIXTURES / "launchers" / "clean_alcf.pbs"), "--platform", "aurora")
    assert res.exit_code == 0 and "no findings" in res.output


def test_doctor_several_files_and_options(tmp_path):
    res = invoke(
        "doctor",
        "--launcher",
        str(FIXTURES / "launchers" / "bad_daos_fsdp.pbs"),
        "--script",
        str(FIXTURES / "scripts" / "clean_fsdp.py"),
        "--json",
    )
    data = json.loads(res.output)
    assert res.exit_code == 1 and [f["rule"] for f in data["findings"]] == ["daos-preload-fsdp"]
    assert data["findings"][0]["severity"] == "error"  # the script shows FSDP: no longer an assumption


@pytest.mark.parametrize(
    "args",
    [
        ("--script", "/no/such/train.py"),
        ("--launcher", "/no/such/launch.pbs"),
        ("--platform", "nowhere"),
        ("--strategy", "fsdp"),
        ("--settle-s", "-1"),
        ("--launcher", str(FIXTURES / "refused" / "launch_aurora.py")),
        ("--launcher", str(FIXTURES / "launchers" / "clean_alcf.pbs"), "--module-show", "/no/such/show.txt"),
        (
            "--launcher",
            str(FIXTURES / "launchers" / "clean_alcf.pbs"),
            "--module-show",
            str(FIXTURES / "launchers" / "clean_alcf.pbs"),
        ),
    ],
)
def test_doctor_bad_input_is_exit_2(args):
    res = invoke("doctor", *args, "--no-live")
    assert res.exit_code == 2 and res.output.startswith("error: ") and res.output.count("\n") == 1


def test_doctor_live_by_default_when_no_file(tmp_path):
    res = invoke("doctor", "--json", "--device-glob", str(tmp_path / "none*"), "--env-profile", "cpu-gloo")
    data = json.loads(res.output)
    assert data["environment"]["torch"] and data["environment"]["profile"]["name"] == "cpu-gloo"


def test_emit_picks_the_queue_and_says_so(tmp_path):
    out = tmp_path / "job"
    res = invoke("emit", "--strategy", "ddp", "--platform", "aurora", "--nodes", "8", "--out", str(out))
    assert res.exit_code == 0, res.output
    assert "#PBS -q debug-scaling" in (out / "launch.pbs").read_text().splitlines()
    assert "queue debug-scaling picked for 8 nodes" in " ".join(res.output.split())


@pytest.mark.parametrize(
    ("name", "args", "code", "rules"),
    [
        ("clean_alcf_guide.pbs", (), 0, []),
        ("clean_alcf_guide.pbs", ("--platform", "aurora"), 0, []),
        ("clean_alcf.pbs", ("--platform", "aurora"), 0, []),
        ("bad_rank_module_load_after_exports.pbs", (), 1, ["launcher-no-per-rank-export"]),
        ("bad_debug_8_nodes.pbs", (), 1, ["launcher-queue-limits"]),
    ],
)
def test_doctor_on_alcf_and_prism_style_launchers(name, args, code, rules):
    res = invoke("doctor", "--launcher", str(FIXTURES / "launchers" / name), *args, "--json")
    assert res.exit_code == code, res.output
    assert [f["rule"] for f in json.loads(res.output)["findings"]] == rules


def test_doctor_python_launcher_names_the_fix():
    res = invoke("doctor", "--launcher", str(FIXTURES / "refused" / "launch_aurora.py"))
    assert res.exit_code == 2 and "Python program" in res.output and "dry-run output" in res.output


@pytest.mark.parametrize(
    ("name", "code", "rules"),
    [
        ("prism_daos_fsdp.pbs", 1, ["daos-preload-fsdp", "launcher-rank-straddles-sockets"]),
        ("prism_daos_fsdp_no_pil4dfs.pbs", 0, ["launcher-rank-straddles-sockets"]),
    ],
)
def test_doctor_on_a_prism_daos_job_follows_the_preload_branch(name, code, rules):
    res = invoke(
        "doctor",
        "--launcher",
        str(FIXTURES / "launchers" / name),
        "--platform",
        "aurora",
        "--strategy",
        "fsdp_full_shard",
        "--json",
    )
    assert res.exit_code == code, res.output
    findings = json.loads(res.output)["findings"]
    assert [f["rule"] for f in findings] == rules
    if code:
        assert findings[0]["line"] == 26 and "NO_PIL4DFS" in findings[0]["message"]


def test_doctor_module_show_makes_an_unknown_reset_an_error():
    args = ("doctor", "--launcher", str(FIXTURES / "launchers" / "warn_export_unknown_to_module.pbs"), "--json")
    assert invoke(*args).exit_code == 0
    res = invoke(*args, "--module-show", str(FIXTURES / "module_show" / "frameworks-lmod.txt"))
    assert res.exit_code == 1 and "launcher-export-before-module-load" in res.output
