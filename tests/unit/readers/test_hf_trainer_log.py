"""analyze and results import read Hugging Face Trainer logs (issue 36): the banner's micro-batch,
accumulation and world size, tqdm's seconds per step as windows, and the verdicts healthy / an
abrupt end at ^C / a slowdown. Truth: the generator's parameters (tests/fixtures/logs/
make_fixtures.py hf_log: 1.00 s/it, 1.7 s/it from step 101, ^C after step 120; micro-batch 8 x
accumulation 4 x 2 ranks = 64) and transformers' own end record (train_runtime)."""

from pathlib import Path

import pytest

from prism_strategy.diagnose.analyze import analyze
from prism_strategy.readers import hf_trainer, reader_for
from prism_strategy.specs.errors import SpecError

LOGS = Path(__file__).resolve().parents[2] / "fixtures" / "logs"


def _log(case: str) -> Path:
    return LOGS / f"hf_{case}" / "train.log"


def test_the_banner_gives_batch_accumulation_and_ranks_and_tqdm_the_step_times():
    path = _log("healthy")
    assert reader_for(path) is hf_trainer
    log = hf_trainer.read(path)
    assert (log.scenario["micro_batch"], log.scenario["grad_accum"], log.scenario["world_size"]) == (8, 4, 2)
    assert log.windows[-1].last_step == 200 and sum(w.steps for w in log.windows) == 200
    assert all(w.step_s == pytest.approx(1.0, rel=0.02) for w in log.windows)
    assert log.events == []


def test_verdicts_healthy_ctrl_c_and_slowdown():
    assert analyze(_log("healthy")).verdict == "healthy"
    stopped = analyze(_log("ctrl_c"))
    (ev,) = stopped.events
    assert (stopped.verdict, ev.step) == ("incomplete", 120) and "`^C`" in ev.message
    slow = analyze(_log("slowdown"))
    (ev,) = slow.events
    assert (slow.verdict, ev.step) == ("slowdown", 101)
    assert ev.evidence["ratio"] == pytest.approx(1.7, rel=0.03)


def test_a_banner_whose_total_batch_does_not_split_is_refused(tmp_path):
    text = _log("healthy").read_text().replace("accumulation) = 64", "accumulation) = 60")
    path = tmp_path / "train.log"
    path.write_text(text)
    with pytest.raises(SpecError, match="total train batch 60 is not micro-batch 8 x accumulation 4"):
        hf_trainer.read(path)
