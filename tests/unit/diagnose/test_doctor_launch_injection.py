"""Issue 38 item 1, the doctor's side: a launch parameter that runs a command is an error
(`launcher-parameter-runs-a-command`). The hostile launchers are emit's own launch.pbs with each
platform-file value pasted raw, as emit wrote it before the quoting layer (the issue's three
injections), plus a command substitution in a launch option and a directive; every launcher
emit writes now, and every doctor fixture, has no such finding (`bash -lc "...; ..."` and
`$(declare -f f)` are the launched program's argument, not launch parameters)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from prism_strategy.cli import app
from prism_strategy.diagnose.injection_checks import lex, scan
from prism_strategy.emit.files import write_files_atomically
from prism_strategy.emit.launch import EmitRequest, emit_files

RULE = "launcher-parameter-runs-a-command"
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "doctor" / "launchers"


def _emitted(tmp_path: Path, platform: str = "aurora") -> Path:
    out = tmp_path / f"emit-{platform}"
    req = EmitRequest(strategy="fsdp_full_shard", platform=platform, nodes=2, account="proj")
    return write_files_atomically(out, emit_files(req, out).files)


def _findings(path: Path) -> list[dict]:
    res = CliRunner().invoke(app, ["doctor", "--launcher", str(path), "--platform", "aurora", "--json"])
    assert res.exit_code in (0, 1), res.output
    return [f for f in json.loads(res.stdout)["findings"] if f["rule"] == RULE]


PASTED = {
    # the old _master_addr: f'MASTER_ADDR="${{MASTER_ADDR%%.*}}{suffix}"' with suffix '"; touch x; "'
    "master_addr_suffix": (
        'MASTER_ADDR="${MASTER_ADDR%%.*}.hsn.cm.aurora.alcf.anl.gov"',
        'MASTER_ADDR="${MASTER_ADDR%%.*}.hsn"; touch pwned; ""',
    ),
    # the old _cpu_bind: f' --cpu-bind "{bind}"' with bind 'list:1-8"; touch x; "'
    "cpu_bind": ('--cpu-bind "list:', '--cpu-bind "list:1-8"; touch pwned; "list:'),
    # the old directive: f"#PBS -l filesystems={filesystems}" with a newline in the value
    "filesystems": ("#PBS -l filesystems=flare:home", "#PBS -l filesystems=flare\ntouch pwned"),
    "cpu_bind substitution": ('--cpu-bind "list:', '--cpu-bind "$(touch pwned)list:'),
    "account": ("#PBS -A proj", '#PBS -A "proj $(touch pwned)"'),
}


@pytest.mark.parametrize("field", sorted(PASTED))
def test_a_pasted_value_that_runs_a_command_is_an_error(tmp_path, field):
    clean = _emitted(tmp_path) / "launch.pbs"
    old, new = PASTED[field]
    text = clean.read_text()
    assert old in text
    bad = tmp_path / "launch.pbs"
    bad.write_text(text.replace(old, new, 1))
    found = _findings(bad)
    assert found and all(f["severity"] == "error" for f in found), found
    line = bad.read_text().splitlines()[found[0]["line"] - 1]
    assert "pwned" in line or "#PBS" in line, (found, line)


@pytest.mark.parametrize("platform", ["aurora", "polaris", "dgx-h100"])
def test_every_launcher_emit_writes_is_clean(tmp_path, platform):
    out = _emitted(tmp_path, platform)
    shells = [p for p in out.iterdir() if p.suffix in (".pbs", ".slurm", ".sbatch", ".sh")]
    assert len(shells) >= 3
    for path in shells:
        assert scan(path.read_text()) == [], path


def test_only_the_fixture_made_for_it_has_the_finding():
    paths = sorted(p for p in FIXTURES.iterdir() if p.suffix in (".pbs", ".sh", ".slurm", ".sbatch"))
    assert len(paths) > 20
    hits = {p.name: [line for line, _ in scan(p.read_text())] for p in paths if scan(p.read_text())}
    assert hits == {"bad_pasted_master_addr_suffix.pbs": [22]}


def test_a_job_script_written_by_a_heredoc_is_data():
    text = (
        "#!/bin/bash\n#PBS -l select=1\nset -e\ncat > next.pbs <<'EOF'\n#PBS -l select=2\n"
        'mpiexec -n 2 --cpu-bind "$(x)" a.out\nEOF\nmpiexec -n 2 python3 train.py\n'
    )
    assert scan(text) == []
    assert scan(text.replace("mpiexec -n 2 python3", "mpiexec -n $(nproc) python3")) == [
        (8, "mpiexec option -n runs a command substitution")
    ]


def test_the_lexer_reads_quotes_as_bash_does():
    words, more = lex("""mpiexec -n 2 bash -lc "a; b $(c)" 'x;$(y)' ; rest""")
    assert [w.text for w in words] == ["mpiexec", "-n", "2", "bash", "-lc", '"a; b $(c)"', "'x;$(y)'"]
    assert more and words[5].executes and not words[6].executes
    assert lex("NRANKS=$((2 * 12))")[0][0].executes is False
    assert lex('MASTER_ADDR="$(head -n 1 f)" \\; x') == (
        [lex('MASTER_ADDR="$(head -n 1 f)"')[0][0], lex("\\;")[0][0], lex("x")[0][0]],
        False,
    )
