"""Issue 38 item 1: emitted shell is inert by construction. Every file emit writes (launch.pbs,
launch.slurm, commbench.pbs, commbench.sbatch, bench.pbs, bench.sbatch, bench_torchrun.sh,
torchrun.sh, env.sh) is rendered with hostile values in every field from every source (flags, a platform file, an env profile file, the plan's model and
platform path) and RUN with stub launchers on PATH (`mpiexec`, `srun`, `torchrun`, `python3`,
`module`, `conda`, `scontrol` record their argv): every payload would create a file named pwned*,
and none may exist afterwards. Fields with a scheduler grammar (filesystems, queue, walltime,
cpu_bind, master_addr_suffix, keep_output, account) refuse hostile values instead: exit 2, one
line naming the field and the file, at emit and at plan."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from prism_strategy.cli import app
from prism_strategy.emit.files import write_files_atomically
from prism_strategy.emit.launch import EmitRequest, emit_files

PAYLOADS = (
    "$(touch pwned_1)",
    "`touch pwned_2`",
    "'; touch pwned_3; '",
    '"; touch pwned_4; "',
    "x;touch pwned_5",
    "${IFS}touch${IFS}pwned_6",
    "$((0))$(touch pwned_7)",
    '\\"$(touch pwned_8)\\"',
)
WORD = "v " + " ".join(PAYLOADS)
"""One value holding every payload: what a user's file could put in any free-text field."""
T = json.dumps(WORD)
"""WORD as a TOML string (a JSON string is a TOML basic string)."""

RECORD = """#!/bin/bash
printf '%s\\0' "$@" > "$STUB_OUT/$(basename "$0").argv"
env > "$STUB_OUT/$(basename "$0").env"
"""
LOG = """#!/bin/bash
printf '%s\\0' "$@" >> "$STUB_OUT/$(basename "$0").log"
"""
RUN_RANK = """#!/bin/bash
printf '%s\\0' "$@" > "$STUB_OUT/$(basename "$0").argv"
while [ "$#" -gt 0 ] && [ "$1" != bash ]; do shift; done
shift 2
cmd="$1"; shift
exec env PALS_RANKID=0 PALS_LOCAL_RANKID=0 SLURM_PROCID=0 SLURM_LOCALID=0 /bin/bash --noprofile --norc -c "$cmd" "$@"
"""
STUBS = {
    "python3": RECORD,
    "torchrun": RECORD,
    "module": LOG,
    "conda": LOG,
    "mpiexec": RUN_RANK,
    "srun": RUN_RANK,
    "scontrol": "#!/bin/bash\necho node0001\n",
}


def _profile(root: Path) -> Path:
    """An env profile file with the payloads in every value a script receives."""
    p = root / f"profile {PAYLOADS[0]}.toml"
    p.write_text(
        f"""name = {T}
version = {T}
description = {T}
source = {T}
modules = [{T}]
module_use = [{T}]
conda_activate = {T}
unset = ["SOME_VAR"]

[[var]]
name = "HOSTILE_VALUE"
value = {T}
why = {T}
source = {T}

[[prepend]]
name = "LD_LIBRARY_PATH"
value = {T}
why = {T}
source = {T}
"""
    )
    return p


def _platform(root: Path, launcher: str, launch: str = "") -> Path:
    """A user's platform file over a preset, with the payloads in its free text and plain, valid
    [launch] fields (the hostile ones are refused: see the refusal tests below)."""
    folder = root / f"site {PAYLOADS[1]}"
    folder.mkdir(exist_ok=True)
    p = folder / f"{launcher}.toml"
    base = "aurora" if launcher == "pbs" else "dgx-h100"
    p.write_text(
        f'name = {T}\nbase = "{base}"\ndescription = {T}\n\n'
        + (launch or '[launch]\nfilesystems = "flare:home"\nkeep_output = "doe"\nmaster_addr_suffix = ".hsn.example"\n')
        + f"\n[launch.sources]\nmaster_addr_suffix = {T}\n"
    )
    return p


def _emit(root: Path, launcher: str) -> Path:
    out = root / f"out {PAYLOADS[2]}"
    req = EmitRequest(
        strategy="fsdp_full_shard",
        platform=str(_platform(root, launcher)),
        nodes=2,
        env_profile=str(_profile(root)),
        job_name=WORD,
        model=WORD,  # a plan's --model (emit --from-plan): what the commbench job replays
        script=f"dir {PAYLOADS[3]}/train.py",
        script_args=(*PAYLOADS, WORD, ""),
    )
    return write_files_atomically(out, emit_files(req, out).files)


def _run(root: Path, argv: list[str], env: dict[str, str]) -> Path:
    bin_dir, stub_out, work = root / "bin", root / "stub_out", root / "work"
    for d in (stub_out, work):
        d.mkdir(exist_ok=True)
    if not bin_dir.exists():
        bin_dir.mkdir()
        for name, text in STUBS.items():
            (bin_dir / name).write_text(text)
            (bin_dir / name).chmod(0o755)
    nodefile = root / "nodefile"
    nodefile.write_text("x1000c0s0b0n0.local\n")
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "HOME": str(root),
        "STUB_OUT": str(stub_out),
        "PBS_NODEFILE": str(nodefile),
        "SLURM_JOB_NODELIST": "node0001",
        **env,
    }
    res = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    return stub_out


def _argv(path: Path) -> list[str]:
    return [a.decode() for a in path.read_bytes().split(b"\0")[:-1]]


def _assert_inert(root: Path) -> None:
    hits = [p for p in root.rglob("pwned*")] + list(Path.cwd().glob("pwned*"))
    assert hits == [], hits


@pytest.mark.parametrize(
    ("launcher", "job", "bench"),
    [("pbs", "launch.pbs", "commbench.pbs"), ("slurm", "launch.slurm", "commbench.sbatch")],
)
def test_every_emitted_script_runs_with_hostile_values_and_executes_none(tmp_path, launcher, job, bench):
    out = _emit(tmp_path, launcher)
    names = {p.name for p in out.iterdir()}
    assert {job, bench, "torchrun.sh", "env.sh"} <= names

    stub_out = _run(tmp_path, ["bash", str(out / job)], {})
    assert _argv(stub_out / "python3.argv") == [f"dir {PAYLOADS[3]}/train.py", *PAYLOADS, WORD, ""]
    rank_env = (stub_out / "python3.env").read_text().splitlines()
    assert f"HOSTILE_VALUE={WORD}" in rank_env and f"PRISM_JOB_NAME={WORD}" in rank_env
    assert any(line.startswith("LD_LIBRARY_PATH=" + WORD) for line in rank_env)
    if launcher == "pbs":
        assert "MASTER_ADDR=x1000c0s0b0n0.hsn.example" in rank_env

    stub_out = _run(tmp_path, ["bash", str(out / bench)], {})
    argv = _argv(stub_out / "python3.argv")
    assert argv[argv.index("--platform") + 1] == str(_platform(tmp_path, launcher))
    assert argv[argv.index("--model") + 1] == WORD  # the plan's model, one word, nothing run

    for timed in (bench.replace("commbench", "bench"), "bench_torchrun.sh"):  # the launched bench jobs
        stub_out = _run(tmp_path, ["bash", str(out / timed)], {})
        argv = _argv(stub_out / "python3.argv")
        assert argv[argv.index("--model") + 1] == WORD and "--launched" in argv

    stub_out = _run(tmp_path, ["bash", str(out / "torchrun.sh")], {})
    assert _argv(stub_out / "torchrun.argv")[3:] == [f"dir {PAYLOADS[3]}/train.py", *PAYLOADS, WORD, ""]

    for log in ("module.log", "conda.log"):  # the launchers loaded the modules too: env.sh's alone
        (stub_out / log).unlink()
    stub_out = _run(tmp_path, ["bash", "-c", 'source "$1" && env', "_", str(out / "env.sh")], {})
    assert _argv(stub_out / "module.log") == ["use", WORD, "load", WORD]
    assert _argv(stub_out / "conda.log") == ["activate", WORD]
    _assert_inert(tmp_path)


HOSTILE_LAUNCH = [
    ("filesystems", 'filesystems = "flare:home\\ntouch pwned_fs"'),
    ("filesystems", 'filesystems = "flare:$(touch pwned_fs)"'),
    ("master_addr_suffix", 'master_addr_suffix = ".hsn\\"; touch pwned_sfx; \\""'),
    ("cpu_bind", 'cpu_bind = "list:1-8\\"; touch pwned_bind; \\""'),
    ("cpu_bind", 'cpu_bind = "core`touch pwned_bind`"'),
    ("keep_output", 'keep_output = "doe; touch pwned_k"'),
    ("queue", '[[queues]]\nname = "prod;touch pwned_q"\nmin_nodes = 1\nmax_nodes = 10\nmax_walltime = "01:00:00"'),
    (
        "queue walltime",
        '[[queues]]\nname = "prod"\nmin_nodes = 1\nmax_nodes = 9\nmax_walltime = "1:00$(touch pwned_w)"',
    ),
]


@pytest.mark.parametrize(("field", "toml"), HOSTILE_LAUNCH, ids=[f"{f}-{i}" for i, (f, _) in enumerate(HOSTILE_LAUNCH)])
@pytest.mark.parametrize("command", ["emit", "plan"])
def test_a_hostile_launch_field_in_a_platform_file_is_refused_in_one_line(tmp_path, field, toml, command):
    launch = toml if toml.startswith("[[") else f"[launch]\n{toml}\n"
    if toml.startswith("[["):
        launch = f'[launch]\nfilesystems = "flare:home"\n\n{toml}\n'
    platform = _platform(tmp_path, "pbs", launch)
    out = tmp_path / "out"
    args = (
        ["emit", "--strategy", "ddp", "--platform", str(platform), "--out", str(out)]
        if command == "emit"
        else ["plan", "--model", "tiny-llama", "--platform", str(platform), "--nodes", "1"]
    )
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2, res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and field.split()[0] in lines[0] and str(platform) in lines[0], lines
    assert not out.exists()
    _assert_inert(tmp_path)


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--account", "proj; touch pwned_a"),
        ("--account", "proj$(touch pwned_a)"),
        ("--queue", "prod`touch pwned_q`"),
        ("--queue", "prod\n#PBS -l select=999"),
        ("--walltime", "01:00:00;touch pwned_w"),
        ("--filesystems", "flare:home touch pwned_f"),
        ("--job-name", "j\ntouch pwned_j"),
        ("--script", "train.py\ntouch pwned_s"),
    ],
)
def test_a_hostile_scheduler_flag_is_refused_in_one_line(tmp_path, flag, value):
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["emit", "--strategy", "ddp", "--platform", "aurora", "--out", str(out), flag, value])
    assert res.exit_code == 2, res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and flag in lines[0], lines
    assert not out.exists()
