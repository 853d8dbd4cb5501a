"""Issue #26's fresh walk-through (the five users, /work/wt/walk_findings.md): each test replays a
command a user ran and asserts what they needed to see. Stores are built in tmp_path; nothing is
launched (no torchrun), so these are fast."""

from __future__ import annotations

import json
from pathlib import Path

from _bench_rows import cpu_runs
from typer.testing import CliRunner

from prism_strategy.bench.results.store import Store
from prism_strategy.cli import app
from prism_strategy.inputs.stored import row_values

runner = CliRunner()
FIX = Path(__file__).parents[1] / "fixtures"
TITAN = FIX / "imports" / "torchtitan" / "train.log"
TITAN_FLAGS = [
    "--model", "llama-3.1-8b", "--platform", "dgx-h100", "--strategy", "fsdp_full_shard", "--ckpt-freq", "0",
    "--precision", "bf16-mixed", "--micro-batch", "2", "--seq-len", "8192",
]  # fmt: skip


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


# --- doctor ------------------------------------------------------------------------------------
ENV_INIT = (
    "import torch\n"
    "torch.distributed.init_process_group('nccl')\n"
    "model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 4))\n"
)


def _doctor(*args: str):
    res = runner.invoke(app, ["doctor", *args, "--json"])
    return res.exit_code, {f["rule"]: f for f in json.loads(res.stdout)["findings"]}


def test_srun_starting_an_env_init_script_is_named_with_what_srun_sets(tmp_path):
    """`srun python train.py` with `init_process_group('nccl')`: srun sets SLURM_PROCID, env://
    reads RANK: every rank stops. The doctor says so on the script's init line."""
    script = _write(tmp_path / "train.py", ENV_INIT)
    launcher = _write(tmp_path / "launch.sh", "#!/bin/bash\n#SBATCH --nodes=2\nsrun python train.py\n")
    rc, found = _doctor("--launcher", str(launcher), "--script", str(script))
    f = found["launcher-no-rendezvous"]
    assert rc == 1 and f["file"] == str(script) and f["line"] == 2
    assert "srun" in f["message"] and "SLURM_PROCID" in f["message"] and "launch.sh:3" in f["message"]
    assert f["message"].count("RANK / WORLD_SIZE / MASTER_ADDR") == 1  # said once
    explicit = _write(tmp_path / "train.py", ENV_INIT.replace("'nccl')", "'nccl', init_method='env://')"))
    assert "launcher-no-rendezvous" in _doctor("--launcher", str(launcher), "--script", str(explicit))[1]
    tcp = _write(tmp_path / "train.py", ENV_INIT.replace("'nccl')", "'nccl', init_method='tcp://n0:29500')"))
    assert "launcher-no-rendezvous" not in _doctor("--launcher", str(launcher), "--script", str(tcp))[1]


def test_srun_is_fine_when_the_script_maps_the_slurm_variables_or_a_launcher_sets_them(tmp_path):
    mapped = _write(tmp_path / "mapped.py", "import os\nos.environ['RANK'] = os.environ['SLURM_PROCID']\n" + ENV_INIT)
    prism = _write(
        tmp_path / "prism.py", "from prism_strategy import init_distributed\nctx = init_distributed()\n" + ENV_INIT
    )
    for script in (mapped, prism):
        launcher = _write(tmp_path / "l.sh", f"#!/bin/bash\nsrun python {script.name}\n")
        assert "launcher-no-rendezvous" not in _doctor("--launcher", str(launcher), "--script", str(script))[1]
    plain = _write(tmp_path / "train.py", ENV_INIT)
    for line in ("srun torchrun --nproc-per-node 4 train.py", "srun python -m torch.distributed.run train.py"):
        launcher = _write(tmp_path / "l.sh", f"#!/bin/bash\n{line}\n")
        assert "launcher-no-rendezvous" not in _doctor("--launcher", str(launcher), "--script", str(plain))[1], line
    exported = _write(
        tmp_path / "l.sh",
        "#!/bin/bash\nexport RANK=$SLURM_PROCID WORLD_SIZE=$SLURM_NTASKS MASTER_ADDR=n0\nsrun python train.py\n",
    )
    assert "launcher-no-rendezvous" not in _doctor("--launcher", str(exported), "--script", str(plain))[1]


def test_doctor_findings_say_the_fact_once_and_wrap_at_the_table_width(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # short paths: the finding's header fits one line
    empty = _write(tmp_path / "empty.sh", "")
    rc, found = _doctor("--launcher", str(empty))
    assert rc == 1 and found["empty-file"]["message"].startswith("the launcher is empty: the file holds no command")
    assert "runs nothing" not in found["empty-file"]["message"]  # the fact once, not restated
    direct = _write(tmp_path / "direct.sh", "#!/bin/bash\npython train.py\n")
    res = runner.invoke(app, ["doctor", "--launcher", direct.name])
    body = [line for line in res.output.splitlines() if line and not line.startswith(("ERROR", "WARNING", "INFO"))]
    assert all(len(line) <= 100 for line in res.output.splitlines())
    assert len(body) > 4 and all(line.startswith("  ") for line in body[:-1])  # continuation lines keep the indent
    assert "rank 0 of a world of 1 (init" not in res.output  # env:// raises without RANK; it does not default


def test_emit_lists_its_files_one_line_each_at_the_table_width(tmp_path):
    res = runner.invoke(
        app,
        [
            "emit",
            "--strategy",
            "fsdp_full_shard",
            "--platform",
            "dgx-h100",
            "--nodes",
            "4",
            "--out",
            str(tmp_path / "o"),
        ],
    )
    assert res.exit_code == 0, res.output
    assert "  env.sh           env profile cuda-nccl: `source env.sh` on a compute node\n" in res.output


# --- plan --------------------------------------------------------------------------------------
def test_the_plan_title_names_the_oneccl_environment_it_priced():
    res = runner.invoke(app, ["plan", "--model", "qwen3-0.6b", "--platform", "aurora", "--nodes", "2",
                              "--env-profile", "aurora-alcf-minimal"])  # fmt: skip
    assert res.exit_code == 0 and "env aurora-alcf-minimal" in " ".join(res.output.split("strategy ")[0].split())
    res = runner.invoke(app, ["plan", "--model", "qwen3-0.6b", "--platform", "aurora", "--nodes", "2"])
    assert "env aurora-prism-2026.11" in " ".join(res.output.split("strategy ")[0].split())
    res = runner.invoke(app, ["plan", "--model", "llama-3.1-8b", "--platform", "dgx-h100", "--nodes", "4"])
    assert " env " not in res.output.split("strategy ")[0]  # NCCL: the environment sets nothing the model reads


def test_a_binary_config_json_is_one_line_exit_2(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_bytes(b"\xff\xfe\x00garbage")
    res = runner.invoke(app, ["plan", "--model", str(cfg), "--platform", "aurora"])
    assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1 and "cannot read" in res.output


def test_the_scaling_png_ticks_the_planned_node_counts_and_marks_identical_curves(tmp_path, monkeypatch):
    from prism_strategy import plan
    from prism_strategy.report import plots

    figs = []
    monkeypatch.setattr(plots, "_save", lambda fig, path: figs.append(fig) or path)
    p = plan("qwen3-0.6b", vision="siglip2-so400m-patch14-384", mode="projector", platform="aurora", nodes=2,
             sweep_nodes=[1, 2, 4, 10])  # fmt: skip
    plots.scaling_plot(p.sweep, tmp_path / "s.png", highlight=p.recommended)
    ax = figs[0].axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "2", "4", "10"]
    labels = [line.get_label() for line in ax.get_lines()]
    curves = {}
    for r in p.sweep:
        curves.setdefault(r["strategy"], []).append(round(r["samples_per_s"], 6))
    twins = [s for s, c in curves.items() if list(curves.values()).index(c) != list(curves).index(s)]
    assert twins and all(any(lab.startswith(s) and "(= " in lab for lab in labels) for s in twins)


# --- measurements: results, import, compare, calibrate, report ---------------------------------
def test_an_imported_run_shows_its_reserved_peak_and_the_model_figure_of_that_counter(tmp_path):
    db = str(tmp_path / "r.db")
    res = runner.invoke(app, ["results", "import", str(TITAN), *TITAN_FLAGS, "--db", db])
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "peak reserved 44.00 GiB" in text and "predicted" in text
    predicted = text.split("predicted (")[1]
    assert "peak reserved" in predicted and "peak allocated" not in predicted  # like against like
    compare = json.loads(runner.invoke(app, ["compare", "--db", db, "--json"]).stdout)[0]
    shown = float(predicted.split("peak reserved ")[1].split(" GiB")[0])
    assert abs(shown - compare["predicted"]["reserved_gib"]) < 0.01  # the figure compare sets beside it
    table = runner.invoke(app, ["results", "--db", db]).output
    header = next(line for line in table.splitlines() if line.startswith("id "))
    row = next(line for line in table.splitlines() if line.startswith("1 "))
    assert "resv GiB" in header and row.split()[-1] == "44.00"


def test_compare_applies_a_calibration_file_to_its_own_platform_and_says_which_rows_are_not(tmp_path):
    db = str(tmp_path / "r.db")
    cpu_runs(db, [("ddp", 2, 1), ("ddp", 4, 2), ("ddp", 4, 8), ("fsdp_full_shard", 4, 2), ("fsdp_full_shard", 2, 8)])
    cal = tmp_path / "cal.toml"
    res = runner.invoke(app, ["calibrate", "--platform", "cpu", "--fit", "steps", "--db", db, "--out", str(cal)])
    assert res.exit_code == 0 and cal.exists(), res.output
    assert runner.invoke(app, ["results", "import", str(TITAN), *TITAN_FLAGS, "--db", db]).exit_code == 0
    res = runner.invoke(app, ["compare", "--db", db, "--calibration", str(cal), "--json"])
    assert res.exit_code == 0, res.output
    by_platform = {r["platform"]: r["sources"]["predicted"] for r in json.loads(res.stdout)}
    assert "calibrated" in by_platform["cpu"] and "cal.toml" in by_platform["cpu"]
    assert "calibrated" not in by_platform["dgx-h100"]
    caption = " ".join(runner.invoke(app, ["compare", "--db", db, "--calibration", str(cal)]).output.split())
    assert "uncalibrated, for platform dgx-h100" in caption
    out = tmp_path / "rep"
    res = runner.invoke(app, ["report", "--db", db, "--out", str(out), "--calibration", str(cal)])
    assert res.exit_code == 0, res.output
    assert "calibration: " + str(cal) in res.output and (out / "scaling.png").is_file()


def test_compare_on_an_empty_store_says_there_is_nothing_to_compare(tmp_path):
    db = tmp_path / "empty.db"
    db.write_bytes(b"")  # a 0-byte file is an empty SQLite store
    res = runner.invoke(app, ["compare", "--db", str(db)])
    assert res.exit_code == 1 and "holds no successful run" in res.output  # a finding (issue 26 mends 4)


def test_calibrate_says_a_missing_db_fitted_no_stored_run_and_a_refusal_fitted_nothing(tmp_path):
    res = runner.invoke(app, ["calibrate", "--platform", "aurora", "--db", str(tmp_path / "typo.db"),
                              "--out", str(tmp_path / "c.toml")])  # fmt: skip
    assert res.exit_code == 0 and "typo.db does not exist: no stored runs were fitted" in res.output
    db = str(tmp_path / "r.db")
    cpu_runs(db, [("ddp", 2, 1), ("ddp", 4, 2), ("ddp", 4, 4)])
    res = runner.invoke(app, ["calibrate", "--platform", "cpu", "--fit", "steps", "--db", db,
                              "--out", str(tmp_path / "cal.toml")])  # fmt: skip
    assert res.exit_code == 1 and "not written" in res.output
    assert "free terms (none fitted):" in res.output and "  fitted:" not in res.output


def test_environment_advice_compares_against_the_profile_the_user_named():
    """`--env-profile aurora-alcf-minimal`: the advice's baseline is that profile, not "platform
    aurora's own CCL settings" (the variables that differ already showed its values)."""
    args = ["plan", "--model", "qwen3-0.6b", "--vision", "siglip2-so400m-patch14-384", "--mode", "e2e",
            "--platform", "aurora", "--nodes", "10", "--env-profile", "aurora-alcf-minimal", "--json"]  # fmt: skip
    advice = json.loads(runner.invoke(app, args).stdout)["env_advice"]
    assert advice and all(a["base_profile"] == "aurora-alcf-minimal" for a in advice)
    assert all(a["profile"] != "aurora-alcf-minimal" for a in advice)


def test_reports_scaling_curve_draws_the_measured_runs_at_its_scenario(tmp_path, monkeypatch):
    from matplotlib.collections import PathCollection

    from prism_strategy.report import plots

    db = str(tmp_path / "r.db")
    cpu_runs(db, [("ddp", 4, 8), ("ddp", 4, 2), ("fsdp_full_shard", 4, 2)])  # the curve is the latest's: mb 2
    figs = {}
    monkeypatch.setattr(plots, "_save", lambda fig, path: figs.setdefault(path.name, fig) and path)
    res = runner.invoke(app, ["report", "--db", db, "--out", str(tmp_path / "rep"), "--calibration", "none"])
    assert res.exit_code == 0, res.output
    ax = figs["scaling.png"].axes[0]
    scatters = [c for c in ax.collections if isinstance(c, PathCollection)]  # not the shaded ranges
    crosses = sorted(tuple(p) for c in scatters for p in c.get_offsets().tolist())
    rows = [r for r in Store(db).query() if row_values(r.config)["micro_batch"] == 2]
    assert crosses == sorted((1.0, r.measured["samples_per_s"]) for r in rows)  # mb 8 is another scenario


def test_emits_check_line_runs_for_every_framework_format(tmp_path):
    """`emit --format torchtitan` printed `doctor --launcher torchtitan.toml`, which doctor reads as a
    strategy.toml and refuses (exit 2): a framework config goes to `--config`."""
    import shlex

    plan = tmp_path / "plan.json"
    res = runner.invoke(app, ["plan", "--model", "llama-3.1-8b", "--platform", "dgx-h100", "--nodes", "4",
                              "--seq-len", "8192", "--json"])  # fmt: skip
    plan.write_text(res.stdout)
    for fmt, strategy in (("torchtitan", []), ("accelerate", []), ("deepspeed", ["--strategy", "zero3"])):
        out = tmp_path / fmt
        res = runner.invoke(app, ["emit", "--format", fmt, "--from-plan", str(plan), *strategy, "--out", str(out)])
        assert res.exit_code == 0, res.output
        (line,) = [x for x in res.output.splitlines() if x.startswith("check them: ")]
        argv = shlex.split(line.removeprefix("check them: "))
        checked = runner.invoke(app, argv[1:])
        assert checked.exit_code in (0, 1), f"{fmt}: {line}\n{checked.output}"
        configs = [argv[i + 1] for i, a in enumerate(argv) if a == "--config"]
        assert all(not c.endswith(("strategy.toml", "ds_config.json")) for c in configs)
        assert fmt == "deepspeed" or len(configs) == 1


def test_analyze_counts_a_prism_logs_records_as_records_not_steps():
    """PRISM's trainer logs every 10th step: 17 records over steps 40-200 are not "17 steps"."""
    res = runner.invoke(app, ["analyze", str(FIX / "imports" / "prism" / "train.log")])
    text = " ".join(res.output.split())
    assert res.exit_code == 0 and "in 17 logged records (one every 10 steps, steps 40-200;" in text
    assert "17 steps" not in text


def test_bad_output_paths_and_caps_are_one_line_exit_2(tmp_path):
    db = tmp_path / "r.db"
    db.write_bytes(b"")
    out = tmp_path / "missing" / "x.csv"
    res = runner.invoke(app, ["results", "--export", "csv", "--out", str(out), "--db", str(db)])
    assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1 and "--out" in res.output
    assert not out.parent.exists()
    res = runner.invoke(app, ["ceiling", "--model", "tiny-llama", "--max-micro-batch", "0", "--db", str(db)])
    assert res.exit_code == 2 and "--max-micro-batch" in res.output and len(res.output.strip().splitlines()) == 1
