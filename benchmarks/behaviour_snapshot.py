"""Behaviour snapshot for refactors that must not change behaviour (issue 37: "plan --json on 40
scenarios, doctor --json on the doctor fixtures and the fits' predictions diffed before and after").

    python benchmarks/behaviour_snapshot.py OUT_DIR [--no-fits]   # write the snapshot
    diff -r BEFORE_DIR AFTER_DIR                             # nothing printed: nothing changed

Each case is one CLI call run in-process (typer's CliRunner), its exit code and output written to
OUT_DIR/<case>.json; volatile fields (timestamps, absolute temporary paths) are dropped first.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from typer.testing import CliRunner

from prism_strategy.cli.app import app

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests" / "fixtures"

PLAN_CASES = {
    "qwen06_aurora_2": "--model qwen3-0.6b --platform aurora --nodes 2",
    "qwen06_aurora_10_vlm": "--model qwen3-0.6b --vision siglip2-so400m-patch14-384 --platform aurora --nodes 10",
    "qwen06_aurora_16_proj": "--model qwen3-0.6b --vision siglip2-base-patch16-224 --mode projector --platform aurora --nodes 16",
    "qwen06_enc_proj": "--model qwen3-0.6b --vision siglip2-large-patch16-256 --mode encoder-projector --nodes 4",
    "qwen17_sweep": "--model qwen3-1.7b --nodes 2 --sweep-nodes 1,2,4,8,16",
    "qwen4b_seq4k": "--model qwen3-4b --nodes 4 --seq-len 4096",
    "qwen8b_h100_2": "--model qwen3-8b --platform dgx-h100 --nodes 2",
    "llama8b_h100_mb": "--model llama-3.1-8b --platform dgx-h100 --nodes 4 --micro-batch 2",
    "llama8b_h200_gb": "--model llama-3.1-8b --platform dgx-h200 --nodes 8 --global-batch 256",
    "llama7b_a100_40": "--model llama-2-7b --platform dgx-a100-40 --nodes 2",
    "llama7b_a100_80_fp32": "--model llama-2-7b --platform dgx-a100-80 --precision fp32",
    "mpt7b_pure": "--model mpt-7b --platform dgx-a100-80 --nodes 2 --precision bf16-pure",
    "mpt13b_ckpt1": "--model mpt-13b --platform dgx-h100 --nodes 4 --ckpt-freq 1",
    "olmo1b_polaris": "--model olmo-1b --platform polaris --nodes 4",
    "olmo7b_aurora_sac": "--model olmo-7b --platform aurora --nodes 8 --ckpt-freq sac",
    "olmo3_7b_compile": "--model olmo-3-7b --platform dgx-h100 --nodes 2 --compile",
    "gemma9b": "--model gemma-2-9b --platform dgx-h100 --nodes 2 --loss chunked",
    "mixtral": "--model mixtral-8x7b --platform dgx-h100 --nodes 8",
    "qwen30b_moe": "--model qwen3-30b-a3b --platform aurora --nodes 16",
    "auroragpt2b": "--model auroragpt-2b --platform aurora --nodes 64",
    "tiny_cpu": "--model tiny-llama --platform cpu --nodes 2 --ranks-per-node 2",
    "small_cpu_sgd": "--model small-llama --platform cpu --optimizer sgd --seq-len 128",
    "frontier_16": "--model llama-3.1-8b --platform frontier --nodes 16",
    "lumi_4": "--model qwen3-1.7b --platform lumi --nodes 4",
    "mi300x": "--model llama-3.1-8b --platform mi300x --nodes 2",
    "mi325x": "--model qwen3-8b --platform mi325x --nodes 2",
    "h100_96": "--model qwen3-8b --platform h100-96gb-500w --nodes 2",
    "aurora_composite": "--model qwen3-0.6b --platform aurora-composite --nodes 2",
    "aurora_env_minimal": "--model qwen3-0.6b --nodes 10 --env-profile aurora-alcf-minimal",
    "aurora_env_large": "--model qwen3-1.7b --nodes 16 --env-profile aurora-alcf-large-scale",
    "mean_seq": "--model qwen3-0.6b --nodes 10 --seq-len 2048 --mean-seq-len 700",
    "jitter": "--model qwen3-0.6b --nodes 10 --rank-jitter 0.05",
    "bucket_reduce": "--model qwen3-1.7b --nodes 4 --bucket-mb 100 --reduce-dtype bf16",
    "grad_accum": "--model qwen3-1.7b --nodes 2 --micro-batch 1 --grad-accum 4",
    "opt_fused": "--model qwen3-4b --platform dgx-h100 --optimizer adamw-fused --loss fused",
    "lora": "--model llama-2-7b --platform dgx-a100-80 --lora tests/fixtures/configs/peft_adapter_config_llama2_7b.json",
    "from_torchtitan": "--from tests/fixtures/configs/torchtitan_llama3_8b.toml --platform dgx-h100 --nodes 2",
    "from_deepspeed": "--from tests/fixtures/configs/deepspeed_zero3_bf16.json --model qwen3-1.7b --nodes 2",
    "from_accelerate": "--from tests/fixtures/configs/accelerate_fsdp.yaml --model qwen3-1.7b --platform dgx-h100",
    "script_nanogpt": "--script tests/fixtures/scripts/nanogpt_train.py --model qwen3-0.6b",
    "script_nanogpt_h100": "--script tests/fixtures/scripts/nanogpt_train.py --model qwen3-0.6b --platform dgx-h100",
    "script_liger": "--script tests/fixtures/scripts/liger_sac.py --model qwen3-1.7b --nodes 2",
    "nothing_fits": "--model mixtral-8x7b --platform dgx-a100-40 --nodes 1 --seq-len 8192",
    "bad_global_batch": "--model qwen3-0.6b --nodes 3 --global-batch 10",
    "bad_model": "--model no-such-model",
}
"""plan's flags per scenario; fixture paths relative to the repository root (main runs there), so two
checkouts write the same snapshot."""

DOCTOR_DIRS = ("doctor/launchers", "doctor/official", "doctor/scripts")


def _clean(text: str) -> str:
    text = re.sub(r"/tmp/[^\s\"']+", "<tmp>", text)
    return re.sub(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}[^\s\"']*", "<time>", text)


def _run(args: list[str], cache: str) -> dict:
    env = {"COLUMNS": "100", "XDG_CACHE_HOME": cache, "PRISM_STRATEGY_DB": f"{cache}/results.db"}
    r = CliRunner().invoke(app, args, env=env)
    out = _clean(r.output)
    try:
        body: object = json.loads(out)
    except ValueError:
        body = out.splitlines()
    return {"args": [_clean(a) for a in args], "exit": r.exit_code, "output": body}


def _doctor_cases() -> dict[str, list[str]]:
    cases = {}
    for d in DOCTOR_DIRS:
        for f in sorted((FIX / d).iterdir()):
            if f.name == "expected.toml" or f.name.endswith(".source.txt"):
                continue
            flag = "--script" if f.suffix == ".py" else "--launcher"
            cases[f"doctor_{d.split('/')[-1]}_{f.name}"] = [
                "doctor",
                flag,
                str(f.relative_to(ROOT)),
                "--no-live",
                "--json",
            ]
    return cases


CATALOG_CASES = {"catalog_platforms": ["platforms", "--json"], "catalog_models": ["models", "--json"]}
FIT_SCRIPTS = ("aurora_fit.py", "cuda_fit.py", "aurora_collectives_fit.py")
"""The fits' predictions: each benchmark's --json (fitted, leave-one-out and held-out rows)."""


def _fit_outputs(out: Path) -> None:
    for script in FIT_SCRIPTS:
        r = subprocess.run(
            [sys.executable, str(ROOT / "benchmarks" / script), "--json"],
            capture_output=True,
            text=True,
            env=os.environ | {"PYTHONPATH": str(ROOT / "src")},
        )
        (out / f"fit_{script[:-3]}.json").write_text(_clean(r.stdout) + f"\nexit {r.returncode}\n")


def main(out_dir: str) -> None:
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    os.chdir(ROOT)
    cases = {f"plan_{k}": ["plan", *v.split(), "--json", "--calibration", "none"] for k, v in PLAN_CASES.items()}
    cases |= _doctor_cases() | CATALOG_CASES
    with tempfile.TemporaryDirectory() as cache:
        for name, args in cases.items():
            (out / f"{name}.json").write_text(json.dumps(_run(args, cache), indent=1, sort_keys=True) + "\n")
    if "--no-fits" not in sys.argv:
        _fit_outputs(out)
    print(f"{len(cases)} cases (+ {len(FIT_SCRIPTS)} fits) -> {out}")


if __name__ == "__main__":
    main(next((a for a in sys.argv[1:] if not a.startswith("--")), "out/behaviour"))
