"""strategy.toml (what `prism-strategy emit` writes) -> wrap() arguments; bad files -> SpecError."""

from __future__ import annotations

import json

import pytest

from prism_strategy.runtime.strategy_file import StrategyFile, read_strategy_file
from prism_strategy.specs.errors import SpecError

FULL = """strategy = "ddp"
mixed_precision = "none"
ckpt_freq = 2
static_graph = true
find_unused_parameters = false
bucket_cap_mb = 50
compile = false
ranks_per_node = 12
"""


def write(tmp_path, text: str, name: str = "strategy.toml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_full_file(tmp_path):
    f = read_strategy_file(write(tmp_path, FULL))
    assert f == StrategyFile(strategy="ddp", mixed_precision=None, ckpt_freq=2, static_graph=True,
                             find_unused_parameters=False, bucket_cap_mb=50, compile=False, ranks_per_node=12)


def test_minimal_file_takes_wrap_defaults(tmp_path):
    f = read_strategy_file(write(tmp_path, 'strategy = "fsdp_full_shard"\n'))
    assert (f.mixed_precision, f.ckpt_freq, f.static_graph, f.compile) == ("bf16", 0, None, False)


def test_ds_config_is_relative_to_the_file(tmp_path):
    (tmp_path / "ds.json").write_text(json.dumps({"zero_optimization": {"stage": 3}}))
    f = read_strategy_file(write(tmp_path, 'strategy = "zero3"\nds_config = "ds.json"\n'))
    assert f.ds_config == (tmp_path / "ds.json").resolve()


@pytest.mark.parametrize("text, message", [
    ('strategy = "ddp"\ncolour = "red"\n', "unknown key 'colour'"),
    ('mixed_precision = "bf16"\n', "missing key 'strategy'"),
    ('strategy = "dpp"\n', "unknown strategy 'dpp'"),
    ('strategy = "ddp"\nckpt_freq = "1"\n', "ckpt_freq must be an integer"),
    ('strategy = "ddp"\nckpt_freq = true\n', "ckpt_freq must be an integer"),
    ('strategy = "ddp"\nckpt_freq = -1\n', "ckpt_freq must be >= 0"),
    ('strategy = "ddp"\nstatic_graph = 1\n', "static_graph must be true or false"),
    ('strategy = "ddp"\nbucket_cap_mb = 0\n', "bucket_cap_mb must be a positive integer"),
    ('strategy = "ddp"\nmixed_precision = "fp16"\n', 'mixed_precision must be "bf16" or "none"'),
    ('strategy = "ddp"\nds_config = "x.json"\n', "ds_config is only for zero1/zero2/zero3"),
    ('strategy = "zero2"\nds_config = "missing.json"\n', "ds_config 'missing.json' not found"),
    ('strategy = "ddp"\nckpt_freq = \n', "not valid TOML"),
])
def test_bad_files(tmp_path, text, message):
    with pytest.raises(SpecError, match=message):
        read_strategy_file(write(tmp_path, text))


def test_missing_file(tmp_path):
    with pytest.raises(SpecError, match="cannot read"):
        read_strategy_file(tmp_path / "nope.toml")


def test_reads_what_emit_writes(tmp_path):
    """The emitter's renderer and this reader agree on the format."""
    emit = pytest.importorskip("prism_strategy.emit.strategy_file")
    for sf in (emit.StrategyFile(strategy="ddp", static_graph=True, bucket_cap_mb=25, ranks_per_node=12),
               emit.StrategyFile(strategy="zero2", mixed_precision="none", ckpt_freq=1, ds_config="ds_config.json")):
        (tmp_path / "ds_config.json").write_text("{}")
        got = read_strategy_file(write(tmp_path, emit.render_strategy_toml(sf, "# test")))
        assert (got.strategy, got.ckpt_freq, got.static_graph, got.bucket_cap_mb, got.compile) == \
            (sf.strategy, sf.ckpt_freq, sf.static_graph, sf.bucket_cap_mb, sf.compile)
        assert got.mixed_precision == (None if sf.mixed_precision == "none" else "bf16")
