"""WrapConfig: wrap()'s settings and strategy.toml, one schema both ways; bad files -> SpecError."""

from __future__ import annotations

import json

import pytest

from prism_strategy import WrapConfig
from prism_strategy.runtime.strategy_file import read_strategy_file
from prism_strategy.specs.errors import SpecError

FULL = """strategy = "ddp"
mixed_precision = "none"
ckpt_freq = 2
static_graph = true
find_unused_parameters = false
bucket_mb = 50
compile = false
micro_batch = 8
grad_accum = 4
ranks_per_node = 12
"""


def write(tmp_path, text: str, name: str = "strategy.toml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_full_file(tmp_path):
    f = read_strategy_file(write(tmp_path, FULL))
    assert f == WrapConfig(
        strategy="ddp",
        mixed_precision=None,
        ckpt_freq=2,
        static_graph=True,
        bucket_mb=50,
        micro_batch=8,
        grad_accum=4,
        ranks_per_node=12,
    )
    assert f.spec.bucket_mb == 50 and f.spec.name == "ddp"


def test_minimal_file_takes_wrap_defaults(tmp_path):
    f = read_strategy_file(write(tmp_path, 'strategy = "fsdp_full_shard"\n'))
    assert (f.mixed_precision, f.ckpt_freq, f.static_graph, f.compile, f.grad_accum) == ("bf16", 0, None, False, 1)


def test_ds_config_is_relative_to_the_file(tmp_path):
    (tmp_path / "ds.json").write_text(json.dumps({"zero_optimization": {"stage": 3}}))
    f = read_strategy_file(write(tmp_path, 'strategy = "zero3"\nds_config = "ds.json"\n'))
    assert f.ds_config == str((tmp_path / "ds.json").resolve())


def test_no_path_reads_the_env_var_the_launchers_export(tmp_path, monkeypatch):
    monkeypatch.setenv("PRISM_STRATEGY_FILE", str(write(tmp_path, FULL)))
    assert WrapConfig.from_toml().grad_accum == 4
    monkeypatch.delenv("PRISM_STRATEGY_FILE")
    with pytest.raises(SpecError, match="set PRISM_STRATEGY_FILE"):
        WrapConfig.from_toml()


@pytest.mark.parametrize(
    "text, message",
    [
        ('strategy = "ddp"\ncolour = "red"\n', "unknown key 'colour'"),
        ('mixed_precision = "bf16"\n', "missing key 'strategy'"),
        ('strategy = "dpp"\n', "unknown strategy 'dpp'"),
        ('strategy = "ddp"\nckpt_freq = "1"\n', "ckpt_freq must be an int >= 0"),
        ('strategy = "ddp"\nckpt_freq = true\n', "ckpt_freq must be an int >= 0"),
        ('strategy = "ddp"\nckpt_freq = -1\n', "ckpt_freq must be an int >= 0"),
        ('strategy = "ddp"\nstatic_graph = 1\n', "static_graph must be True or False"),
        ('strategy = "ddp"\nbucket_mb = 0\n', "bucket size must be a number of MiB"),
        ('strategy = "ddp"\nreduce_dtype = "fp16"\n', r"reduce dtype \(--reduce-dtype\) must be fp32 or bf16"),
        ('strategy = "ddp"\nmicro_batch = 0\n', "micro_batch must be a positive integer"),
        ('strategy = "ddp"\ngrad_accum = 1.5\n', "grad_accum must be a positive integer"),
        ('strategy = "ddp"\nmixed_precision = "fp16"\n', 'mixed_precision must be "bf16" or "none"'),
        ('strategy = "ddp"\nds_config = "x.json"\n', "ds_config is only for zero"),
        ('strategy = "zero2"\nds_config = "missing.json"\n', "ds_config 'missing.json' not found"),
        ('strategy = "ddp"\nckpt_freq = \n', "not valid TOML"),
    ],
)
def test_bad_files(tmp_path, text, message):
    with pytest.raises(SpecError, match=message) as e:
        read_strategy_file(write(tmp_path, text))
    assert "\n" not in str(e.value)


def test_missing_file(tmp_path):
    with pytest.raises(SpecError, match="cannot read"):
        read_strategy_file(tmp_path / "nope.toml")


@pytest.mark.parametrize(
    "cfg",
    [
        WrapConfig(strategy="ddp", static_graph=True, bucket_mb=25, ranks_per_node=12, micro_batch=4, grad_accum=2),
        WrapConfig(
            strategy="zero2", mixed_precision=None, ckpt_freq=1, ds_config="ds_config.json", reduce_dtype="fp32"
        ),
        WrapConfig(strategy="hsdp_shard_grad_op", reduce_dtype="bf16", bucket_mb=12.5, compile=True),
    ],
)
def test_round_trip(tmp_path, cfg):
    """What emit writes, wrap_from_file reads back unchanged."""
    (tmp_path / "ds_config.json").write_text("{}")
    got = read_strategy_file(write(tmp_path, cfg.to_toml("# test")))
    expected = (
        cfg if cfg.ds_config is None else cfg.with_changes(ds_config=str((tmp_path / "ds_config.json").resolve()))
    )
    assert got == expected
