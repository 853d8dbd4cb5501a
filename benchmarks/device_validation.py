"""Device validation: the planner's memory and step-time predictions against one real device.

    python benchmarks/device_validation.py --platform dgx-h200             # one pass, < 10 min on an H200
    python benchmarks/device_validation.py --platform aurora               # one XPU tile
    python benchmarks/device_validation.py --platform cpu --quick          # tiny CPU matrix, seconds
    python benchmarks/device_validation.py --platform dgx-h200 --dry-run   # the matrix and its predictions

For each (model preset, strategy at world 1, micro-batch, ckpt freq) it builds the model as the
bench worker does (transformers, random init; here on the device itself), wraps it with `wrap()`
on a 1-rank process group (DDP; FSDP2 on a one-rank mesh), burns in, then times steps
(synchronised, median) and reads the allocator's peak allocated and reserved memory (reset
after the burn-in). On CPU the peak is torch's MemTracker peak of tensor memory, as in the bench
worker; reserved is n/a. Beside each row: `planner.evaluate` for the uncalibrated platform preset
at 1 node x 1 rank with the same micro-batch, ckpt and precision. An out-of-memory is a result
(status oom), and the matrix goes on. Writes `<out-dir>/<platform>-<date>.md` (atomically, after
every row) and stores every row in the results DB in the bench's format (kind "bench", config
"suite" = "device_validation", the bench fingerprint), so `compare` and `calibrate` use them.
Exit code: 0 done, 1 a row failed for a reason other than memory, 2 bad input.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import importlib.util
import math
import os
import shlex
import statistics
import sys
import time
from pathlib import Path
from typing import Any

START = time.monotonic()
"""The budget counts from here: imports and device start-up are part of the pass."""
ROOT = Path(__file__).resolve().parents[1]
if (ROOT / "src" / "prism_strategy").is_dir():  # a checkout measures its own code, not an installed copy
    sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from device_validation_report import gib, render, write_atomic  # noqa: E402
from prism_strategy.bench.launch.run import platform_with_limit  # noqa: E402
from prism_strategy.bench.results.store import Result, Store  # noqa: E402
from prism_strategy.cli.bench_inputs import base_config  # noqa: E402
from prism_strategy.estimate.batch import MAX_MICRO_BATCH_SHOWN  # noqa: E402
from prism_strategy.inputs.stored import scenario_from_row  # noqa: E402
from prism_strategy.planning.planner import evaluate  # noqa: E402
from prism_strategy.specs.cluster import GiB, PlatformSpec  # noqa: E402
from prism_strategy.specs.errors import SpecError  # noqa: E402
from prism_strategy.specs.presets import load_model, load_platform  # noqa: E402
from prism_strategy.specs.values import int_list  # noqa: E402
from prism_strategy.strategies import get_strategy  # noqa: E402

KIND, SUITE = "bench", "device_validation"
"""Stored as kind "bench" (what compare and calibrate read), marked config["suite"] = SUITE."""
GPU_MODELS = "qwen3-0.6b,qwen3-1.7b"
GPU_STRATEGIES = "ddp,fsdp_full_shard,fsdp_shard_grad_op"
QUICK_ROWS = (("ddp", 1, 0), ("fsdp_full_shard", 2, 1), ("fsdp_shard_grad_op", 2, 0))
"""--quick: (strategy, micro-batch, ckpt freq) on tiny-llama."""


VARIANTS = (
    ("adamw-foreach", "chunked", 0),
    ("adamw-fused", "chunked", 0),
    ("adamw", "chunked", 0),
    ("adamw", "fused", 0),
    ("adamw", "upcast", "sac"),
)
"""--variants: (optimizer, loss, ckpt) beside the defaults, each a memory moment of issue 17: the
optimizer step (foreach's state-sized temporary, fused's none), each loss kernel, selective
checkpointing. The optimizer rows run the chunked loss at micro-batch 1, so that the step (not
the loss buffers) holds the peak. The fused loss needs flash-attn (device-only); without it that
row is left out."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Row:
    model: str
    strategy: str
    micro_batch: int
    ckpt_freq: int | str
    probe: str = ""
    """"" a plain point; "ceiling": the predicted max micro-batch; "oom": deliberately above it."""
    optimizer: str = "adamw"
    loss: str = "upcast"

    @property
    def variant(self) -> str:
        """What differs from the default run (optimizer, loss), for the table; "" for none."""
        return " ".join(
            x
            for x in (
                self.optimizer if self.optimizer != "adamw" else "",
                f"loss {self.loss}" if self.loss != "upcast" else "",
            )
            if x
        )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--platform", required=True, help="dgx-h200, aurora, cpu, ... or a platform .toml")
    p.add_argument("--device", choices=("auto", "cuda", "xpu", "cpu"), default="auto")
    p.add_argument("--quick", action="store_true", help="tiny-llama, 3 rows (a CPU test or a smoke test)")
    p.add_argument("--models", default=None, help=f"comma list of presets (default {GPU_MODELS})")
    p.add_argument("--strategies", default=GPU_STRATEGIES, help="world-1 strategies; zero1-3 need DeepSpeed")
    p.add_argument("--micro-batches", default="auto", help="comma list, or auto: 1, 4 and the predicted ceiling")
    p.add_argument("--ckpt-freqs", default="0,1")
    p.add_argument(
        "--variants",
        choices=("auto", "none", "all"),
        default="auto",
        help="optimizer / loss / sac rows (VARIANTS); auto: on a device, not with --quick",
    )
    p.add_argument("--seq-len", type=int, default=None, help="default 2048 (64 with --quick)")
    p.add_argument("--precision", default="auto", help="bf16-mixed | fp32 | auto (bf16-mixed on a GPU, fp32 on CPU)")
    p.add_argument("--warmup", type=int, default=2, help="burn-in steps before timing")
    p.add_argument("--steps", type=int, default=3, help="timed steps (the median is reported)")
    p.add_argument(
        "--oom-probe-factor",
        type=float,
        default=1.25,
        help="the OOM probe's micro-batch: this x (predicted ceiling + 1)",
    )
    p.add_argument(
        "--memory-limit-gib",
        type=float,
        default=None,
        help="CPU only: a tracked peak above this is out of memory (and the predicted device size)",
    )
    p.add_argument(
        "--budget-s", type=float, default=540.0, help="seconds from start; stop before a row that would end past it"
    )
    p.add_argument("--db", default=None, help="results DB (default: $PRISM_STRATEGY_DB or the user cache)")
    p.add_argument("--out-dir", type=Path, default=ROOT / "benchmarks" / "results")
    p.add_argument("--dry-run", action="store_true", help="print the matrix with its predictions; run nothing")
    return p.parse_args(argv)


def check_args(a: argparse.Namespace, platform: PlatformSpec, device: str) -> None:
    if platform.device != device:
        raise SpecError(
            f"platform {platform.name} is a {platform.device} platform but the device is {device}; "
            f"pass --platform for this device or run on a {platform.device} node"
        )
    for name, v, low in (("--seq-len", a.seq_len, 1), ("--steps", a.steps, 1), ("--warmup", a.warmup, 0)):
        if v < low:
            raise SpecError(f"{name} must be >= {low}, got {v}")
    if a.budget_s <= 0 or a.oom_probe_factor <= 1:
        raise SpecError("--budget-s must be > 0 and --oom-probe-factor > 1")
    if a.memory_limit_gib is not None and (device != "cpu" or a.memory_limit_gib <= 0):
        raise SpecError("--memory-limit-gib is a CPU-only limit > 0 GiB (a device has its own memory)")
    if a.precision not in ("bf16-mixed", "fp32"):
        raise SpecError(f"--precision must be bf16-mixed, fp32 or auto, got {a.precision!r}")
    for s in a.strategy_list:
        if get_strategy(s).hybrid:
            raise SpecError(f"{s} needs several nodes; device validation runs one rank (use ddp, fsdp_*, zero*)")
    for m in a.model_list:
        if a.seq_len > load_model(m).max_positions:
            raise SpecError(f"--seq-len {a.seq_len} exceeds {m}'s max positions {load_model(m).max_positions}")


def resolve_args(a: argparse.Namespace) -> tuple[PlatformSpec, str]:
    """Fill the defaults that depend on --quick and the device; validate everything up front."""
    from prism_strategy.runtime.dist import pick_device_kind

    platform = load_platform(a.platform)
    device = a.device if a.device != "auto" else (platform.device if a.dry_run else pick_device_kind(os.environ))
    a.model_list = [m.strip() for m in (a.models or ("tiny-llama" if a.quick else GPU_MODELS)).split(",") if m.strip()]
    a.strategy_list = [s.strip() for s in a.strategies.split(",") if s.strip()]
    a.seq_len = a.seq_len or (64 if a.quick else 2048)
    a.precision = a.precision if a.precision != "auto" else ("fp32" if device == "cpu" else "bf16-mixed")
    a.ckpt_list = sorted(set(int_list(a.ckpt_freqs, "--ckpt-freqs", 0)))
    a.mb_list = None if a.micro_batches == "auto" else sorted(set(int_list(a.micro_batches, "--micro-batches", 1)))
    check_args(a, platform, device)
    a.limit_bytes = a.memory_limit_gib * GiB if a.memory_limit_gib else None
    return platform_with_limit(platform, a.limit_bytes), device


def row_config(row: Row, a: argparse.Namespace, device: str) -> dict[str, Any]:
    """The bench's config format (bench/launch/run.base_config), so compare and calibrate read it as theirs."""
    probe = row.probe == "oom"  # one step is enough to see whether it fits
    cfg = base_config(
        model=row.model,
        nproc=1,
        ranks_per_node=1,
        micro_batch=row.micro_batch,
        seq_len=a.seq_len,
        steps=1 if probe else a.steps,
        warmup=1 if probe else a.warmup,
        precision=a.precision,
        ckpt_freq=row.ckpt_freq,
        grad_accum=1,
        timeout_s=a.budget_s,
        optimizer=row.optimizer,
        loss=row.loss,
    )
    return cfg | {"strategy": row.strategy, "device": device, "probe": row.probe, "suite": SUITE}


def predict_row(config: dict[str, Any], platform: PlatformSpec) -> dict[str, Any]:
    """planner.evaluate at 1 node x 1 rank. The memory model predicts the peak of live tensors (what
    the allocator reports as allocated) plus the platform's framework reserve (context, communicator
    buffers: outside the allocator); allocator caching (reserved - allocated) is not modelled."""
    sc = scenario_from_row(config, platform)  # the row's own scenario: 1 node x 1 rank, batch = micro-batch
    o = evaluate(sc, get_strategy(config["strategy"]))
    return {
        "step_time_s": o.step_time_s,
        "samples_per_s": o.samples_per_s,
        "memory_bytes": o.memory.total,
        "allocated_bytes": o.memory.total - o.memory.reserve,
        "reserve_bytes": o.memory.reserve,
        "activation_bytes": o.memory.activations,
        "max_micro_batch": o.max_micro_batch,
        "compute_s": o.compute_s,
        "comm_s": o.comm_s,
        "fits": o.feasible,
        "why_not": o.why_not,
        "memory_moment": o.memory.moment,
        "platform": platform.name,
        "source": "planner.evaluate, uncalibrated",
    }


def _ceiling(model: str, strategy: str, ckpt: int, a: argparse.Namespace, platform: PlatformSpec, device: str) -> int:
    cfg = row_config(Row(model=model, strategy=strategy, micro_batch=1, ckpt_freq=ckpt), a, device)
    return int(predict_row(cfg, platform)["max_micro_batch"])


def build_matrix(a: argparse.Namespace, platform: PlatformSpec, device: str) -> list[Row]:
    """Rows ordered by predicted step time, so a budget stop leaves the broadest coverage.
    Per (model, strategy): micro-batches 1, 4 and the predicted ceiling at each ckpt freq, and one
    OOM probe at oom_probe_factor x (ceiling + 1), ckpt as the first freq (none when the ceiling is
    capped, i.e. memory is not what limits)."""
    rows: list[Row] = []
    for m in a.model_list:
        for s in a.strategy_list:
            if a.quick and a.models is None:
                combos = [(mb, k) for qs, mb, k in QUICK_ROWS if qs == s] or [(1, 0)]
            else:
                combos = [
                    (mb, k)
                    for k in a.ckpt_list
                    for mb in (a.mb_list or sorted({1, 4, _ceiling(m, s, k, a, platform, device)} - {0}))
                ]
            for mb, k in combos:
                auto_ceiling = a.mb_list is None and not a.quick and mb == _ceiling(m, s, k, a, platform, device)
                rows.append(
                    Row(model=m, strategy=s, micro_batch=mb, ckpt_freq=k, probe="ceiling" if auto_ceiling else "")
                )
            k0 = combos[0][1] if combos else a.ckpt_list[0]
            top = _ceiling(m, s, k0, a, platform, device)
            wanted = not a.quick or (a.limit_bytes and s == a.strategy_list[0])  # quick: only under a CPU limit
            if top < MAX_MICRO_BATCH_SHOWN and wanted:
                probe_mb = math.ceil(a.oom_probe_factor * (top + 1))
                rows.append(Row(model=m, strategy=s, micro_batch=probe_mb, ckpt_freq=k0, probe="oom"))
    rows += variant_rows(a, platform, device)
    key = {r: predict_row(row_config(r, a, device), platform)["step_time_s"] for r in rows}
    return sorted(rows, key=lambda r: key[r])


def variant_rows(a: argparse.Namespace, platform: PlatformSpec, device: str) -> list[Row]:
    """VARIANTS on the first model, for ddp and fsdp_full_shard where asked, at micro-batch 4 (or
    the predicted ceiling, if lower; 1 for the optimizer rows)."""
    if a.variants == "none" or (a.variants == "auto" and (a.quick or device == "cpu")):
        return []
    has_flash = importlib.util.find_spec("flash_attn") is not None
    m, rows = a.model_list[0], []
    for s in (x for x in ("ddp", "fsdp_full_shard") if x in a.strategy_list):
        for opt, loss, k in VARIANTS:
            if loss == "fused" and not has_flash:
                continue
            probe = Row(model=m, strategy=s, micro_batch=1, ckpt_freq=k, optimizer=opt, loss=loss)
            top = int(predict_row(row_config(probe, a, device), platform)["max_micro_batch"])
            if top >= 1:  # micro-batch 1 for the optimizer rows: the step's moment peaks when activations are small
                rows.append(dataclasses.replace(probe, micro_batch=1 if opt != "adamw" else min(4, top)))
    return rows


# ----------------------------------------------------------------------------- measuring


def _accel(device: Any) -> Any:
    import torch

    return getattr(torch, device.type) if device.type in ("cuda", "xpu") else None  # device-only module


def measure_row(config: dict[str, Any], ctx: Any, limit_bytes: float | None) -> dict[str, Any]:
    """bench/launch/worker.run for one rank, with the model initialised on the device (a 1.7B model's CPU
    init costs seconds a row) and the allocator's peak reserved read beside its peak allocated."""
    import torch

    from prism_strategy.bench.launch.worker import Runner, build_model, peak_memory
    from prism_strategy.runtime.wrap import wrap

    accel = _accel(ctx.device)
    sc = scenario_from_row(config)
    with torch.device(ctx.device):
        model = build_model(sc)
    from prism_strategy.runtime.optim import optimizer_factory

    job = wrap(
        model,
        config["strategy"],
        ctx=ctx,
        optimizer=optimizer_factory(sc.memory.optimizer),
        mixed_precision=None if sc.precision == "fp32" else "bf16",
        ckpt_freq=sc.memory.checkpointing,
        loss=sc.memory.loss,
    )
    runner = Runner(config, sc, job, ctx, argparse.Namespace(fault=None))
    warmup, steps = int(config["warmup"]), int(config["steps"])
    for i in range(warmup):
        runner.step(i)
    if accel is not None:
        accel.reset_peak_memory_stats(ctx.device)
    timed = [runner.step(warmup + i) for i in range(steps)]
    peak = peak_memory(runner, warmup + steps)
    reserved = float(accel.max_memory_reserved(ctx.device)) if accel is not None else None
    med = {k: statistics.median(t[k] for t in timed) for k in ("step", "forward", "backward", "optimizer")}
    status = "oom" if limit_bytes and peak and peak > limit_bytes else "ok"
    return {
        "rank": 0,
        "status": status,
        "step_s": med["step"],
        "forward_s": med["forward"],
        "backward_s": med["backward"],
        "optimizer_s": med["optimizer"],
        "step_times": [t["step"] for t in timed],
        "peak_memory_bytes": peak,
        "peak_reserved_bytes": reserved,
        "device": str(ctx.device),
        "backend": ctx.backend,
    }


def _release(device: Any) -> None:
    gc.collect()
    gc.freeze()  # what survived, out of the next row's collections (bench/launch/worker.py collect_garbage)
    accel = _accel(device)
    if accel is not None:  # the next row starts from an empty cache, so its reserved peak is its own
        accel.empty_cache()


def run_row(config: dict[str, Any], ctx: Any, a: argparse.Namespace, platform: PlatformSpec) -> Result:
    """One row: measured (or its oom / failure), the prediction, stored in the bench's Result format."""
    import traceback

    from prism_strategy.bench.launch.harness import Outcome, to_result
    from prism_strategy.bench.launch.worker import is_oom

    t0, accel = time.perf_counter(), _accel(ctx.device)
    if accel is not None:  # an OOM before the burn-in ends then still reports this row's own peak
        accel.reset_peak_memory_stats(ctx.device)
    try:
        rank = measure_row(config, ctx, a.limit_bytes)
        o = Outcome(
            status=rank["status"],
            ranks=[rank],
            seconds=0.0,
            error=f"tracked peak {rank['peak_memory_bytes'] / GiB:.3g} GiB > --memory-limit-gib {a.memory_limit_gib:g}"
            if rank["status"] == "oom"
            else "",
        )
    except Exception as e:  # a row's failure is its result; the matrix goes on
        status = "oom" if is_oom(e) else "failed"
        o = Outcome(
            status=status,
            ranks=[],
            seconds=0.0,
            error=f"{type(e).__name__}: {e}",
            log_tail=traceback.format_exc()[-3000:],
        )
    reached = float(accel.max_memory_allocated(ctx.device)) if accel is not None and not o.ranks else None
    _release(ctx.device)
    o = dataclasses.replace(o, seconds=time.perf_counter() - t0)
    r = to_result(
        config, o, platform=platform.name, backend=platform.backend, kind=KIND, predicted=predict_row(config, platform)
    )
    extra = {
        "peak_reserved_bytes": o.ranks[0]["peak_reserved_bytes"] if o.ranks else None,
        "peak_allocated_before_error_bytes": reached,
        "device_name": device_name(ctx.device),
        "memory_figure": memory_figure(ctx.device),
    }
    return dataclasses.replace(r, measured=r.measured | extra)


def device_name(device: Any) -> str:
    accel = _accel(device)
    if accel is None:
        import platform as host

        return host.processor() or host.machine()
    total = accel.get_device_properties(device).total_memory
    return f"{accel.get_device_name(device)}, {total / GiB:.1f} GiB"


def memory_figure(device: Any) -> str:
    if device.type == "cpu":
        return "MemTracker peak of tensor memory (no allocator: reserved n/a)"
    return f"torch.{device.type}.max_memory_allocated / max_memory_reserved after reset_peak_memory_stats"


class Budget:
    """Stop before a row that would end past the budget: seconds ~ overhead + steps x ratio x predicted step."""

    def __init__(self, seconds: float):
        self.deadline, self.done = START + seconds, []

    def allows(self, config: dict[str, Any], predicted_step: float) -> bool:
        ok = [r for r in self.done if r.status == "ok"]
        overhead = min((r.measured["seconds"] for r in self.done), default=0.0)
        ratio = max((r.measured["step_time_s"] / r.predicted["step_time_s"] for r in ok), default=1.0)
        n = int(config["warmup"]) + int(config["steps"]) + 1
        return time.monotonic() + overhead + n * ratio * predicted_step < self.deadline


# ----------------------------------------------------------------------------- main


def _env(a: argparse.Namespace, ctx: Any, store: Store, argv: list[str] | None) -> dict[str, str]:
    import socket

    import torch

    from prism_strategy.bench.launch.fingerprint import code_revision

    args = sys.argv[1:] if argv is None else argv
    return {
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "device": str(ctx.device),
        "backend": ctx.backend,
        "device_name": device_name(ctx.device),
        "memory_figure": memory_figure(ctx.device),
        "host": socket.gethostname(),
        "code": code_revision(),
        "db": str(store.path),
        "torch": torch.__version__,
        "command": shlex.join(["python", "benchmarks/device_validation.py", *args]),
        "stored_as": f"kind {KIND}, suite {SUITE}",
    }


def init_one_rank(device: str) -> Any:
    from prism_strategy.runtime.dist import DEVICE_ENV, init_distributed
    from prism_strategy.runtime.launch_env import parse_launch_env

    if parse_launch_env(os.environ).world_size != 1:
        raise SpecError(
            "device validation runs one rank; start it plainly (python benchmarks/device_validation.py), "
            "not under a multi-rank launcher"
        )
    os.environ[DEVICE_ENV] = device
    return init_distributed(ranks_per_node=1, timeout_s=600)


def run(a: argparse.Namespace, platform: PlatformSpec, device: str, argv: list[str] | None) -> int:
    budget = Budget(a.budget_s)
    rows = build_matrix(a, platform, device)
    configs = {r: row_config(r, a, device) for r in rows}
    predictions = {r: predict_row(configs[r], platform) for r in rows}
    if a.dry_run:
        for r in rows:
            p = predictions[r]
            print(
                f"{r.model:<12} {r.strategy:<19} mb {r.micro_batch:>4} ckpt {r.ckpt_freq} "
                f"{r.probe or r.variant or '-':<7} "
                f"pred {p['step_time_s']:.3f} s {gib(p['memory_bytes']):>7} GiB {'fits' if p['fits'] else 'no fit'}"
            )
        busy = sum(predictions[r]["step_time_s"] * (configs[r]["warmup"] + configs[r]["steps"]) for r in rows)
        print(f"{len(rows)} rows; predicted time in steps {busy:.0f} s (model building and start-up not included)")
        return 0
    if importlib.util.find_spec("transformers") is None:
        raise SpecError(
            "device validation builds the presets with transformers, which is not installed; "
            "pip install 'prism-strategy[hf]'"
        )
    store = Store(a.db)
    ctx = init_one_rank(device)
    env = _env(a, ctx, store, argv)
    out = a.out_dir / f"{platform.name}-{env['date']}.md"
    results: dict[Row, Result] = {}
    for i, r in enumerate(rows):
        if not budget.allows(configs[r], predictions[r]["step_time_s"]):
            print(f"budget: stopping before row {i + 1} of {len(rows)}: it would end past {a.budget_s:g} s")
            break
        res = run_row(configs[r], ctx, a, platform)
        res = dataclasses.replace(res, id=store.add(res))
        budget.done.append(res)
        results[r] = res
        print(
            f"[{i + 1}/{len(rows)}] {r.model} {r.strategy} mb {r.micro_batch} ckpt {r.ckpt_freq}: {res.status} "
            f"({res.measured['seconds']:.1f} s)",
            flush=True,
        )
        write_atomic(out, render(a, platform, rows, results, predictions, env))
    write_atomic(out, render(a, platform, rows, results, predictions, env))
    ctx.destroy()
    print(f"wrote {out}; {len(results)} rows stored in {store.path}")
    return 1 if any(r.status == "failed" for r in results.values()) else 0


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    try:
        platform, device = resolve_args(a)
        return run(a, platform, device, argv)
    except SpecError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
