"""Published measurements as data: the shipped file loads, every record builds a scenario, and a
malformed file is refused with one SpecError line."""

from __future__ import annotations

import pytest

from prism_strategy.bench.fit.published import load_published, published_names
from prism_strategy.flags import scenario_from_flags
from prism_strategy.specs.errors import SpecError

GOOD = """
platform = "aurora"
[sources]
A = "a paper"
[[record]]
id = "X1"
section = "A"
scenario = { model = "tiny-llama", strategy = "ddp", nodes = 1, ranks_per_node = 2, micro_batch = 2, grad_accum = 3, seq_len = 64 }
measured = { samples_per_s = [10.0, 14.0] }
"""


def _write(tmp_path, text):
    p = tmp_path / "m.toml"
    p.write_text(text)
    return str(p)


def test_shipped_records_build_scenarios_with_their_source():
    assert "aurora-prism" in published_names()
    records = load_published("aurora-prism")
    ids = [r.id for r in records]
    assert {"A1", "A2", "B1", "C3", "D1", "E1", "E2"} <= set(ids) and len(ids) == len(set(ids))
    for r in records:
        sc = scenario_from_flags(**r.scenario_kwargs())
        assert sc.layout.world == r.scenario.world and r.source
    a1 = next(r for r in records if r.id == "A1")
    assert a1.step_time_s() == 2.50 and a1.measured.host_s["AccumulateGrad"] == 1.49
    a3 = next(r for r in records if r.id == "A3-ddp")
    assert "micro_batch" in a3.assumed  # the table did not record it: the record says so


def test_step_time_from_samples_range_uses_midpoint_and_accumulation(tmp_path):
    (r,) = load_published(_write(tmp_path, GOOD))
    assert r.scenario.samples_per_step == 12
    assert r.step_time_s() == pytest.approx(12 / 12.0)
    assert r.scenario_kwargs()["global_batch"] == 12


@pytest.mark.parametrize(
    "bad, words",
    [
        (GOOD.replace('"tiny-llama"', '"no-such-model"'), "unknown model"),
        (GOOD.replace('"ddp"', '"ddpp"'), "unknown strategy"),
        (GOOD.replace('"ddp"', '"none"'), "needs one rank"),
        (GOOD.replace("micro_batch = 2", 'micro_batch = "two"'), "micro_batch"),
        (GOOD.replace("samples_per_s = [10.0, 14.0]", "oom = true"), "measures nothing"),
        (GOOD.replace('section = "A"', 'section = "Z"'), "no source"),
        (GOOD + GOOD.split("[[record]]")[1].join(["[[record]]", ""]), "duplicate id"),
        ("platform = 'aurora'\n", "at least one [[record]]"),
        ("platform = [", "not valid TOML"),
    ],
)
def test_malformed_file_is_one_spec_error(tmp_path, bad, words):
    with pytest.raises(SpecError, match=words.replace("[", r"\[").replace("]", r"\]")):
        load_published(_write(tmp_path, bad))


def test_unknown_name_lists_the_shipped_ones():
    with pytest.raises(SpecError, match="aurora-prism"):
        load_published("nope")
