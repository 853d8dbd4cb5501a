"""Issue 37 item 2: one registry entry per collective library (specs/libraries.py +
data/libraries/*.toml). Every room reads the libraries' prefixes and torch backend names from it;
a platform names its library and torch's backend name follows from the entry (on ROCm: rccl's
is "nccl"); a platform file's older `backend = "..."` still loads."""

import ast
from pathlib import Path
from typing import get_args

import pytest

import prism_strategy
from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.libraries import (
    LibraryName,
    backend_names,
    collective_prefixes,
    libraries,
    library,
    library_of_backend,
    library_of_device,
    read_by,
)
from prism_strategy.specs.presets import load_platform

SRC = Path(prism_strategy.__file__).parent
REGISTRY = "specs/libraries.py"
ALLOWED = {
    "estimate/comm_oneccl.py": "oneCCL's cost model builds CCL_<OP>_SCALEOUT names (owned by the model, not a prefix list)",
}
"""Files that may spell a prefix, and why."""


def _prefixes() -> set[str]:
    return {
        p
        for lib in libraries()
        for p in (*lib.env_prefixes, *lib.transport_prefixes, *lib.torch_prefixes, *lib.runtime_prefixes)
    }


def _names() -> set[str]:
    return (
        set(backend_names()) | {lib.name for lib in libraries()} | {a for lib in libraries() for a in lib.torch_aliases}
    )


def test_every_registered_name_has_its_data_file_and_nothing_else_is_there():
    files = {p.stem for p in (SRC / "data" / "libraries").glob("*.toml")}
    assert files == set(get_args(LibraryName)) == {lib.name for lib in libraries()}


def test_each_library_states_where_its_facts_come_from():
    for lib in libraries():
        assert lib.sources.get("torch_backend"), lib.name
        stated = [k for k in ("env_prefixes", "transport_prefixes", "visible_devices", "net_plugin") if getattr(lib, k)]
        assert all(k in lib.sources for k in stated), (lib.name, stated)


def test_rocm_runs_rccl_under_torchs_nccl_backend():
    rccl = library("rccl")
    assert (rccl.torch_backend, rccl.device) == ("nccl", "cuda")
    assert library_of_backend("nccl").name == "nccl" and library_of_device("cuda").name == "nccl"
    assert library_of_backend("ccl").name == "oneccl" and library_of_device("xpu").torch_backend == "xccl"
    assert load_platform("frontier").backend == "nccl" and load_platform("frontier").collective_library == "rccl"


def test_a_platform_file_that_says_backend_still_loads_as_that_backends_library():
    assert (load_platform("aurora").collective_library, load_platform("aurora").backend) == ("oneccl", "xccl")
    assert (load_platform("dgx-h100").collective_library, load_platform("polaris").collective_library) == (
        "nccl",
        "nccl",
    )
    assert load_platform("cpu").collective_library == "gloo"


def _platform_file(tmp_path: Path, text: str) -> str:
    path = tmp_path / "p.toml"
    path.write_text('name = "p"\n' + text + "\n")
    return str(path)


def test_backend_beside_its_library_is_accepted(tmp_path):
    p = load_platform(_platform_file(tmp_path, 'base = "frontier"\nbackend = "nccl"'))
    assert (p.collective_library, p.backend) == ("rccl", "nccl")


def test_a_backend_that_contradicts_the_library_is_one_clear_error(tmp_path):
    with pytest.raises(SpecError, match=r"backend 'xccl' is not torch's name for collective_library 'rccl' \('nccl'\)"):
        load_platform(_platform_file(tmp_path, 'base = "frontier"\nbackend = "xccl"'))


def test_the_library_name_given_as_torchs_backend_says_which_names_torch_has(tmp_path):
    with pytest.raises(SpecError, match=r"no collective library for torch backend 'rccl'; one of nccl, xccl, gloo"):
        load_platform(_platform_file(tmp_path, 'backend = "rccl"'))


def test_the_readers_of_the_environment_take_the_registrys_prefixes():
    from prism_strategy.bench.launch import fingerprint, rank_env
    from prism_strategy.diagnose import live_checks
    from prism_strategy.inputs import scenario
    from prism_strategy.runtime import forensics_probes

    collective = set(collective_prefixes())
    assert {"CCL_", "NCCL_", "FI_"} <= collective
    for mod in (fingerprint, live_checks, forensics_probes):
        assert collective <= set(mod.ENV_PREFIXES), mod.__name__
    assert set(scenario.COLLECTIVE_PREFIXES) == collective
    assert read_by("nccl") == ("NCCL_",) and read_by("gloo") == () and read_by("no-such") is None
    env = rank_env.RankEnv(profile="x", source="x", set_vars=(("NCCL_A", "1"), ("CCL_B", "2")), unset=())
    assert env.inert("nccl") == ["CCL_B"] and env.inert("xccl") == ["NCCL_A"]


def test_only_the_registry_spells_a_prefix_or_compares_a_backend_name():
    """grep, as the issue's done-when says it: a prefix literal ("NCCL_", "FI_", ...) or a
    comparison with a backend / library name appears in specs/libraries.py (plus data files) only."""
    prefixes, names, found = _prefixes(), _names(), []
    for f in sorted(SRC.rglob("*.py")):
        rel = f.relative_to(SRC).as_posix()
        if rel == REGISTRY or rel in ALLOWED:
            continue
        for n in ast.walk(ast.parse(f.read_text())):
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in prefixes:
                found.append(f"{rel}:{n.lineno} {n.value!r}")
            if isinstance(n, ast.Compare):
                consts = [c.value for c in (n.left, *n.comparators) if isinstance(c, ast.Constant)]
                found += [f"{rel}:{n.lineno} == {c!r}" for c in consts if c in names]
    assert not found, found
