"""Human output of plan / models / platforms / strategies fits the width; plan --markdown;
emit --from-plan; the wording of sources and presets."""

import json
from pathlib import Path

import pytest
import tomllib
from typer.testing import CliRunner

from prism_strategy.cli import app
from prism_strategy.runtime.strategy_file import read_strategy_file

runner = CliRunner()
PLAN = [
    "plan",
    "--model",
    "olmo-7b",
    "--vision",
    "siglip2-so400m-patch14-384",
    "--platform",
    "aurora",
    "--nodes",
    "2",
    "--seq-len",
    "1024",
    "--global-batch",
    "96",
    "--sweep-nodes",
    "1,2,4,16",
]
DATA = Path(__file__).resolve().parents[2] / "src" / "prism_strategy" / "data"


def widest(args, env):
    r = runner.invoke(app, args, env=env)
    assert r.exit_code == 0, r.output
    return max(len(line) for line in r.stdout.splitlines()), r.stdout


@pytest.mark.parametrize("args", [PLAN, ["models"], ["platforms"], ["strategies"]], ids=lambda a: a[0])
@pytest.mark.parametrize("columns, limit", [("80", 80), ("100", 100), ("300", 100), (None, 100)])
def test_tables_fit_columns_and_a_pipe_stays_at_most_100(args, columns, limit):
    width, out = widest(args, {"COLUMNS": columns})
    assert width <= limit, out
    assert "[1]" in out  # long notes and texts are numbered footnotes, not wrapped cells


def test_narrow_plan_keeps_whole_strategy_names_and_the_batch_columns():
    _, out = widest(PLAN, {"COLUMNS": "80"})
    for name in ("fsdp_shard_grad_op", "hsdp_shard_grad_op", "zero2"):
        assert any(line.split() and line.split()[0].lstrip("*") == name for line in out.splitlines()), name
    header = next(line for line in out.splitlines() if line.startswith("strategy"))
    assert {"strategy", "fits", "GiB", "ckpt", "mb", "accum", "global", "samples/s", "comm"} <= set(header.split())


def test_markdown_report_and_plot_beside_it(tmp_path):
    md = tmp_path / "plan.md"
    r = runner.invoke(
        app, ["plan", "--model", "qwen3-0.6b", "--platform", "dgx-h100", "--seq-len", "512", "--markdown", str(md)]
    )
    assert r.exit_code == 0, r.output
    text = md.read_text()
    png = tmp_path / "plan-scaling.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "**Recommended:" in text and "| strategy | fits |" in text and "### Assumptions" in text
    assert f"![scaling (predicted, 80% range shaded)]({png.name})" in text and "ckpt_freq: `auto`" in text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan-scaling.png", "plan.md"]


@pytest.mark.parametrize("target", ["missing/plan.md", "."])
def test_markdown_bad_target_is_exit_2_and_writes_nothing(tmp_path, target):
    r = runner.invoke(
        app,
        ["plan", "--model", "qwen3-0.6b", "--platform", "cpu", "--seq-len", "64", "--markdown", str(tmp_path / target)],
    )
    assert r.exit_code == 2 and "--markdown" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.output
    assert r.stdout == "" and list(tmp_path.iterdir()) == []


@pytest.fixture
def plan_json(tmp_path):
    r = runner.invoke(app, [*PLAN[:-2], "--json"])
    assert r.exit_code == 0, r.output
    path = tmp_path / "plan.json"
    path.write_text(r.stdout)
    return path, json.loads(r.stdout)


def test_emit_from_plan_carries_the_plans_choices(tmp_path, plan_json):
    path, d = plan_json
    for strategy in (None, "fsdp_full_shard"):
        out = tmp_path / f"job-{strategy}"
        r = runner.invoke(
            app, ["emit", "--from-plan", str(path), "--out", str(out), *(["--strategy", strategy] if strategy else [])]
        )
        assert r.exit_code == 0, r.output
        name = strategy or d["recommended"]
        o = next(o for o in d["options"] if o["strategy"] == name)
        f = read_strategy_file(out / "strategy.toml")
        assert (f.strategy, f.micro_batch, f.grad_accum, f.ckpt_freq) == (
            name,
            o["micro_batch"],
            o["grad_accum"],
            o["ckpt_freq"],
        )
        assert f.mixed_precision == "bf16"  # the plan's bf16-mixed
        assert f.micro_batch * f.grad_accum * 24 == 96
        if (out / "ds_config.json").exists():
            ds = json.loads((out / "ds_config.json").read_text())
            assert (ds["train_micro_batch_size_per_gpu"], ds["gradient_accumulation_steps"]) == (
                f.micro_batch,
                f.grad_accum,
            )


@pytest.mark.parametrize(
    "extra, fragment",
    [
        (["--strategy", "ddp"], "infeasible"),
        (["--strategy", "fsdp"], "no option 'fsdp'"),
        (["--nodes", "4"], "--nodes comes from the plan"),
    ],
)
def test_emit_from_plan_bad_choices_exit_2_and_write_nothing(tmp_path, plan_json, extra, fragment):
    path, _ = plan_json
    r = runner.invoke(app, ["emit", "--from-plan", str(path), "--out", str(tmp_path / "job"), *extra])
    assert r.exit_code == 2 and fragment in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.output
    assert not (tmp_path / "job").exists()


def test_emit_needs_a_strategy_or_a_plan(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    for args, fragment in (
        (["--platform", "cpu"], "--from-plan"),
        (["--from-plan", str(bad)], "not a `plan --json`"),
        (["--from-plan", str(tmp_path / "none.json")], "no such file"),
    ):
        r = runner.invoke(app, ["emit", "--out", str(tmp_path / "job"), *args])
        assert r.exit_code == 2 and fragment in r.stderr, r.output


def test_sources_name_what_they_are_and_presets_say_their_hardware():
    files = [*sorted((DATA / "platforms").glob("*.toml")), DATA / "rules.toml"]
    for f in files:
        assert "DOMAIN" not in f.read_text(), f
    h200 = tomllib.loads((DATA / "platforms" / "dgx-h200.toml").read_text())
    assert "H200" in h200["description"] and "H100" not in h200["description"]


@pytest.mark.parametrize(
    "text, fragment",
    [
        ('strategy = "ddp"\nmicro_batch = 0\n', "micro_batch must be a positive integer"),
        ('strategy = "ddp"\ngrad_accum = "2"\n', "grad_accum must be a positive integer"),
        ('strategy = "ddp"\nprecision = "fp8"\n', "unknown key 'precision'"),
    ],
)
def test_strategy_file_plan_keys_are_checked(tmp_path, text, fragment):
    from prism_strategy.specs.errors import SpecError

    p = tmp_path / "strategy.toml"
    p.write_text(text)
    with pytest.raises(SpecError, match=fragment):
        read_strategy_file(p)
