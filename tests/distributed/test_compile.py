"""torch.compile of checkpointed blocks under FSDP2 (2 ranks): trains and matches one process.
Costs ~40 s cold (inductor builds C++ kernels)."""

from __future__ import annotations

import pytest
from _harness import run_torchrun

pytestmark = pytest.mark.distributed


def test_compiled_checkpointed_fsdp_matches_single_process(tmp_path):
    results, _ = run_torchrun(["compile", str(tmp_path)], nproc=2, out=tmp_path)
    r = results[0]["fsdp_full_shard/compile_ckpt1"]
    assert r["keys_match"] and r["max_diff"] <= 1e-5
    assert "compile on" in r["describe"] and "checkpointing on 2 (every 1)" in r["describe"]
