"""bench checks the plan's memory before launching (exit 2 with the figures) and names a rank the
kernel killed (SIGKILL, exit -9) as most likely out of host memory."""

import pytest
from typer.testing import CliRunner

from prism_strategy.bench.launch.harness import _outcome, sigkilled_ranks
from prism_strategy.bench.launch.run import check_memory, host_memory_available
from prism_strategy.cli import app
from prism_strategy.cli.bench_inputs import base_config
from prism_strategy.specs import SpecError, load_platform
from prism_strategy.specs.cluster import GiB

runner = CliRunner()


def _base(model, nproc=4):
    return base_config(
        model=model,
        nproc=nproc,
        ranks_per_node=None,
        micro_batch=2,
        seq_len=128,
        steps=3,
        warmup=1,
        precision="fp32",
        ckpt_freq=0,
        grad_accum=1,
        timeout_s=300,
    )


def test_olmo_7b_on_a_24_gib_cpu_host_is_refused_before_launch():
    # 24 GiB: the CPU host this project's CI runs on (data/platforms/cpu.toml [sources] memory_gib)
    with pytest.raises(
        SpecError,
        match=r"ddp at micro-batch 2 needs \d+\.\d GiB per rank \(predicted\) x 4 ranks = "
        r"\d+\.\d GiB > 24\.0 GiB available on this host",
    ):
        check_memory(_base("olmo-7b"), ["ddp"], load_platform("cpu"), available=24 * GiB)
    check_memory(_base("tiny-llama"), ["ddp", "zero3"], load_platform("cpu"), available=24 * GiB)  # fits: no error


def test_bench_cli_refuses_on_one_line_without_launching():
    available = host_memory_available()
    assert available is not None and available > 0
    r = runner.invoke(app, ["bench", "--model", "olmo-7b", "--nproc", "4", "--strategies", "ddp"])
    assert r.exit_code == 2, r.output
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and "not launched" in err[0] and "GiB available on this host" in err[0]


@pytest.mark.parametrize("env", [{}, {"PRISM_BENCH_TIMEOUT_S": "-3"}])
def test_a_timeout_that_is_not_positive_is_refused_on_one_line_without_launching(env):
    args = ["bench", "--model", "tiny-llama", "--nproc", "2", "--strategies", "ddp"]
    r = runner.invoke(app, args + ([] if env else ["--timeout-s", "0"]), env=env)
    assert r.exit_code == 2, r.output
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and "--timeout-s" in err[0] and "must be > 0 seconds" in err[0], err


def _torchrun_summary(rank: int, exitcode: int) -> str:
    """The failure summary torchrun prints, rendered by torch's own code."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

    failure = ProcessFailure(local_rank=rank, pid=4242, exitcode=exitcode, error_file="/nonexistent")
    return ChildFailedError("prism_strategy.bench.launch.worker", {rank: failure}).format_msg()


def test_a_sigkilled_rank_is_called_out_of_memory():
    tail = "[rank0]: step 1\n" + _torchrun_summary(1, -9)
    assert sigkilled_ranks(tail) == [1]
    o = _outcome(1, [{"rank": 0, "status": "ok"}], 2, 10.0, tail, 300)
    assert o.status == "oom" and "killed, most likely out of host memory" in o.error and "[1]" in o.error
    other = _outcome(1, [{"rank": 0, "status": "ok"}], 2, 10.0, _torchrun_summary(1, 1), 300)
    assert other.status == "failed" and "died without a result" in other.error
