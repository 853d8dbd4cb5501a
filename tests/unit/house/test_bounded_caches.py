"""Issue 26 finding 12: nothing cached without a bound. A loop over many distinct models (a fuzz
of 10,000 command lines grew to 22 GB) keeps at most each cache's bound."""

from dataclasses import replace

from prism_strategy.engines.fsdp2 import _local_shards
from prism_strategy.estimate.memory import moments
from prism_strategy.flags import scenario_from_flags
from prism_strategy.specs.model import _param_counts
from prism_strategy.specs.parts import model_parts
from prism_strategy.specs.presets import type_adapter
from prism_strategy.strategies import get_strategy


def test_per_model_caches_stay_within_their_bounds():
    sc = scenario_from_flags("tiny-llama", platform="cpu", nodes=1)
    for cache in (_local_shards, _param_counts):
        assert cache.cache_info().maxsize is not None, cache
    for layers in range(1, 60):
        spec = replace(sc.model.backbone, layers=layers)
        model = replace(sc.model, backbone=spec)
        parts = model_parts(model, sc.training)
        for name in ("fsdp_full_shard", "zero3", "ddp"):
            moments(parts, sc.training, sc.platform, sc.layout, get_strategy(name))
    for cache in (_local_shards, _param_counts):
        info = cache.cache_info()
        assert info.currsize <= info.maxsize, cache


def test_the_spec_validators_cache_is_bounded():
    # one TypeAdapter per spec class (specs/presets.py build); a bound all the same
    assert type_adapter.cache_info().maxsize is not None
