"""Issue 38 item 1, the plan as a source: a plan file's model (what the commbench job replays) reaches
commbench.sbatch. A real `plan --json` with hostile text put in it is emitted with
`emit --from-plan`, and the job is run with stub `srun`/`python3`/`scontrol` on PATH: the value
arrives as one argument and nothing in it runs."""

from __future__ import annotations

import json
import subprocess

from typer.testing import CliRunner

from prism_strategy.cli import app

HOSTILE = "tiny $(touch pwned_m) `touch pwned_n`; touch pwned_o '\"x"
STUBS = {
    "python3": '#!/bin/bash\nprintf \'%s\\0\' "$@" > "$STUB_OUT/python3.argv"\n',
    "scontrol": "#!/bin/bash\necho node0001\n",
    "srun": (
        '#!/bin/bash\nwhile [ "$#" -gt 0 ] && [ "$1" != bash ]; do shift; done\nshift 2\ncmd="$1"; shift\n'
        'exec env SLURM_PROCID=0 SLURM_LOCALID=0 /bin/bash --noprofile --norc -c "$cmd" "$@"\n'
    ),
}


def test_a_hostile_model_in_a_plan_file_reaches_the_commbench_job_as_one_word(tmp_path):
    runner = CliRunner()
    res = runner.invoke(app, ["plan", "--model", "tiny-llama", "--platform", "dgx-h100", "--nodes", "2", "--json"])
    assert res.exit_code == 0, res.output
    plan = json.loads(res.stdout)
    plan["inputs"]["model_argument"] = plan["inputs"]["model"] = HOSTILE
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    out = tmp_path / "out"
    res = runner.invoke(app, ["emit", "--from-plan", str(path), "--out", str(out)])
    assert res.exit_code == 0, res.output
    bin_dir, stub_out = tmp_path / "bin", tmp_path / "stub_out"
    bin_dir.mkdir()
    stub_out.mkdir()
    for name, text in STUBS.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "STUB_OUT": str(stub_out),
        "SLURM_JOB_NODELIST": "node0001",
    }
    job = subprocess.run(
        ["bash", str(out / "commbench.sbatch")], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert job.returncode == 0, job.stderr
    argv = [a.decode() for a in (stub_out / "python3.argv").read_bytes().split(b"\0")[:-1]]
    assert argv[argv.index("--model") + 1] == HOSTILE
    assert not list(tmp_path.rglob("pwned*"))
