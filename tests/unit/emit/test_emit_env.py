"""Env profiles (data files) and the shell text that applies them."""

import subprocess

import pytest

from prism_strategy.emit.env import check_text, load_env_profile, profile_lines, profile_names, render_env_sh, sh_quote
from prism_strategy.specs import SpecError
from prism_strategy.specs.presets import load_platform, platform_names

HOSTILE = [
    "$(touch pwned)",
    "`touch pwned`",
    "'; touch pwned; '",
    '"; touch pwned; "',
    "a b",
    "*",
    "${HOME}",
    "\\",
    "!x",
    "~",
    "#c",
    "a;b|c&d>e<f",
    "{a,b}",
    "",
    "$",
    "'",
    '"',
]

# PRISM's validated set, with ALCF's oneCCL-page completion-queue size (131072 is Polaris's NCCL
# value; PRISM had no measured reason to keep it).
DOMAIN_VALIDATED = {
    "CCL_WORKER_COUNT": "1",
    "CCL_PROCESS_LAUNCHER": "none",
    "CCL_ATL_TRANSPORT": "ofi",
    "CCL_OP_SYNC": "1",
    "CCL_ALLREDUCE": "ring",
    "FI_PROVIDER": "cxi",
    "FI_CXI_DEFAULT_CQ_SIZE": "1048576",
    "FI_CXI_OFLOW_BUF_SIZE": "8388608",
    "FI_CXI_RX_MATCH_MODE": "hybrid",
}


def test_required_profiles_exist_and_every_platform_names_one():
    names = set(profile_names())
    assert {"aurora-prism-2026.11", "aurora-alcf-minimal", "polaris-nccl", "cpu-gloo", "cuda-nccl"} <= names
    assert "_known_bad" not in names
    for p in platform_names():
        assert load_platform(p).env_profile in names


def test_every_variable_says_why_and_where_from():
    for name in profile_names():
        prof = load_env_profile(name)
        assert prof.version and prof.description and prof.source
        for v in prof.var:
            assert v.why and v.source, (name, v.name)


def test_prism_profile_is_the_validated_set_and_never_sets_the_bad_ones():
    prof = load_env_profile("aurora-prism-2026.11")
    values = prof.values_for("aurora")
    assert {k: values[k] for k in DOMAIN_VALIDATED} == DOMAIN_VALIDATED
    assert "CCL_REDUCE_SCATTER" not in values and "TORCH_XPU_ALLOC_CONF" not in values
    assert set(prof.unset) == {"CCL_REDUCE_SCATTER", "TORCH_XPU_ALLOC_CONF"}
    assert values["ZE_FLAT_DEVICE_HIERARCHY"] == "FLAT"
    assert prof.values_for("aurora-composite")["ZE_FLAT_DEVICE_HIERARCHY"] == "COMPOSITE"


def test_alcf_minimal_profile_uses_pmix_and_mpi():
    values = load_env_profile("aurora-alcf-minimal").values_for("aurora")
    assert values["CCL_PROCESS_LAUNCHER"] == "pmix"
    assert values["CCL_ATL_TRANSPORT"] == "mpi" and values["CCL_KVS_MODE"] == "mpi"
    assert values["FI_MR_CACHE_MONITOR"] == "userfaultfd"  # ALCF's minimal set
    assert load_env_profile("aurora-alcf-minimal").unset == ()


def test_unknown_profile_lists_the_names(tmp_path):
    with pytest.raises(SpecError, match="aurora-prism-2026.11"):
        load_env_profile("nope")
    bad = tmp_path / "bad.toml"
    bad.write_text(
        'name = "x"\nversion = "1"\ndescription = "d"\nsource = "s"\n[[var]]\nname = "A B"\n'
        'value = "1"\nwhy = "w"\nsource = "s"\n'
    )
    with pytest.raises(SpecError, match="not a valid variable name"):
        load_env_profile(str(bad))


@pytest.mark.parametrize("text", HOSTILE)
def test_sh_quote_keeps_any_text_literal(text, tmp_path):
    out = subprocess.run(
        ["bash", "-c", f"printf '%s' {sh_quote(text)}"], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    assert out.stdout == text
    assert not list(tmp_path.iterdir())


def test_control_characters_are_refused():
    for text in ("a\nb", "a\rb", "a\x00b"):
        with pytest.raises(SpecError, match="control character"):
            check_text("--job-name", text)
        with pytest.raises(SpecError):
            sh_quote(text)


def test_env_sh_loads_modules_before_exports():
    prof = load_env_profile("aurora-prism-2026.11")
    lines = profile_lines(prof, "aurora")
    last_module = max(i for i, line in enumerate(lines) if line.startswith("module load"))
    exports = [i for i, line in enumerate(lines) if line.startswith("export ")]
    assert len(exports) == len(prof.var) and min(exports) > last_module
    text = render_env_sh(prof, "aurora", "# header")
    assert "unset CCL_REDUCE_SCATTER TORCH_XPU_ALLOC_CONF" in text
    assert subprocess.run(["bash", "-n"], input=text, text=True).returncode == 0
