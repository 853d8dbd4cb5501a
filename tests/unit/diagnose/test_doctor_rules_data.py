"""Doctor rules are data: a rule added to rules.toml is reported wherever a check observes a fact
its `when` names, with no code change, and no check names a rule (the checks report facts;
diagnose/findings.check_observed picks the rules)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from prism_strategy import rules
from prism_strategy.diagnose.doctor import DoctorRequest, diagnose
from prism_strategy.diagnose.findings import DOMAINS, doctor_rules
from prism_strategy.diagnose.live_checks import load_known_bad
from prism_strategy.rules import load_rules, parse_rules
from prism_strategy.specs import SpecError
from prism_strategy.specs.presets import DATA, read_toml

NO_BIND = "launcher-no-cpu-bind-xpu"
"""mpiexec without --cpu-bind on Aurora (a warning these launchers, written for another rule, all get)."""

SRC = Path(__file__).resolve().parents[3] / "src" / "prism_strategy"
SCRIPT = Path(__file__).resolve().parents[2] / "fixtures" / "doctor" / "scripts" / "bad_device_id.py"

NEW_RULE = """
[[rule]]
id = "cuda-device-id-note"
kind = "guardrail"
doctor = { severity = "info" }
when = { device = "cuda", passes_device_id = true }
reason = "on CUDA, device_id binds the process group to one device eagerly"
fix = "nothing to do"
source = "this test"
"""


@pytest.fixture
def rules_with_new_rule(tmp_path, monkeypatch):
    copy = tmp_path / "rules.toml"
    copy.write_text((DATA / "rules.toml").read_text() + NEW_RULE)
    table = parse_rules(read_toml(copy), str(copy))
    monkeypatch.setattr(rules, "load_rules", lambda: table)
    return table


def _found(platform: str | None) -> dict[str, tuple[str, int, str]]:
    report = diagnose(DoctorRequest(scripts=(SCRIPT,), platform=platform, live=False))
    return {f.rule: (f.severity, f.line, f.message) for f in report.findings}


def test_a_rule_added_as_data_is_reported_with_no_code_change(rules_with_new_rule):
    found = _found("polaris")  # CUDA: xpu-no-device-id does not apply, the new rule does
    assert found == {
        "cuda-device-id-note": (
            "info",
            10,
            "init_process_group(..., device_id=...): on CUDA, device_id binds the process group to one device eagerly",
        )
    }
    assert _found("aurora") == {"xpu-no-device-id": ("error", 10, _found("aurora")["xpu-no-device-id"][2])}


def test_without_the_rule_the_same_script_on_cuda_has_no_finding():
    assert _found("polaris") == {}


def test_a_doctor_table_with_an_unknown_severity_or_group_is_refused():
    bad = read_toml(DATA / "rules.toml")
    for doctor in ({"severity": "fatal"}, {"severity": "error", "assume": ["weather"]}):
        rule = {**bad["rule"][0], "doctor": doctor}
        with pytest.raises(SpecError, match="doctor"):
            parse_rules({"rule": [rule]})


def test_every_doctor_rule_names_a_fact_a_check_can_observe():
    """A `when` of context facts only (device, engine, ...) would never be evaluated."""
    assert doctor_rules()
    assert [r.id for r in doctor_rules() if not set(r.when) - set(DOMAINS)] == []


# --- no check names a rule ------------------------------------------------------------------
def _rule_ids() -> set[str]:
    kb = load_known_bad()
    return {r.id for r in load_rules()} | {b.id for b in kb.bad} | {m.id for m in kb.module}


def rule_ids_in_checks(root: Path, ids: set[str]) -> list[str]:
    found = []
    for f in sorted(root.glob("*_checks.py")):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Constant) and node.value in ids:
                found.append(f"{f.name}:{node.lineno}: {node.value!r}")
    return found


def test_no_check_module_names_a_rule():
    assert sorted((SRC / "diagnose").glob("*_checks.py"))
    assert rule_ids_in_checks(SRC / "diagnose", _rule_ids()) == []


def test_the_check_sees_a_rule_id(tmp_path):
    (tmp_path / "script_checks.py").write_text('def f(ctx):\n    return check_rule(\n        "xpu-no-device-id", {})\n')
    (tmp_path / "helpers.py").write_text('X = "xpu-no-device-id"\n')  # not a check module
    assert rule_ids_in_checks(tmp_path, _rule_ids()) == ["script_checks.py:3: 'xpu-no-device-id'"]


# --- where a check words a generic finding its own way ----------------------------------------
UNKNOWN_MODULE = """#!/bin/bash
#PBS -l select=2
#PBS -l walltime=00:30:00
#PBS -l filesystems=flare:home
export CCL_PROCESS_LAUNCHER=pmix
module load mystery-stack
mpiexec -n 24 -ppn 12 python train.py
"""
DEBUG_8_NODES = """#!/bin/bash
#PBS -l select=8
#PBS -l walltime=00:30:00
#PBS -l filesystems=home
#PBS -q debug
mpiexec -n 8 python train.py
"""


def _launcher(tmp_path: Path, text: str, **given) -> list:
    path = tmp_path / "job.pbs"
    path.write_text(text)
    return [f for f in diagnose(DoctorRequest(launchers=(path,), live=False, **given)).findings if f.rule != NO_BIND]


def test_an_export_a_module_of_unknown_effect_may_reset_is_a_warning_in_the_checks_words(tmp_path):
    (f,) = _launcher(tmp_path, UNKNOWN_MODULE, platform="aurora")
    assert (f.rule, f.severity, f.line) == ("launcher-no-per-rank-export", "warning", 7)
    assert "does not know whether it resets CCL_PROCESS_LAUNCHER" in f.message
    assert f.message.endswith("if this one does, the ranks run with the module's values instead")
    assert "--module-show" in f.fix
    on_cuda = _launcher(tmp_path, UNKNOWN_MODULE, platform="polaris")  # the rule is about XPU
    assert [f.rule for f in on_cuda] == ["launcher-ranks-per-node-mismatch"]  # 12 ranks, 4 GPUs


def test_a_queue_limit_on_an_assumed_platform_is_a_warning_naming_the_candidates(tmp_path):
    found = {f.rule: f for f in _launcher(tmp_path, DEBUG_8_NODES)}
    q = found["launcher-queue-limits"]
    assert (q.severity, q.line) == ("warning", 5)
    assert "(applies on aurora, aurora-composite, polaris; pass --platform to be sure)" in q.message
    assert _launcher(tmp_path, DEBUG_8_NODES, platform="aurora")[0].severity == "error"


def test_fewer_ranks_than_devices_on_one_node_is_an_info_line(tmp_path):
    one_node = DEBUG_8_NODES.replace("select=8", "select=1").replace("-n 8", "-n 1 -ppn 1")
    (f,) = _launcher(tmp_path, one_node, platform="aurora")
    assert (f.rule, f.severity, f.line) == ("launcher-ranks-per-node-mismatch", "info", 6)
    assert "a single-node job using 1 of them: fine for a deliberate small" in f.message
    (f,) = _launcher(tmp_path, one_node.replace("select=1", "select=2"), platform="aurora", nodes=2)
    assert (f.rule, f.severity) == ("launcher-ranks-per-node-mismatch", "error")
