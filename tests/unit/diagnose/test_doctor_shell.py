"""The doctor reads shell as bash does: heredocs are data, `bash -c BODY` is the per-rank script
(its lines mapped back to the file), `ssh host "..."` is not a rank command, branches the script
decides are taken or skipped and open ones say so; module knowledge sets the severity."""

import sys
from pathlib import Path

import pytest

from prism_strategy.diagnose import shell_syntax
from prism_strategy.diagnose.doctor import DoctorRequest, diagnose
from prism_strategy.diagnose.launcher_checks import read_launcher
from prism_strategy.diagnose.modules import parse_module_show
from prism_strategy.specs import SpecError

NO_BIND = "launcher-no-cpu-bind-xpu"
"""mpiexec without --cpu-bind on Aurora (a warning these launchers, written for another rule, all get)."""

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "doctor"
PRELOAD = "export LD_PRELOAD=/usr/lib64/libpil4dfs.so"


def _write(tmp_path: Path, text: str, name: str = "job.sh") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _rules(path: Path, **kw) -> dict[str, str]:
    return {f.rule: f.severity for f in diagnose(DoctorRequest(launchers=(path,), **kw)).findings}


def test_a_heredoc_body_is_data_and_does_not_hide_what_follows(tmp_path):
    body = "\n".join(["python3 - <<EOF", "import os", "def f():", "    print()", "    {", "EOF"])
    path = _write(tmp_path, f"{body}\n{PRELOAD}\nmpiexec -n 12 -ppn 12 python3 train.py\n")
    lf = read_launcher(path)
    assert [(e.kind, e.name, e.line) for e in lf.outer if e.kind != "launch" or e.name == "mpiexec"] == [
        ("export", "LD_PRELOAD", 7),
        ("launch", "mpiexec", 8),
    ]
    assert _rules(path, strategy="fsdp_full_shard") == {"daos-preload-fsdp": "error"}


def test_a_double_quoted_rank_script_keeps_its_file_lines(tmp_path):
    path = _write(
        tmp_path,
        'N=12\nmpiexec -n 12 -ppn "$N" \\\n  bash -lc "\n  module load frameworks\n'
        '  export CCL_WORKER_COUNT=\\"$N\\"\n  exec python3 train.py"\n',
    )
    lf = read_launcher(path)
    assert lf.ranks_per_node() == 12
    assert [(e.kind, e.line) for e in lf.per_rank] == [("module", 4), ("export", 5), ("launch", 6)]
    assert lf.per_rank[1].value == "12"  # inside "...", the job script's shell expands $N before the rank runs


def test_ssh_strings_are_commands_not_rank_scripts(tmp_path):
    path = _write(
        tmp_path,
        'export CCL_PROCESS_LAUNCHER=none\nssh node1 "module load frameworks; hostname"\n'
        "mpiexec -n 12 -ppn 12 python3 train.py\n",
    )
    lf = read_launcher(path)
    assert not any(e.kind == "module" for e in lf.timeline) and lf.per_rank == []
    assert _rules(path) == {}


def test_a_case_the_script_decides_skips_the_preload(tmp_path):
    text = (
        'STRATEGY=fsdp_full_shard\ncase "$STRATEGY" in\n  fsdp*|zero3) export NO_PIL4DFS=1 ;;\n  *) ;;\nesac\n'
        f'if [ -z "$NO_PIL4DFS" ]; then\n  {PRELOAD}\nfi\nmpiexec -n 12 -ppn 12 python3 train.py\n'
    )
    assert _rules(_write(tmp_path, text), strategy="fsdp_full_shard") == {}
    opened = text.replace("STRATEGY=fsdp_full_shard\n", "")  # STRATEGY left to qsub -v: both arms open
    findings = diagnose(DoctorRequest(launchers=(_write(tmp_path, opened),), strategy="fsdp_full_shard")).findings
    [f] = findings
    assert f.rule == "daos-preload-fsdp" and "NO_PIL4DFS" in f.message and f.line == 6


def test_an_if_on_a_value_the_script_fixes_is_taken_or_skipped(tmp_path):
    for value, expect in (("0", {}), ("1", {"daos-preload-fsdp": "error"})):
        text = (
            f'USE_DAOS={value}\nif [ "$USE_DAOS" = 1 ]; then\n  {PRELOAD}\nelse\n  unset LD_PRELOAD\nfi\n'
            "mpiexec -n 12 -ppn 12 python3 train.py\n"
        )
        assert _rules(_write(tmp_path, text), strategy="fsdp_full_shard") == expect, value


def test_a_rank_script_written_by_a_heredoc_is_followed(tmp_path):
    text = (
        "cat > rank.sh <<'EOF'\nmodule load frameworks\nexec python3 train.py\nEOF\n"
        "export CCL_PROCESS_LAUNCHER=none\nmpiexec -n 24 -ppn 12 bash rank.sh\n"
    )
    lf = read_launcher(_write(tmp_path, text))
    assert [(e.kind, e.file, e.line) for e in lf.per_rank] == [
        ("module", str(tmp_path / "job.sh"), 2),
        ("launch", str(tmp_path / "job.sh"), 3),
    ]
    assert _rules(tmp_path / "job.sh") == {"launcher-no-per-rank-export": "error"}


def test_module_show_output_makes_the_reset_exact():
    lmod = parse_module_show((FIXTURES / "module_show" / "frameworks-lmod.txt").read_text(), "lmod.txt")
    tcl = parse_module_show((FIXTURES / "module_show" / "frameworks-tcl.txt").read_text(), "tcl.txt")
    assert [(m.name, m.complete) for m in lmod + tcl] == [("frameworks/2025.3.1", True)] * 2
    assert lmod[0].sets == {
        "CCL_PROCESS_LAUNCHER": "pmix",
        "CCL_WORKER_COUNT": "4",
        "CCL_ATL_TRANSPORT": "mpi",
        "FI_PROVIDER": "cxi",
    }
    assert tcl[0].sets == {"CCL_PROCESS_LAUNCHER": "pmix", "CCL_KVS_MODE": "mpi"}
    with pytest.raises(SpecError, match="module show"):
        parse_module_show("nothing here\n", "x.txt")


@pytest.mark.parametrize(
    ("show", "expect"),
    [
        ((), {"launcher-export-before-module-load": "warning"}),  # unknown to the data file
        # module show: it sets CCL_WORKER_COUNT (to 4, which the known-bad check then catches on the ranks)
        (("frameworks-lmod.txt",), {"launcher-export-before-module-load": "error", "env-ccl-worker-count": "error"}),
        (("frameworks-tcl.txt",), {}),  # module show: it does not
    ],
)
def test_severity_follows_what_is_known_about_the_module(show, expect):
    path = FIXTURES / "launchers" / "warn_export_unknown_to_module.pbs"
    assert _rules(path, module_show=tuple(FIXTURES / "module_show" / s for s in show)) == expect


def test_a_missing_parser_is_a_clean_spec_error(tmp_path, monkeypatch):
    shell_syntax._parser.cache_clear()
    monkeypatch.setitem(sys.modules, "tree_sitter_bash", None)
    try:
        with pytest.raises(SpecError, match=r"prism-strategy\[doctor\]"):
            read_launcher(_write(tmp_path, "mpiexec -n 1 python3 train.py\n"))
    finally:
        shell_syntax._parser.cache_clear()


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("launch_aurora.py", (FIXTURES / "refused" / "launch_aurora.py").read_text()),
        ("launch_aurora", "#!/usr/bin/env python3\nprint('module load frameworks')\n"),
        ("submit", "import subprocess\nsubprocess.run(['qsub', 'job.pbs'])\n"),
    ],
)
def test_a_python_launcher_is_refused_with_the_fix(tmp_path, name, text):
    with pytest.raises(SpecError, match="Python program.*pass the job script it writes"):
        read_launcher(_write(tmp_path, text, name))


def test_the_refusal_points_at_the_job_script_template(tmp_path):
    with pytest.raises(SpecError, match="job-script template at line 7"):
        read_launcher(FIXTURES / "refused" / "launch_aurora.py")


def test_shell_that_happens_to_parse_as_python_is_read_as_shell(tmp_path):
    assert read_launcher(_write(tmp_path, "true\n", "job")).launch is None


def test_values_the_doctor_cannot_know_are_still_set_and_env_prefixes_reach_the_ranks(tmp_path):
    path = _write(
        tmp_path,
        "CONF=$(cat conf)\nexport TORCH_XPU_ALLOC_CONF=$CONF\n"
        "mpiexec -n 12 -ppn 12 env LD_PRELOAD=/usr/lib64/libpil4dfs.so python3 train.py\n",
    )
    found = {
        f.rule: f.line
        for f in diagnose(DoctorRequest(launchers=(path,), platform="aurora", strategy="fsdp_full_shard")).findings
    }
    assert found == {"env-torch-xpu-alloc-conf": 2, "daos-preload-fsdp": 3, "launcher-no-cpu-bind-xpu": 3}


def test_a_command_chain_runs_and_only_a_fallback_is_an_open_branch(tmp_path):
    path = _write(
        tmp_path, f"cd /work && {PRELOAD}\ntrue || export CCL_WORKER_COUNT=8\nmpiexec -n 12 -ppn 12 python3 train.py\n"
    )
    found = {
        f.rule: f
        for f in diagnose(DoctorRequest(launchers=(path,), platform="aurora", strategy="fsdp_full_shard")).findings
    }
    assert found["daos-preload-fsdp"].severity == "error" and "branch" not in found["daos-preload-fsdp"].message
    assert found["env-ccl-worker-count"].severity == "warning" and "not true" in found["env-ccl-worker-count"].message


def test_arithmetic_on_known_values_gives_the_node_count(tmp_path):
    lf = read_launcher(_write(tmp_path, "NNODES=4\nRPN=12\nmpiexec -n $((NNODES * RPN)) -ppn $RPN python3 train.py\n"))
    assert (lf.launch.args[:4], lf.nodes()) == (("-n", "48", "-ppn", "12"), 4)
    unknown = read_launcher(_write(tmp_path, "mpiexec -n $((N / 0)) -ppn 12 python3 train.py\n", "b.sh"))
    assert unknown.nodes() is None


def test_module_show_live_asks_the_login_shells_module_command(tmp_path, monkeypatch):
    """`module` as Lmod defines it, a login-shell function (here from ~/.bash_profile)."""
    home = tmp_path / "home"
    home.mkdir()
    (home / ".bash_profile").write_text(
        'module() { case "$2" in frameworks|frameworks/2025.3.1) ;; *) echo "Lmod has detected the following error" >&2;'
        ' return 1;; esac\n  echo "   /opt/x/modulefiles/frameworks/2025.3.1.lua:" >&2;'
        ' echo \'setenv("CCL_WORKER_COUNT","1")\' >&2; }\n'
    )
    monkeypatch.setenv("HOME", str(home))
    path = FIXTURES / "launchers" / "warn_export_unknown_to_module.pbs"
    assert _rules(path, module_show=(Path("live"),)) == {"launcher-export-before-module-load": "error"}
    other = _write(tmp_path, "module load frameworks/2024.1\nexport CCL_WORKER_COUNT=1\n")
    with pytest.raises(SpecError, match="module show frameworks/2024.1` gave no module"):
        diagnose(DoctorRequest(launchers=(other,), module_show=(Path("live"),)))


def test_a_test_on_run_time_rank_variables_keeps_the_severity(tmp_path):
    path = _write(
        tmp_path, f'if [ "$PALS_LOCAL_RANKID" -eq 0 ]; then\n  {PRELOAD}\nfi\nmpiexec -n 12 -ppn 12 python3 train.py\n'
    )
    [f] = diagnose(DoctorRequest(launchers=(path,), strategy="fsdp_full_shard")).findings
    assert f.severity == "error" and "set at run time" in f.message


def test_parameter_expansions_the_doctor_knows_and_those_it_does_not(tmp_path):
    text = (
        "H=node1.x.y\nA=${H%%.*}\nB=${N:-12}\nC=${H:-z}\nD=${#H}\nE=${PALS_RANKID:-${PMI_RANK:?no rank}}\n"
        "F=$(( -7 / 2 ))\nG=$(( -7 % 2 ))\nexport A B C D E F G\n"
    )
    env = read_launcher(_write(tmp_path, text)).rank_env
    assert {k: env[k][0].value for k in "ABCDEFG"} == {
        "A": None,
        "B": "12",
        "C": "node1.x.y",
        "D": None,
        "E": None,
        "F": "-3",
        "G": "-1",
    }


def test_a_purge_after_the_exports_is_an_uncertain_reset(tmp_path):
    path = _write(
        tmp_path,
        "module load frameworks\nexport CCL_WORKER_COUNT=1\nmodule purge\nmpiexec -n 12 -ppn 12 python3 train.py\n",
    )
    [f] = [f for f in diagnose(DoctorRequest(launchers=(path,), platform="aurora")).findings if f.rule != NO_BIND]
    assert (f.rule, f.severity) == ("launcher-no-per-rank-export", "warning") and "module purge" in f.message
