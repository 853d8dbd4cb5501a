"""The house rules the import contract cannot state (pyproject.toml [tool.importlinter] states the
rest): no code outside engines/ and strategies.py branches on an engine or strategy name; what an
engine can do is a named capability on it (engines/base.py)."""

from __future__ import annotations

import ast
from pathlib import Path

from prism_strategy.engines import ENGINE_NAMES
from prism_strategy.strategies import STRATEGY_NAMES

SRC = Path(__file__).resolve().parents[3] / "src" / "prism_strategy"
OWNERS = ("engines/", "strategies.py")
# Names that are someone else's vocabulary, not ours: compared as text read from outside.
FOREIGN = {
    ("readers/prism_perf.py", "ds == 'ddp'"): "PRISM's perf.jsonl dist_strategy value",
    ("diagnose/launcher_checks.py", "e.name == 'deepspeed'"): "the `deepspeed` launcher program in a job script",
    ("diagnose/script_checks.py", "'fsdp2' in s.engines()"): "an engine the user's script was seen to call",
    ("emit/frameworks/__init__.py", "fmt == 'deepspeed'"): "the --format name of DeepSpeed's config file",
}


def _name_tests(tree: ast.AST) -> list[tuple[int, str]]:
    names = set(ENGINE_NAMES) | set(STRATEGY_NAMES)
    hits = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        for side in (node.left, *node.comparators):
            elts = side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [side]
            if any(isinstance(e, ast.Constant) and e.value in names for e in elts):
                hits.append((node.lineno, ast.unparse(node)))
                break
    return hits


def name_tests_outside_owners(root: Path) -> list[str]:
    found = []
    for f in sorted(root.rglob("*.py")):
        rel = f.relative_to(root).as_posix()
        if rel.startswith(OWNERS):
            continue
        for line, text in _name_tests(ast.parse(f.read_text())):
            if (rel, text) not in FOREIGN:
                found.append(f"{rel}:{line}: {text}")
    return found


def test_no_code_outside_engines_and_registry_branches_on_a_name():
    assert name_tests_outside_owners(SRC) == []


def test_the_check_sees_a_name_test(tmp_path):
    (tmp_path / "planner.py").write_text('def f(s):\n    return s.strategy == "zero3" or s.engine in ("ddp",)\n')
    (tmp_path / "engines").mkdir()
    (tmp_path / "engines" / "ddp.py").write_text('x = 1 if "ddp" == "ddp" else 0\n')
    assert sorted(name_tests_outside_owners(tmp_path)) == [
        "planner.py:2: s.engine in ('ddp',)",
        "planner.py:2: s.strategy == 'zero3'",
    ]


BACKEND_OWNER = "estimate/backends/"
LIVE_BACKEND = {
    ("bench/collectives/commbench_worker.py", "ctx.backend == 'nccl'"): "the live process group's backend (torch)",
    ("bench/collectives/commbench_worker.py", "ctx.backend == 'xccl'"): "the live process group's backend (torch)",
}
"""Comparisons of a running process group's backend (what torch.distributed opened), not a
platform's collective model: the registry prices platforms, it does not open process groups."""


def _backend_tests(tree: ast.AST) -> list[tuple[int, str]]:
    """Every comparison with a `.backend` attribute on one side (`p.backend == "xccl"`, `x.backend in
    (...)`): code choosing a collective model by name."""
    hits = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and any(
            isinstance(side, ast.Attribute) and side.attr == "backend" for side in (node.left, *node.comparators)
        ):
            hits.append((node.lineno, ast.unparse(node)))
    return hits


def backend_tests_outside_registry(root: Path) -> list[str]:
    found = []
    for f in sorted(root.rglob("*.py")):
        rel = f.relative_to(root).as_posix()
        if rel.startswith(BACKEND_OWNER):
            continue
        found += [
            f"{rel}:{n}: {t}" for n, t in _backend_tests(ast.parse(f.read_text())) if (rel, t) not in LIVE_BACKEND
        ]
    return found


def test_no_backend_comparison_outside_the_backend_registry():
    assert backend_tests_outside_registry(SRC) == []


def test_the_backend_check_sees_a_comparison(tmp_path):
    (tmp_path / "comm.py").write_text('def f(p):\n    return p.backend == "xccl" or p.backend in ("nccl",)\n')
    (tmp_path / "estimate" / "backends").mkdir(parents=True)
    (tmp_path / "estimate" / "backends" / "nccl.py").write_text('x = p.backend == "nccl"\n')
    assert sorted(backend_tests_outside_registry(tmp_path)) == [
        "comm.py:2: p.backend == 'xccl'",
        "comm.py:2: p.backend in ('nccl',)",
    ]


def test_every_platform_library_has_a_registered_model():
    from typing import get_args, get_type_hints

    from prism_strategy.estimate.backends import BACKENDS
    from prism_strategy.specs.cluster import PlatformSpec

    names = set(get_args(get_type_hints(PlatformSpec)["collective_library"]))
    assert names and names == set(BACKENDS)


ENTRY = "prism_strategy.estimate.entry"


def _returned_types() -> set[str]:
    """The classes the entry's results are made of (a field's type, or an item of one): planning may
    import these by name from where they are defined, as planning/option.py holds them."""
    import inspect
    from typing import get_args, get_type_hints

    from prism_strategy.estimate import entry

    seen, todo = set(), [entry.OptionEstimate, entry.MemoryAt, entry.BatchAt]
    while todo:
        cls = todo.pop()
        if cls.__name__ in seen or not cls.__module__.startswith("prism_strategy.estimate"):
            continue
        seen.add(cls.__name__)
        hints = get_type_hints(cls) if hasattr(cls, "__dataclass_fields__") else {}
        stack = list(hints.values())
        while stack:
            h = stack.pop()
            stack += get_args(h)
            if inspect.isclass(h):
                todo.append(h)
    return seen


def estimate_imports_beside_the_entry(planning: Path, allowed: set[str]) -> list[str]:
    """Every import in planning/ (top level, TYPE_CHECKING or inside a function) of an estimate/
    module other than the entry, unless it imports only `allowed` names (the entry's result types)."""
    found = []
    for f in sorted(planning.rglob("*.py")):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Import):
                mods = [a.name for a in node.names if a.name.startswith("prism_strategy.estimate")]
                found += [f"{f.name}:{node.lineno}: import {m}" for m in mods]
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("prism_strategy.estimate"):
                names = {a.name for a in node.names}
                if node.module != ENTRY and not names <= allowed:
                    found.append(f"{f.name}:{node.lineno}: from {node.module} import {', '.join(sorted(names))}")
    return found


def test_planning_reads_the_estimates_through_the_one_entry():
    assert {"MemoryEstimate", "CommEstimate", "PredictionRange", "LateRanks", "BatchChoice"} <= _returned_types()
    assert estimate_imports_beside_the_entry(SRC / "planning", _returned_types()) == []


def test_the_entry_check_sees_an_import_beside_it(tmp_path):
    (tmp_path / "planner.py").write_text(
        "from prism_strategy.estimate.entry import memory_at\n"
        "from prism_strategy.estimate.memory import MemoryEstimate, moments\n"
        "from prism_strategy.estimate.ranges import PredictionRange\n"
        "def f():\n    import prism_strategy.estimate.comm\n"
    )
    assert estimate_imports_beside_the_entry(tmp_path, {"MemoryEstimate", "PredictionRange"}) == [
        "planner.py:2: from prism_strategy.estimate.memory import MemoryEstimate, moments",
        "planner.py:5: import prism_strategy.estimate.comm",
    ]


MAX_PARAMETERS = 12


def _parameter_count(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    a = fn.args
    names = [*a.posonlyargs, *a.args, *a.kwonlyargs, *filter(None, (a.vararg, a.kwarg))]
    return len(names) - (1 if names and names[0].arg in ("self", "cls") and names[0] in a.args[:1] else 0)


def functions_over(root: Path, limit: int) -> list[str]:
    """Every function and method outside cli/ (typer commands take their options as parameters)
    with more than `limit` parameters (self / cls not counted; *args and **kwargs count one each)."""
    found = []
    for f in sorted(root.rglob("*.py")):
        rel = f.relative_to(root).as_posix()
        if rel.startswith("cli/"):
            continue
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _parameter_count(node) > limit:
                found.append(f"{rel}:{node.lineno}: {node.name} takes {_parameter_count(node)}")
    return found


def test_no_function_outside_cli_takes_more_than_twelve_parameters():
    assert functions_over(SRC, MAX_PARAMETERS) == []


def test_the_parameter_check_counts_every_kind(tmp_path):
    (tmp_path / "cli").mkdir()
    (tmp_path / "cli" / "plan_cmds.py").write_text("def plan(a, b, c, d):\n    pass\n")
    (tmp_path / "m.py").write_text(
        "def f(a, /, b, *c, d, **e):\n    pass\n"
        "class K:\n    def g(self, a, b, c):\n        pass\n"
        "    def h(self, a, b, c, d):\n        pass\n"
    )
    assert functions_over(tmp_path, 3) == ["m.py:1: f takes 5", "m.py:6: h takes 4"]
