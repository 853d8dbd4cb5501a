"""doctor on files: each fixture yields exactly its finding, clean fixtures none, and every file
`emit` writes, fed back to the doctor, yields none."""

import sys
from pathlib import Path

import pytest

from prism_strategy.diagnose.doctor import DoctorRequest, diagnose
from prism_strategy.diagnose.findings import Context, doctor_rules, evaluate
from prism_strategy.diagnose.live_checks import load_known_bad
from prism_strategy.emit.files import write_files_atomically
from prism_strategy.emit.launch import EmitRequest, emit_files
from prism_strategy.specs import SpecError
from prism_strategy.specs.presets import load_platform, platform_names
from prism_strategy.strategies import STRATEGY_NAMES

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "doctor"
MANIFEST = tomllib.loads((FIXTURES / "expected.toml").read_text())
CASES = [(kind, name, spec) for kind in ("scripts", "launchers") for name, spec in MANIFEST[kind].items()]


def _request(kind: str, path: Path, args: list[str]) -> DoctorRequest:
    opts = dict(zip(args[::2], args[1::2]))
    files = {"launchers": (path,)} if kind == "launchers" else {"scripts": (path,)}
    return DoctorRequest(
        **files,
        platform=opts.get("--platform"),
        strategy=opts.get("--strategy"),
        nodes=int(opts["--nodes"]) if "--nodes" in opts else None,
    )


def test_every_fixture_is_in_the_manifest():
    on_disk = {(kind, p.name) for kind in ("scripts", "launchers") for p in (FIXTURES / kind).iterdir()}
    assert on_disk == {(kind, spec.get("file", name)) for kind, name, spec in CASES}


@pytest.mark.parametrize(("kind", "name", "spec"), CASES, ids=[n for _, n, _ in CASES])
def test_fixture_yields_exactly_its_findings(kind, name, spec):
    path = FIXTURES / kind / spec.get("file", name)
    report = diagnose(_request(kind, path, spec.get("args", [])))
    assert {f.rule: f.severity for f in report.findings} == spec["expect"]
    assert len(report.findings) == len(spec["expect"])
    for f in report.findings:
        assert f.file == str(path) and f.line >= 1 and f.message and f.fix and f.source
    assert report.exit_code == (1 if "error" in spec["expect"].values() else 0)


def test_every_doctor_rule_has_a_bad_fixture():
    fired = {rule for _, _, spec in CASES for rule in spec["expect"]}
    # the public projects' files and the mistakes derived from them (issue 36)
    official = tomllib.loads((FIXTURES / "official" / "expected.toml").read_text())
    fired |= {rule for group in ("official", "bad") for spec in official[group].values() for rule in spec["expect"]}
    # the framework-config rules' bad configs are in tests/cli/test_framework_configs_cli.py
    config_rules = {
        "zero3-persistence-keeps-params-gathered",
        "config-micro-batch-does-not-fit",
        "offload-exceeds-host-memory",
    }
    file_rules = {r.id for r in doctor_rules()} - {"stale-device-processes", "env-differs-from-profile"} - config_rules
    assert file_rules <= fired
    assert {b.id for b in load_known_bad().bad} | {m.id for m in load_known_bad().module} <= fired


def _emit_all(root: Path) -> list[tuple[Path, str]]:
    out = []
    for platform in platform_names():
        for strategy in STRATEGY_NAMES:
            for nodes in (1, 2):
                folder = root / f"{platform}-{strategy}-{nodes}"
                req = EmitRequest(
                    strategy=strategy,
                    platform=platform,
                    nodes=nodes,
                    account="proj",
                    static_graph=True if strategy == "ddp" else None,
                    script_args=("--x", "a b"),
                )
                write_files_atomically(folder, emit_files(req, folder).files)
                out += [(p, platform) for p in sorted(folder.iterdir())]
    return out


def test_every_emitted_file_fed_back_to_the_doctor_yields_nothing(tmp_path):
    files = _emit_all(tmp_path)
    assert len(files) > 200
    for path, _ in files:
        report = diagnose(DoctorRequest(launchers=(path,)))
        assert report.findings == [], (path, report.findings)
    for folder in {p.parent for p, _ in files}:
        launchers = tuple(sorted(folder.iterdir()))
        assert diagnose(DoctorRequest(launchers=launchers)).findings == [], folder


def test_emitted_header_gives_the_doctor_its_context(tmp_path):
    folder = tmp_path / "out"
    write_files_atomically(folder, emit_files(EmitRequest(strategy="zero3", platform="aurora", nodes=2), folder).files)
    from prism_strategy.diagnose.launcher_checks import read_launcher

    ctx = read_launcher(folder / "launch.pbs").refine(Context())
    assert (ctx.platform.name, ctx.strategy.name, ctx.nodes, ctx.env_profile) == (
        "aurora",
        "zero3",
        2,
        "aurora-prism-2026.11",
    )


def test_edited_emitted_launcher_is_caught(tmp_path):
    folder = tmp_path / "out"
    write_files_atomically(
        folder, emit_files(EmitRequest(strategy="fsdp_full_shard", platform="aurora", nodes=2), folder).files
    )
    pbs = folder / "launch.pbs"
    text = pbs.read_text().replace("export CCL_WORKER_COUNT=1", "export CCL_WORKER_COUNT=8")
    text = text.replace("exec python3", "export LD_PRELOAD=/usr/lib64/libpil4dfs.so\n    exec python3")
    text = text.replace('-ppn "$RANKS_PER_NODE"', "-ppn 6")
    pbs.write_text(text)
    rules = {f.rule: f.severity for f in diagnose(DoctorRequest(launchers=(pbs,))).findings}
    assert rules == {
        "env-ccl-worker-count": "error",
        "daos-preload-fsdp": "error",
        "launcher-ranks-per-node-mismatch": "error",
    }


def test_unknown_facts_are_assumed_one_group_at_most():
    facts = Context().facts()
    assert evaluate(
        {"device": "xpu", "passes_device_id": True}, {**facts, "passes_device_id": (True,)}, frozenset({"device"})
    ) == {"device"}
    assert (
        evaluate({"device": "xpu", "passes_device_id": True}, {**facts, "passes_device_id": (True,)}, frozenset())
        is None
    )
    both = {"device": "xpu", "compile": True, "multi_node": True}
    assert evaluate(both, {**facts, "compile": (True,)}, frozenset({"device", "nodes"})) is None
    known = Context(platform=load_platform("aurora"), nodes=2).facts()
    assert evaluate(both, {**known, "compile": (True,)}, frozenset()) == set()
    cuda = Context(platform=load_platform("dgx-h100")).facts()
    assert evaluate({"device": "xpu"}, cuda, frozenset({"device"})) is None


def test_assumed_device_is_a_warning_and_a_platform_makes_it_certain_or_silent(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("import torch.distributed as dist\ndist.init_process_group(device_id=dev)\n")
    assert [f.severity for f in diagnose(DoctorRequest(scripts=(script,))).findings] == ["warning"]
    assert [f.severity for f in diagnose(DoctorRequest(scripts=(script,), platform="aurora")).findings] == ["error"]
    assert diagnose(DoctorRequest(scripts=(script,), platform="dgx-h100")).findings == []


@pytest.mark.parametrize(("content", "match"), [("def broken(:\n", "not valid Python"), (None, "cannot read")])
def test_bad_script_is_a_spec_error(tmp_path, content, match):
    script = tmp_path / "train.py"
    if content is not None:
        script.write_text(content)
    with pytest.raises(SpecError, match=match):
        diagnose(DoctorRequest(scripts=(script,)))


def test_bad_launcher_inputs_are_spec_errors(tmp_path):
    with pytest.raises(SpecError, match="not a file"):
        diagnose(DoctorRequest(launchers=(tmp_path,)))
    bad = tmp_path / "strategy.toml"
    bad.write_text('strategy = "fsdp"\n')
    with pytest.raises(SpecError, match="fsdp_full_shard"):
        diagnose(DoctorRequest(launchers=(bad,)))
    with pytest.raises(SpecError, match="--nodes"):
        diagnose(DoctorRequest(nodes=0))


def test_a_per_rank_wrapper_script_beside_the_launcher_is_followed(tmp_path):
    launcher = tmp_path / "launch.pbs"
    launcher.write_text(
        "#!/bin/bash\nmodule load frameworks\nexport CCL_WORKER_COUNT=1\nmpiexec -n 24 -ppn 12 bash rank.sh\n"
    )
    rank = tmp_path / "rank.sh"
    rank.write_text("module load frameworks\nexec python3 train.py\n")
    rules = {f.rule for f in diagnose(DoctorRequest(launchers=(launcher,))).findings}
    assert rules == {"launcher-no-per-rank-export"}  # every export lost: one finding, not one per variable
    rank.write_text("module load frameworks\nexport CCL_WORKER_COUNT=1\nexec python3 train.py\n")
    assert diagnose(DoctorRequest(launchers=(launcher,))).findings == []
    rank.unlink()  # a wrapper the doctor cannot read: unknown, so no per-rank finding
    assert {f.rule for f in diagnose(DoctorRequest(launchers=(launcher,))).findings} == set()
