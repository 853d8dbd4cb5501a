"""What a new user's walk-through found (issue 18): each command as a user types it, and what
the user must get back (exit code, the one line that names the problem, the figures)."""

import json
import warnings

import pytest
import torch
from typer.testing import CliRunner

from prism_strategy.cli import app
from prism_strategy.runtime.dist import DistContext
from prism_strategy.runtime.strategy_file import read_strategy_file
from prism_strategy.specs.errors import SpecError

runner = CliRunner()


def _plan_file(tmp_path, *extra):
    r = runner.invoke(
        app,
        [
            "plan",
            "--model",
            "qwen3-0.6b",
            "--platform",
            "aurora",
            "--nodes",
            "2",
            "--seq-len",
            "512",
            "--ckpt-freq",
            "0",
            *extra,
            "--json",
        ],
    )
    assert r.exit_code == 0, r.output
    path = tmp_path / "plan.json"
    path.write_text(r.stdout)
    return path, json.loads(r.stdout)


def test_emit_from_plan_keeps_the_plans_ranks_per_node(tmp_path):
    path, d = _plan_file(tmp_path, "--ranks-per-node", "6", "--global-batch", "48")
    assert d["inputs"]["world_size"] == 12
    out = tmp_path / "job"
    r = runner.invoke(app, ["emit", "--from-plan", str(path), "--out", str(out)])
    assert r.exit_code == 0, r.output
    f = read_strategy_file(out / "strategy.toml")
    assert (f.nodes, f.ranks_per_node) == (2, 6)
    assert f.micro_batch * f.grad_accum * f.nodes * f.ranks_per_node == 48  # the plan's global batch
    assert "RANKS_PER_NODE=6" in (out / "launch.pbs").read_text()


def test_emit_takes_ranks_per_node_and_refuses_more_than_the_devices(tmp_path):
    r = runner.invoke(
        app,
        [
            "emit",
            "--strategy",
            "ddp",
            "--platform",
            "aurora",
            "--nodes",
            "2",
            "--ranks-per-node",
            "6",
            "--out",
            str(tmp_path / "a"),
        ],
    )
    assert r.exit_code == 0, r.output
    assert read_strategy_file(tmp_path / "a" / "strategy.toml").ranks_per_node == 6
    r = runner.invoke(
        app,
        ["emit", "--strategy", "ddp", "--platform", "aurora", "--ranks-per-node", "13", "--out", str(tmp_path / "b")],
    )
    assert r.exit_code == 2 and "12 devices per node" in r.stderr and not (tmp_path / "b").exists()
    path, _ = _plan_file(tmp_path)
    r = runner.invoke(app, ["emit", "--from-plan", str(path), "--ranks-per-node", "6", "--out", str(tmp_path / "c")])
    assert r.exit_code == 2 and "--ranks-per-node comes from the plan" in r.stderr


def _ctx(nodes, rpn):
    return DistContext(
        rank=0,
        local_rank=0,
        world_size=nodes * rpn,
        nodes=nodes,
        ranks_per_node=rpn,
        device=torch.device("cpu"),
        backend="gloo",
        launcher="torchrun",
    )


def test_wrap_from_file_warns_when_the_running_layout_differs(tmp_path):
    from prism_strategy.runtime.wrap import wrap_from_file

    f = tmp_path / "strategy.toml"
    f.write_text('strategy = "ddp"\nmicro_batch = 2\ngrad_accum = 2\nnodes = 2\nranks_per_node = 6\n')
    model = torch.nn.Linear(2, 2)
    with pytest.warns(
        UserWarning,
        match=r"planned 2 nodes x 6 ranks per node, this job runs 2 x 12; "
        r"global batch 48 planned, 96 now",
    ):
        with pytest.raises(SpecError, match="no process group"):  # no group here: the check runs first
            wrap_from_file(model, f, ctx=_ctx(2, 12), optimizer=lambda p: torch.optim.SGD(p, lr=0.1))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(SpecError, match="no process group"):
            wrap_from_file(model, f, ctx=_ctx(2, 6), optimizer=lambda p: torch.optim.SGD(p, lr=0.1))


def test_sweep_efficiency_is_that_of_the_rows_beside_it():
    r = runner.invoke(
        app,
        [
            "plan",
            "--model",
            "qwen3-0.6b",
            "--platform",
            "aurora",
            "--seq-len",
            "512",
            "--global-batch",
            "96",
            "--sweep-nodes",
            "1,2,4",
            "--json",
        ],
    )
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)["sweep"]
    for s in {x["strategy"] for x in rows}:
        mine = [x for x in rows if x["strategy"] == s and x["feasible"]]
        base = mine[0]
        for x in mine:  # strong scaling at a fixed global batch: per-node throughput over the first row's
            assert x["efficiency_vs_nodes"] == base["nodes"]
            assert x["scaling_efficiency"] == pytest.approx(
                (x["samples_per_s"] / x["nodes"]) / (base["samples_per_s"] / base["nodes"])
            )
    table = runner.invoke(
        app,
        [
            "plan",
            "--model",
            "qwen3-0.6b",
            "--platform",
            "aurora",
            "--seq-len",
            "512",
            "--global-batch",
            "96",
            "--sweep-nodes",
            "1,2,4",
        ],
    ).stdout
    assert "eff = samples/s per node over the same strategy's first feasible row" in " ".join(table.split())


IMPORTS = __import__("pathlib").Path(__file__).resolve().parents[1] / "fixtures" / "imports"


def test_a_store_with_a_relative_model_path_works_from_any_directory(tmp_path, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    cfg = {
        "model_type": "qwen3",
        "hidden_size": 1024,
        "num_hidden_layers": 28,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "intermediate_size": 3072,
        "vocab_size": 151936,
        "max_position_embeddings": 40960,
        "tie_word_embeddings": True,
    }
    (work / "my-qwen.json").write_text(json.dumps(cfg))
    db = tmp_path / "r.db"
    monkeypatch.chdir(work)
    r = runner.invoke(
        app,
        [
            "results",
            "import",
            str(IMPORTS / "prism" / "train.log"),
            "--model",
            "my-qwen.json",
            "--vision",
            "siglip2-base-patch16-224",
            "--platform",
            "aurora",
            "--seq-len",
            "512",
            "--ckpt-freq",
            "1",
            "--precision",
            "bf16-pure",
            "--db",
            str(db),
        ],
    )
    assert r.exit_code == 0, r.output
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    (work / "my-qwen.json").unlink()  # the file may even move: the row holds the architecture
    from prism_strategy.specs.presets import forget_loaded

    forget_loaded()  # as a fresh process: nothing remembered from the import
    r = runner.invoke(app, ["compare", "--db", str(db), "--json", "--calibration", "none"])
    assert r.exit_code == 0, r.output
    [row] = json.loads(r.stdout)
    assert row["config"]["model"] == str(work / "my-qwen.json") and row["predicted"]["samples_per_s"] > 0
    ratio = row["measured"]["samples_per_s"] / row["predicted"]["samples_per_s"]  # the same FLOPs per sample
    assert row["measured"]["mfu"] == pytest.approx(row["predicted"]["mfu"] * ratio) and row["predicted"]["mfu"] > 0
    assert row["measured"]["tokens_per_s_per_device"] > 0
    r = runner.invoke(app, ["report", "--db", str(db), "--out", str(tmp_path / "rep"), "--platform", "aurora"])
    assert r.exit_code == 0, r.output


def test_nothing_fits_at_the_asked_micro_batch_is_a_finding_with_the_table():
    r = runner.invoke(app, ["plan", "--model", "olmo-7b", "--platform", "cpu", "--micro-batch", "1"])
    assert r.exit_code == 1, r.output
    out = " ".join(r.stdout.split())
    assert "recommended: none" in out and "needs 116.2 GiB at micro-batch 1" in out  # the table, with the needs
    assert "--micro-batch" not in out.split("recommended: none")[1].split("- ddp")[0]  # no smaller batch exists
    d = json.loads(
        runner.invoke(app, ["plan", "--model", "olmo-7b", "--platform", "cpu", "--micro-batch", "8", "--json"]).stdout
    )
    assert d["recommended"] is None and all(not o["feasible"] and "GiB" in o["why_not"] for o in d["options"])


def test_compile_across_aurora_nodes_is_planned_with_one_warning_naming_both_stacks():
    """rules.toml xpu-multinode-compile is a guardrail: PRISM's whole-backbone compile deadlocked
    oneCCL, torchtitan's per-block FSDP2 compile ran on 2 and 64 nodes (E1, E2)."""
    r = runner.invoke(app, ["plan", "--model", "qwen3-0.6b", "--platform", "aurora", "--nodes", "2", "--compile"])
    assert r.exit_code == 0, r.output
    out = " ".join(r.stdout.split())
    assert out.count("warning: xpu-multinode-compile") == 1 and "(records E1, E2)" in out
    assert "recommended: none" not in out and "drop --compile" not in out


@pytest.mark.parametrize("cmd", [["results"], ["compare"], ["report", "--out", "{tmp}/rep"]])
def test_read_commands_on_a_missing_store_exit_2_naming_it(tmp_path, cmd):
    argv = [a.replace("{tmp}", str(tmp_path)) for a in cmd] + ["--db", "/nonexistent/x.db"]
    r = runner.invoke(app, argv)
    assert r.exit_code == 2 and "--db /nonexistent/x.db: no results store there" in r.stderr, r.output
    assert not (tmp_path / "rep").exists()


def test_results_says_its_journal_mode_and_takes_json(tmp_path):
    from prism_strategy.bench.results.store import Result, Store

    db = tmp_path / "r.db"
    Store(db).add(Result(kind="bench", status="ok", strategy="ddp", platform="cpu", config={"nproc": 2}, measured={}))
    r = runner.invoke(app, ["results", "--db", str(db)])
    assert r.exit_code == 0 and "store: " in r.stdout and ("WAL" in r.stdout or "rollback journal" in r.stdout)
    d = json.loads(runner.invoke(app, ["results", "--db", str(db), "--json"]).stdout)
    assert d["store"]["journal_mode"] in ("wal", "delete") and d["store"]["filesystem"] and len(d["results"]) == 1


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (["plan", "--platform", "aurora", "--ranks-per-node", "13"], "--ranks-per-node 13 exceeds aurora's 12 devices"),
        (["plan", "--image-tokens", "64"], "--image-tokens 64 needs --vision"),
        (["plan", "--model", "{tmp}/x.json"], "model file '{tmp}/x.json' does not exist"),
        (["plan", "--vision", "{tmp}/clip/config.json"], "does not exist"),
        (["plan", "--platform", "{tmp}/mine.toml"], "platform file '{tmp}/mine.toml' does not exist"),
    ],
)
def test_misleading_inputs_are_exit_2_naming_the_problem(tmp_path, argv, fragment):
    r = runner.invoke(app, [a.replace("{tmp}", str(tmp_path)) for a in argv])
    err = r.stderr.strip().splitlines()
    assert r.exit_code == 2 and len(err) == 1 and fragment.replace("{tmp}", str(tmp_path)) in err[0], r.output
    assert "use a preset (" not in err[0]  # a missing file is not an unknown preset


def test_doctor_on_a_plan_file_says_it_is_not_a_launcher(tmp_path):
    path, _ = _plan_file(tmp_path)
    r = runner.invoke(app, ["doctor", "--launcher", str(path), "--no-live"])
    assert r.exit_code == 2 and "is a `plan --json` file, not a launcher" in r.stderr and "emit --from-plan" in r.stderr
