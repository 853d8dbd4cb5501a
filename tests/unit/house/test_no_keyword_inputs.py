"""Scenario in, Plan out (issue 37): no function outside cli/ and flags.py (the convenience
`plan(model, **flags)`) takes a keyword list (**kwargs) of run inputs: the run's inputs travel as
the policies (specs/policies.py) and the Scenario built from them (inputs/scenario.py). The
**kwargs left below are not run inputs; each says what it takes."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[3] / "src" / "prism_strategy"
EDGES = ("cli/", "flags.py")
NOT_RUN_INPUTS = {
    ("runtime/sac.py", "policy"): "torch's checkpoint policy callback: the op's own keyword arguments",
    ("runtime/forensics.py", "timed"): "a wrapper passing the wrapped call's arguments through",
    ("runtime/loss.py", "forward"): "an HF model's forward keywords",
    ("bench/launch/census_record.py", "call"): "a wrapper passing a collective's arguments through",
    ("specs/model.py", "replace"): "a TransformerSpec's own fields",
    ("specs/cluster.py", "with_values"): "a PlatformSpec's own fields",
    ("specs/training.py", "from_precision"): "TrainingSpec's fields, the builder's one use (inputs/scenario.py)",
    ("readers/__init__.py", "read_file"): "a log reader's options",
    ("readers/__init__.py", "read_run"): "a log reader's options",
    ("wrap_config.py", "from_policies"): "the engine's own options (WrapConfig's fields)",
    ("wrap_config.py", "with_changes"): "WrapConfig's fields",
    ("inputs/stored.py", "bench_row"): "the run's stored facts (strategy, steps, ...), not the scenario",
    ("bench/launch/run.py", "bench_config"): "the run's stored facts",
    ("bench/launch/worker.py", "rank_result"): "what a rank measured",
    ("diagnose/findings.py", "context_facts"): "the facts a doctor check knows",
    ("diagnose/shell_eval.py", "emit"): "a shell event's fields",
    ("diagnose/doctor.py", "doctor_request"): "the facts doctor is told about the job (platform, nodes...)",
    ("emit/from_plan.py", "emit_request"): "EmitRequest's launcher fields (account, queue, ...)",
    ("runtime/optim.py", "optimizer_factory"): "the torch optimizer's own keywords (lr, betas...)",
    ("runtime/wrap.py", "wrap"): "WrapConfig's fields, as DESIGN's public wrap() takes them",
    ("traced/estimate.py", "traced_max_micro_batch"): "search_max_micro_batch's search options, passed through",
}
LEFT: set[tuple[str, str]] = set()
"""Functions that still take their flag values as keywords (issue 37 item 1); empty since bench's
run commands turn theirs into the Scenario and RunLength at the edge (cli/bench_inputs.py). The
list only shrinks."""


def keyword_takers(root: Path) -> set[tuple[str, str]]:
    """(file, function) of every function outside the edges with a **kwargs parameter."""
    found = set()
    for f in sorted(root.rglob("*.py")):
        rel = f.relative_to(root).as_posix()
        if rel.startswith(EDGES):
            continue
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.args.kwarg is not None:
                found.add((rel, node.name))
    return found


def test_no_function_outside_the_edges_takes_a_keyword_list_of_run_inputs():
    assert keyword_takers(SRC) - set(NOT_RUN_INPUTS) - LEFT == set()


def test_the_lists_name_only_functions_that_exist():
    assert set(NOT_RUN_INPUTS) | LEFT <= keyword_takers(SRC)


def test_the_check_sees_a_keyword_list(tmp_path):
    (tmp_path / "planning").mkdir()
    (tmp_path / "planning" / "planner.py").write_text("def plan(model, **options):\n    pass\n")
    (tmp_path / "cli").mkdir()
    (tmp_path / "cli" / "plan_cmds.py").write_text("def plan(**flags):\n    pass\n")
    (tmp_path / "flags.py").write_text("def plan(model, **flags):\n    pass\n")
    assert keyword_takers(tmp_path) == {("planning/planner.py", "plan")}
