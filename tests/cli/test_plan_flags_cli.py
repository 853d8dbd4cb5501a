"""Issue 26 finding 11, the plan side: contradicting on/off flags are bad input; the title names
the image tokens that tok/s/dev counts."""

import pytest
from typer.testing import CliRunner

from prism_strategy.cli import app
from prism_strategy.cli.app import contradicting_flags
from prism_strategy.specs.presets import load_model

runner = CliRunner()


@pytest.mark.parametrize("order", [["--compile", "--no-compile"], ["--no-compile", "--compile"]])
def test_compile_and_no_compile_together_are_bad_input(order):
    r = runner.invoke(app, ["plan", "--model", "qwen3-0.6b", "--platform", "aurora", *order])
    assert r.exit_code == 2
    assert r.output.strip().splitlines() == ["error: --compile and --no-compile both given; pass one of them"]


def test_values_after_a_bare_double_dash_are_not_flags():
    assert contradicting_flags(["--x", "--", "--no-x"]) is None
    assert contradicting_flags(["--x", "--no-y"]) is None


def test_the_title_counts_the_image_tokens():
    args = ["plan", "--model", "qwen3-0.6b", "--vision", "siglip2-so400m-patch14-384", "--platform", "aurora"]
    r = runner.invoke(app, args, env={"COLUMNS": "100"})
    assert r.exit_code == 0, r.output
    images = load_model("siglip2-so400m-patch14-384").num_patches  # one image per sample
    assert f"seq 1024 text + {images} image tokens" in " ".join(r.stdout.split())
