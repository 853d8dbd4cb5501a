"""PRISM [TIMING] logs printed by every rank under `mpiexec --label` / `srun --label` (each line
`N: `): the reader keeps the ranks apart, so analyze names the slow data rank (issue 36: one rank
900 ms in data, the others ~880 ms longer in backward, read "healthy" when the ranks were merged).
Truth: the generator's parameters (tests/fixtures/logs/make_fixtures.py data_straggler_log)."""

from pathlib import Path

from prism_strategy.diagnose.analyze import analyze
from prism_strategy.readers import prism

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "logs" / "prism_data_straggler" / "train.log"


def test_a_label_prefix_names_the_rank():
    t = prism.parse_timing("3:   [TIMING] Data: 0.010s | Fwd: 0.300s | Bwd: 1.882s | Opt: 0.090s", Path("x"), 1)
    assert t is not None and t.rank == 3
    unlabelled = prism.parse_timing("  [TIMING] Data: 0.010s | Fwd: 0.300s | Bwd: 1.882s | Opt: 0.090s", Path("x"), 1)
    assert unlabelled is not None and unlabelled.rank is None
    clock = prism.parse_timing("12:30:01 [TIMING] Data: 0.010s | Fwd: 0.3s | Bwd: 1.8s | Opt: 0.09s", Path("x"), 1)
    assert clock is not None and clock.rank is None  # a time of day is no label


def test_every_labelled_rank_gets_its_own_records():
    log = prism.read(FIXTURE)
    assert sorted({r.rank for r in log.records}) == [0, 1, 2, 3]


def test_analyze_names_the_slow_data_rank_and_its_loader():
    v = analyze(FIXTURE)
    assert v.verdict == "straggler"
    (ev,) = [e for e in v.events if e.kind == "straggler"]
    assert tuple(ev.ranks) == (1,) and "data loader" in ev.message
    # the others wait in backward what rank 1 spends more in data: 1.88 s vs 1.00 s (generator)
    assert "wait least in backward (1.00 s vs 1.88 s" in ev.message


def test_the_same_log_without_labels_says_its_ranks_were_merged(tmp_path):
    """Without the `N: ` labels four ranks' lines cannot be told apart: the reader says so rather
    than let a merged series read as one healthy rank."""
    path = tmp_path / "train.log"
    path.write_text("".join(line.split(": ", 1)[1] for line in FIXTURE.read_text().splitlines(keepends=True)))
    log = prism.read(path)
    assert {r.rank for r in log.records} == {0}
    (note,) = log.skipped
    assert "no rank label" in note and "--label" in note
    assert prism.read(FIXTURE).skipped == []
