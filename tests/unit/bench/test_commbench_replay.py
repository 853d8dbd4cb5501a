"""commbench's pure parts: the replay's payload rounding and the check of the profiler's record
of a replay against the kinds asked for (bench/collectives/commbench.py, bench/collectives/commbench_worker.py)."""

from __future__ import annotations

from prism_strategy.bench.collectives.commbench import Kind, replay_mismatch
from prism_strategy.bench.collectives.commbench_worker import elements


def _kind(op="all_gather", ranks=4, dtype="bfloat16", calls=3):
    return Kind(
        op=op,
        group="world",
        ranks=ranks,
        dtype=dtype,
        bytes_per_call=1000.0,
        calls=calls,
        phase="forward",
        seconds_per_call_predicted=1e-4,
    )


def test_payload_rounds_to_whole_elements_split_evenly_over_the_group():
    assert elements("all_gather", 1006.0, 2, 4) == 504  # 503 elements -> 504 = 4 x 126
    assert elements("reduce_scatter", 800.0, 4, 8) == 200
    assert elements("all_reduce", 1001.0, 2, 4) == 500  # an all-reduce needs no even split
    assert elements("broadcast", 1.0, 4, 4) == 1  # at least one element


def test_a_replay_recorded_as_asked_passes():
    kinds = [_kind(), _kind(op="reduce_scatter", dtype="float32", calls=2)]
    replayed = [{"bytes_replayed": 1008}, {"bytes_replayed": 1000}]
    census = [
        {"op": "all_gather", "group_size": 4, "dtype": "bfloat16", "calls": 3, "bytes": 3024.0},
        {"op": "reduce_scatter", "group_size": 4, "dtype": "float32", "calls": 2, "bytes": 2000.0},
    ]
    assert replay_mismatch(kinds, replayed, census) == ""


def test_a_replay_on_the_wrong_group_or_with_extra_calls_is_reported():
    kinds, replayed = [_kind()], [{"bytes_replayed": 1008}]
    wrong_group = [{"op": "all_gather", "group_size": 2, "dtype": "bfloat16", "calls": 3, "bytes": 3024.0}]
    msg = replay_mismatch(kinds, replayed, wrong_group)
    assert "all_gather(4, bfloat16): asked 3 calls / 3024 B, recorded None" in msg
    assert "('all_gather', 2, 'bfloat16') recorded but not asked" in msg
    extra_call = [{"op": "all_gather", "group_size": 4, "dtype": "bfloat16", "calls": 4, "bytes": 4032.0}]
    assert "recorded [4, 4032.0]" in replay_mismatch(kinds, replayed, extra_call)
