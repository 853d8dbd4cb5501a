"""plan --env-profile NAME|FILE: the environment is an input; its CCL variables price the
collectives, a platform file's own CCL keys stay overrides, emit --from-plan writes the same profile."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from prism_strategy.cli import app
from prism_strategy.specs.presets import DATA

runner = CliRunner()
ARGS = ["--model", "qwen3-1.7b", "--nodes", "8", "--ckpt-freq", "0", "--global-batch", "192"]


def plan_json(*args: str) -> dict:
    r = runner.invoke(app, ["plan", *args, "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def by_strategy(p: dict) -> dict[str, dict]:
    return {o["strategy"]: o for o in p["options"]}


def profile_file(tmp_path: Path, **variables: str) -> Path:
    lines = ['name = "test-profile"', 'version = "1"', 'description = "d"', 'source = "test"']
    for k, v in variables.items():
        lines += ["[[var]]", f'name = "{k}"', f'value = "{v}"', 'why = "test"', 'source = "test"']
    f = tmp_path / "profile.toml"
    f.write_text("\n".join(lines) + "\n")
    return f


def test_the_platforms_own_profile_is_the_default_and_changes_nothing():
    default, own = plan_json(*ARGS), plan_json(*ARGS, "--env-profile", "aurora-prism-2026.11")
    assert default["inputs"]["env_profile"] == own["inputs"]["env_profile"] == "aurora-prism-2026.11"
    assert default["options"] == own["options"]
    assert "env profile" not in default["options"][0]["provenance"]["communication"]


def test_alcfs_profile_leaves_the_allreduce_to_oneccls_topo_and_says_so():
    base, alcf = by_strategy(plan_json(*ARGS)), plan_json(*ARGS, "--env-profile", "aurora-alcf-minimal")
    assert alcf["inputs"]["env_profile"] == "aurora-alcf-minimal"
    ddp = by_strategy(alcf)["ddp"]  # DDP's gradients go by all-reduce: ring (PRISM's) vs topo
    assert ddp["step_time_s"] != base["ddp"]["step_time_s"]
    said = ddp["provenance"]["communication"]
    assert "env profile aurora-alcf-minimal" in said and "allreduce_algorithm ring -> topology" in said


def test_a_profile_file_with_four_workers_is_priced_and_named(tmp_path):
    f = profile_file(tmp_path, CCL_WORKER_COUNT="4", CCL_ALLREDUCE="ring")
    p = plan_json(*ARGS, "--env-profile", str(f))
    assert p["inputs"]["env_profile"] == str(f.resolve())
    said = p["options"][0]["provenance"]["communication"]
    assert "CCL_WORKER_COUNT=4" in said and "ccl_worker_count 1 -> 4" in said
    assert (
        by_strategy(p)["fsdp_full_shard"]["step_time_s"]
        != by_strategy(plan_json(*ARGS))["fsdp_full_shard"]["step_time_s"]
    )


def test_a_platform_files_own_ccl_key_stays_an_override(tmp_path):
    text = (DATA / "platforms" / "aurora.toml").read_text().replace("ccl_worker_count = 1\n", "ccl_worker_count = 2\n")
    plat = tmp_path / "my-aurora.toml"
    plat.write_text(text)
    f = profile_file(tmp_path, CCL_WORKER_COUNT="4")
    pinned = plan_json(*ARGS, "--platform", str(plat), "--env-profile", str(f))
    said = pinned["options"][0]["provenance"]["communication"]
    assert "the platform file's own ccl_worker_count kept" in said and "1 -> 4" not in said
    as_file = plan_json(*ARGS, "--platform", str(plat))
    assert by_strategy(pinned)["zero3"]["step_time_s"] == by_strategy(as_file)["zero3"]["step_time_s"]


def test_an_unknown_or_malformed_profile_is_one_line_exit_2(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("name = [\n")
    worse = profile_file(tmp_path, CCL_WORKER_COUNT="many")
    for profile, words in (("nope", "unknown env profile 'nope'"), (str(bad), "not valid TOML"), (str(worse), "many")):
        r = runner.invoke(app, ["plan", *ARGS, "--env-profile", profile])
        assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1 and words in r.stderr, r.output


def test_emit_from_plan_writes_the_plans_profile(tmp_path):
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(plan_json(*ARGS, "--env-profile", "aurora-alcf-minimal")))
    out = tmp_path / "out"
    r = runner.invoke(app, ["emit", "--from-plan", str(plan), "--out", str(out), "--account", "A"])
    assert r.exit_code == 0, r.output
    assert "env profile aurora-alcf-minimal" in (out / "env.sh").read_text()
