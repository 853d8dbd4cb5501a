"""The emitted files run for real (moved from tests/unit/emit/test_emit_launch.py: each starts
processes): DeepSpeed's own config class loads each ZeRO stage's ds_config.json at the world it
was sized for, and `bash torchrun.sh` runs a real training step from strategy.toml on 2 gloo ranks."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from prism_strategy.emit.files import write_files_atomically
from prism_strategy.emit.launch import EmitRequest, emit_files

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.distributed


def emit(out: Path, **kw) -> Path:
    req = EmitRequest(**{"strategy": "fsdp_full_shard", "platform": "aurora", "nodes": 2, **kw})
    return write_files_atomically(out, emit_files(req, out).files)


_DS_CHECK = """
import os, sys
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[1], RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
import importlib
import deepspeed
from deepspeed.runtime.config import DeepSpeedConfig
# DeepSpeedConfig reads only the rank and world from deepspeed.comm; its CPU shm all-reduce op is a
# C++ JIT build (minutes on a fresh checkout) that reading a config never uses: not built here
# (tests/distributed builds it once, for the ZeRO ranks that use it).
importlib.import_module("deepspeed.comm.torch").build_shm_op = lambda: None  # the module, not torch
deepspeed.init_distributed(dist_backend="gloo", auto_mpi_discovery=False)

class DataParallelGroup:  # DeepSpeed's mpu interface: the data-parallel size the file is sized for
    def __init__(self, size):
        self.size = size
    def get_data_parallel_world_size(self):
        return self.size

for path, world in zip(sys.argv[2::2], sys.argv[3::2]):
    cfg = DeepSpeedConfig(path, mpu=DataParallelGroup(int(world)))
    print(cfg.zero_optimization_stage, cfg.train_batch_size, cfg.gradient_accumulation_steps)
"""


def _free_port() -> str:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def test_ds_config_loads_with_deepspeeds_config_class(tmp_path):
    pytest.importorskip("deepspeed")
    args = []
    for stage in (1, 2, 3):
        out = emit(tmp_path / f"z{stage}", strategy=f"zero{stage}", micro_batch=2, grad_accum=3)
        args += [str(out / "ds_config.json"), "24"]
    env = {
        **os.environ,
        "TORCH_EXTENSIONS_DIR": os.environ.get("TORCH_EXTENSIONS_DIR", str(REPO / ".torch_extensions")),
    }
    res = subprocess.run(
        [sys.executable, "-c", _DS_CHECK, _free_port(), *args], capture_output=True, text=True, env=env, timeout=600
    )
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.split("\n")[-4:-1] == ["1 144 3", "2 144 3", "3 144 3"]


TRAIN = """
import os, sys
import torch
from prism_strategy.runtime.dist import init_distributed
from prism_strategy.runtime.wrap import wrap_from_file

ctx = init_distributed()
model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 8))
job = wrap_from_file(model, os.environ["PRISM_STRATEGY_FILE"], ctx=ctx, optimizer=lambda p: torch.optim.SGD(p, lr=0.1))
loss = job.model(torch.ones(4, 8)).sum()
job.backward(loss)
job.step()
print(f"rank {ctx.rank}/{ctx.world_size} {os.environ['OMP_NUM_THREADS']} {sys.argv[1:]}", flush=True)
"""


def test_emitted_torchrun_script_runs_a_real_step_from_strategy_toml(tmp_path):
    """emit -> bash torchrun.sh -> init_distributed + wrap_from_file over gloo, 2 real ranks."""
    platform = tmp_path / "cpu2.toml"
    text = (REPO / "src/prism_strategy/data/platforms/cpu.toml").read_text()
    platform.write_text(
        text.replace('name = "cpu"', 'name = "cpu2"').replace("devices_per_node = 4", "devices_per_node = 2")
    )
    script = tmp_path / "my train.py"
    script.write_text(TRAIN)
    out = emit(
        tmp_path / "out",
        strategy="ddp",
        platform=str(platform),
        nodes=1,
        precision="fp32",
        static_graph=True,
        script=str(script),
        script_args=("a b", "$(c)"),
    )
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    res = subprocess.run(
        ["bash", str(out / "torchrun.sh")], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, res.stderr[-3000:]
    # the two ranks share one stdout pipe: their lines can interleave, so find each whole record
    assert sorted(re.findall(r"rank \d/2 \d+ \[.*?\]", res.stdout)) == [
        "rank 0/2 1 ['a b', '$(c)']",
        "rank 1/2 1 ['a b', '$(c)']",
    ]
