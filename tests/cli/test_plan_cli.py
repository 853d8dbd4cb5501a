"""`prism-strategy plan` / models / platforms / strategies: JSON contract, tables, bad input."""

import json

import pytest
from typer.testing import CliRunner

from prism_strategy.cli import app
from prism_strategy.strategies import STRATEGY_NAMES

runner = CliRunner()
OPTION_KEYS = {
    "strategy",
    "feasible",
    "why_not",
    "memory_gib",
    "max_micro_batch",
    "step_time_s",
    "samples_per_s",
    "comm_fraction",
    "bound",
    "scaling_efficiency",
    "notes",
    "provenance",
}
MEMORY_KEYS = {"params", "grads", "optimizer", "activations", "buffers", "reserve", "total"}


def run_json(*args):
    r = runner.invoke(app, ["plan", *args, "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_plan_json_contract():
    d = run_json(
        "--model", "qwen3-0.6b", "--platform", "aurora", "--nodes", "2", "--seq-len", "512", "--micro-batch", "8"
    )
    assert set(d) >= {"inputs", "options", "recommended", "reasons", "warnings"}
    assert [o["strategy"] for o in d["options"]] == list(STRATEGY_NAMES)
    for o in d["options"]:
        assert OPTION_KEYS <= set(o)
        assert set(o["memory_gib"]) == MEMORY_KEYS
        assert o["memory_gib"]["total"] == pytest.approx(
            sum(o["memory_gib"][k] for k in MEMORY_KEYS - {"total"}), abs=0.01
        )
        assert o["bound"] in ("comm", "compute")
    assert d["recommended"] in STRATEGY_NAMES and d["reasons"]
    assert d["inputs"]["world_size"] == 24 and d["inputs"]["params"]["total"] > 5e8


def test_plan_without_micro_batch_uses_each_max():
    d = run_json("--model", "qwen3-0.6b", "--platform", "dgx-h100", "--seq-len", "2048")
    for o in d["options"]:
        if o["feasible"]:
            assert o["micro_batch"] == o["max_micro_batch"] > 0


def test_plan_multimodal_and_sweep():
    d = run_json(
        "--model",
        "qwen3-1.7b",
        "--vision",
        "siglip2-base-patch16-224",
        "--mode",
        "projector",
        "--platform",
        "polaris",
        "--nodes",
        "2",
        "--seq-len",
        "512",
        "--sweep-nodes",
        "1,2,4",
    )
    assert d["inputs"]["image_tokens"] == 196
    assert {r["nodes"] for r in d["sweep"]} == {1, 2, 4}
    assert all(r["nodes"] > 1 or r["scaling_efficiency"] == 1.0 for r in d["sweep"])


def test_plan_table_names_the_recommendation():
    r = runner.invoke(app, ["plan", "--model", "olmo-7b", "--platform", "aurora", "--nodes", "1", "--ckpt-freq", "1"])
    assert r.exit_code == 0, r.output
    assert "recommended: fsdp_full_shard" in r.stdout and "predicted" in r.stdout
    assert "checkpointing every block" in r.stdout and "ckpt every -" not in r.stdout
    assert all(h in r.stdout for h in ("mb", "accum", "global"))


VLM = [
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
]


def test_global_batch_is_exact_for_every_option():
    """PRISM's 2-node run at global batch 96: every option runs exactly 96 samples per step, at the
    largest micro-batch dividing 96 / 24 = 4 that fits; one that fits none says so."""
    d = run_json(*VLM, "--global-batch", "96")
    for o in d["options"]:
        assert o["micro_batch"] * o["grad_accum"] * 24 == o["global_batch"] == 96
        if o["feasible"]:
            larger = [m for m in (1, 2, 4) if m > o["micro_batch"]]
            assert all(m > o["max_micro_batch"] for m in larger), o
    ddp = next(o for o in d["options"] if o["strategy"] == "ddp")
    assert not ddp["feasible"] and "no micro-batch dividing global batch 96 fits" in ddp["why_not"]
    assert d["inputs"]["global_batch"] == 96


def test_grad_accum_with_and_without_global_batch():
    d = run_json("--model", "qwen3-0.6b", "--platform", "dgx-h100", "--seq-len", "512", "--grad-accum", "2")
    assert all(o["grad_accum"] == 2 and o["global_batch"] == o["micro_batch"] * 2 * 8 for o in d["options"])
    d = run_json(
        "--model",
        "qwen3-0.6b",
        "--platform",
        "dgx-h100",
        "--seq-len",
        "512",
        "--grad-accum",
        "2",
        "--global-batch",
        "64",
    )
    assert all((o["micro_batch"], o["grad_accum"], o["global_batch"]) == (4, 2, 64) for o in d["options"])


def test_ckpt_auto_keeps_the_fastest_that_fits_and_an_explicit_value_pins_it():
    auto = {o["strategy"]: o for o in run_json(*VLM)["options"]}
    assert run_json(*VLM)["inputs"]["ckpt_freq"] == "auto"
    pinned = {
        k: {o["strategy"]: o for o in run_json(*VLM, "--ckpt-freq", str(k))["options"]} for k in (0, "sac", 1, 2, 4)
    }
    for k, options in pinned.items():
        assert all(o["ckpt_freq"] == k for o in options.values())
    for name, o in auto.items():
        if o["feasible"]:
            same = pinned[o["ckpt_freq"]][name]
            assert same["samples_per_s"] == pytest.approx(o["samples_per_s"])
            assert all(
                p[name]["samples_per_s"] <= o["samples_per_s"] * (1 + 1e-9)
                for p in pinned.values()
                if p[name]["feasible"]
            )
    # the case: no checkpointing (the old default) leaves zero2 at 25-26 samples/s; the search finds more
    assert auto["zero2"]["samples_per_s"] > 1.1 * pinned[0]["zero2"]["samples_per_s"]


def test_mean_seq_len_times_the_mean_and_sizes_memory_at_the_longest():
    # a model whose step is device-bound at both lengths: a small one's eager host ops (dgx-h100's
    # host_op_us) outlast its FLOPs at 256 tokens, and host time does not shrink with the length
    base = [
        "--model",
        "qwen3-4b",
        "--platform",
        "dgx-h100",
        "--seq-len",
        "1024",
        "--micro-batch",
        "8",
        "--ckpt-freq",
        "0",
    ]
    full, mean = run_json(*base), run_json(*base, "--mean-seq-len", "256")
    assert mean["inputs"]["mean_seq_len"] == 256 and full["inputs"]["mean_seq_len"] is None
    for f, m in zip(full["options"], mean["options"]):
        assert m["memory_gib"] == f["memory_gib"]
        assert m["compute_s"] < 0.5 * f["compute_s"]


def test_first_reason_says_how_the_pick_won():
    for args in (
        ["--model", "qwen3-0.6b", "--platform", "aurora", "--seq-len", "512"],
        ["--model", "qwen3-0.6b", "--platform", "dgx-h100", "--seq-len", "512"],
        VLM,
    ):
        d = run_json(*args)
        speed = {o["strategy"]: o["samples_per_s"] for o in d["options"] if o["feasible"]}
        first = d["reasons"][0]
        assert first.startswith(d["recommended"] + ":")
        if "highest predicted throughput" in first:
            assert speed[d["recommended"]] == max(speed.values())
        else:
            fastest = max(speed, key=speed.get)
            assert f"the fastest, {fastest} at {speed[fastest]:.2f} samples/s" in first
            assert "within the 10% uncertainty band" in first and "chosen as" in first


def test_reasons_say_when_the_lead_comes_from_a_larger_batch():
    args = ["--model", "olmo-7b", "--platform", "polaris", "--nodes", "2", "--seq-len", "1024"]
    d = run_json(*args)
    lead = next(r for r in d["reasons"] if "comes partly from a larger batch" in r)
    rival = lead.split("lead over ")[1].split(" ")[0]
    by = {o["strategy"]: o for o in d["options"]}
    assert by[d["recommended"]]["global_batch"] > by[rival]["global_batch"]
    same = run_json(*args, "--global-batch", str(by[rival]["global_batch"]))
    assert not any("larger batch" in r for r in same["reasons"])


def test_scaling_table_always_includes_the_recommended_strategy():
    d = run_json(
        "--model",
        "qwen3-0.6b",
        "--platform",
        "dgx-h100",
        "--nodes",
        "1",
        "--seq-len",
        "512",
        "--sweep-nodes",
        "1,2,4,16",
    )
    for n in (1, 2, 4, 16):
        assert d["recommended"] in {r["strategy"] for r in d["sweep"] if r["nodes"] == n}


def test_sweep_marks_node_counts_the_global_batch_cannot_divide():
    d = run_json(*VLM, "--global-batch", "96", "--sweep-nodes", "2,16")
    assert all(r["feasible"] is False and "nearest valid: 192" in r["why_not"] for r in d["sweep"] if r["nodes"] == 16)
    assert all(r["global_batch"] == 96 for r in d["sweep"] if r["nodes"] == 2)


def test_hf_config_as_model(tmp_path):
    cfg = {
        "model_type": "llama",
        "hidden_size": 256,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "intermediate_size": 512,
        "vocab_size": 1000,
        "max_position_embeddings": 512,
    }
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    d = run_json("--model", str(tmp_path / "config.json"), "--platform", "cpu", "--seq-len", "128")
    assert d["inputs"]["params"]["total"] == 1000 * 256 * 2 + 4 * (4 * 256 * 256 + 3 * 256 * 512 + 2 * 256) + 256


@pytest.mark.parametrize("cmd", ["models", "platforms", "strategies"])
def test_lists(cmd):
    r = runner.invoke(app, [cmd, "--json"])
    assert r.exit_code == 0
    names = [row["name"] for row in json.loads(r.stdout)]
    assert names and len(names) == len(set(names))
    assert runner.invoke(app, [cmd]).exit_code == 0


def test_strategy_names_pinned():
    r = runner.invoke(app, ["strategies", "--json"])
    assert [row["name"] for row in json.loads(r.stdout)] == [
        "ddp",
        "fsdp_full_shard",
        "fsdp_shard_grad_op",
        "hsdp_full_shard",
        "hsdp_shard_grad_op",
        "zero1",
        "zero2",
        "zero3",
    ]


BAD = [
    (["--model", "gpt-17"], "unknown model"),
    (["--platform", "summit"], "unknown platform"),
    (["--mode", "lora"], "unknown mode"),
    (["--nodes", "0"], "--nodes"),
    (["--micro-batch", "-2"], "--micro-batch"),
    (["--seq-len", "0"], "--seq-len"),
    (["--model", "olmo-1b", "--seq-len", "4096"], "max positions"),
    (["--mode", "projector"], "--vision"),
    (["--vision", "qwen3-0.6b"], "not a vision encoder"),
    (["--precision", "fp8"], "unknown precision"),
    (["--optimizer", "lion"], "unknown optimizer"),
    (["--sweep-nodes", "1,x"], "--sweep-nodes"),
    (["--sweep-nodes", "0,2"], "integers >= 1"),
    (["--ckpt-freq", "99"], "--ckpt-freq"),
    (["--ckpt-freq", "often"], "'auto', 'sac' or an integer"),
    (["--ckpt-freq", "sac2"], "'auto', 'sac' or an integer"),
    (["--loss", "nonsense"], "unknown loss 'nonsense'"),
    (["--optimizer", "adamw-fast"], "unknown optimizer 'adamw-fast'"),
    (["--global-batch", "100", "--nodes", "2"], "nearest valid: 96 or 120"),
    (["--global-batch", "96", "--nodes", "2", "--micro-batch", "3"], "use one of 1, 2, 4"),
    (["--grad-accum", "0"], "--grad-accum"),
    (["--seq-len", "512", "--mean-seq-len", "600"], "--mean-seq-len"),
]


@pytest.mark.parametrize("args, fragment", BAD)
def test_bad_input_exit_2_one_line(args, fragment):
    r = runner.invoke(app, ["plan", *args])
    assert r.exit_code == 2, r.output
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and fragment in lines[0], r.stderr
    assert "Traceback" not in r.output and r.stdout == ""


def test_malformed_files_exit_2(tmp_path):
    bad_json = tmp_path / "config.json"
    bad_json.write_text("{oops")
    bad_toml = tmp_path / "p.toml"
    bad_toml.write_text("devices_per_node = [")
    for args in (["--model", str(bad_json)], ["--platform", str(bad_toml)]):
        r = runner.invoke(app, ["plan", *args])
        assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1, r.output


def test_calibration_file_changes_prediction_and_provenance(tmp_path):
    from prism_strategy.estimate.calibration import write_calibration
    from prism_strategy.specs.presets import load_platform

    aurora = load_platform("aurora")
    cal = tmp_path / "aurora.toml"
    # half the FLOP rate and twice the launch cost: every phase, FLOPs- or launch-bound, takes twice as long
    write_calibration(
        cal,
        platform="aurora",
        fingerprint={"host": "x", "torch": "2.8"},
        runs=5,
        errors={},
        values={
            "achievable_fraction": aurora.compute.achievable_fraction / 2,
            "kernel_launch_us": aurora.compute.kernel_launch_us * 2,
        },
    )
    args = ["--model", "qwen3-0.6b", "--seq-len", "512", "--micro-batch", "8"]
    base = run_json(*args, "--calibration", "none")["options"][0]
    cald = run_json(*args, "--calibration", str(cal))["options"][0]
    assert cald["compute_s"] == pytest.approx(2 * base["compute_s"])
    assert cald["provenance"]["calibration"].startswith("calibrated") and base["provenance"]["calibration"] == "none"
    wrong = tmp_path / "polaris.toml"
    write_calibration(wrong, platform="polaris", fingerprint={}, values={}, runs=1, errors={})
    r = runner.invoke(app, ["plan", *args, "--calibration", str(wrong)])
    assert r.exit_code == 2 and "not 'aurora'" in r.stderr


def test_plan_traced_adds_traced_fields_beside_analytic():
    d = run_json("--model", "tiny-llama", "--platform", "cpu", "--seq-len", "64", "--micro-batch", "2", "--traced")
    for o in d["options"]:
        assert set(o["traced_memory_gib"]) == MEMORY_KEYS
        assert o["traced_max_micro_batch"] >= 1 and o["provenance"]["traced_memory"] == o["traced_method"]
    fs = next(o for o in d["options"] if o["strategy"] == "fsdp_full_shard")
    assert fs["traced_method"].startswith("traced") and "zero" not in fs["traced_method"]
    assert next(o for o in d["options"] if o["strategy"] == "zero2")["traced_method"].startswith("analytic")


def test_estimate_command_and_bad_factory():
    r = runner.invoke(
        app,
        [
            "estimate",
            "--model",
            "tiny-llama",
            "--strategy",
            "ddp",
            "--platform",
            "cpu",
            "--seq-len",
            "64",
            "--micro-batch",
            "1",
            "--json",
        ],
    )
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["traced_memory_gib"]["total"] > 0 and d["memory_gib"]["total"] > 0
    bad = runner.invoke(app, ["estimate", "--model", "nope:fn", "--platform", "cpu", "--seq-len", "64"])
    assert bad.exit_code == 2 and "nope" in bad.stderr


def test_tune_ranks_with_a_calibration_and_refuses_another_platforms(tmp_path):
    """tune reads --calibration before it launches anything: a file for another platform is exit 2."""
    from prism_strategy.estimate.calibration import write_calibration

    wrong = tmp_path / "polaris.toml"
    write_calibration(wrong, platform="polaris", fingerprint={}, values={}, runs=1, errors={})
    r = runner.invoke(app, ["tune", "--platform", "cpu", "--calibration", str(wrong), "--db", str(tmp_path / "r.db")])
    assert r.exit_code == 2 and "not 'cpu'" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.output
    assert not (tmp_path / "r.db").exists()


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--ckpt-freqs", "x"], "--ckpt-freqs"),
        (["--ckpt-freqs", "-1"], "integers >= 0"),
        (["--micro-batches", "0"], "integers >= 1"),
    ],
)
def test_tune_bad_lists_exit_2_one_line(tmp_path, args, fragment):
    r = runner.invoke(app, ["tune", "--calibration", "none", "--db", str(tmp_path / "r.db"), *args])
    assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1 and fragment in r.stderr, r.output
