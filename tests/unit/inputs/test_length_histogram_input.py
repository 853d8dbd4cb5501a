"""`plan --length-histogram`: a good file prices the slowest rank (its provenance says so); a bad
one (malformed, empty, missing, a length beyond --seq-len) and a negative --mean-seq-len exit 2
with one line naming the problem and no traceback (the project's rule for bad input)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from prism_strategy.cli import app
from prism_strategy.inputs.length_histogram import read_length_histogram

ARGS = ["plan", "--model", "qwen3-0.6b", "--platform", "dgx-h100", "--nodes", "64", "--seq-len", "4096"]
ARGS += ["--micro-batch", "1", "--ckpt-freq", "1"]


def test_a_header_comments_and_commas_are_read(tmp_path):
    f = tmp_path / "h.csv"
    f.write_text("length,count\n# tokenized text\n128, 30\n1024 10  # long tail\n")
    assert read_length_histogram(str(f)) == ((128, 30.0), (1024, 10.0))


def test_a_histogram_prices_the_slowest_rank(tmp_path):
    f = tmp_path / "h.txt"
    f.write_text("256 70\n1024 20\n4096 10\n")
    r = CliRunner().invoke(app, [*ARGS, "--length-histogram", str(f), "--json"])
    assert r.exit_code == 0, r.output
    o = next(x for x in json.loads(r.stdout)["options"] if x["strategy"] == "fsdp_full_shard")
    assert "slowest rank of 512" in o["provenance"]["length_stragglers"]


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("128 5\n256 x\n", ":2: '256 x' is not two numbers"),
        ("", "holds no samples"),
        ("128 0\n", "holds no samples"),
        ("128 5 7\n", "is not two numbers"),
        ("12.5 3\n", "positive whole number"),
        ("128 -1\n", "must be >= 0"),
        ("8192 3\n", "lengths must be 1..--seq-len 4096"),
    ],
)
def test_a_bad_histogram_exits_2_with_one_line(tmp_path, text, words):
    f = tmp_path / "h.txt"
    f.write_text(text)
    r = CliRunner().invoke(app, [*ARGS, "--length-histogram", str(f)])
    assert r.exit_code == 2 and words in r.output and len(r.output.strip().splitlines()) == 1, r.output


def test_a_missing_file_and_a_negative_mean_exit_2_with_one_line(tmp_path):
    for extra, words in (
        (["--length-histogram", str(tmp_path / "nope.txt")], "cannot read it"),
        (["--mean-seq-len", "-5"], "--mean-seq-len must be >= 1"),
    ):
        r = CliRunner().invoke(app, [*ARGS, *extra])
        assert r.exit_code == 2 and words in r.output and len(r.output.strip().splitlines()) == 1, r.output
