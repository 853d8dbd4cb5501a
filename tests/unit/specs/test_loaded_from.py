"""A printed follow-up command names what loads the same spec again (specs/presets.py
platform_argument, model_argument), whatever else of the same name this process loaded."""

from prism_strategy.specs.presets import load_model, load_platform, model_argument, platform_argument


def test_a_user_file_named_like_a_preset_does_not_stand_for_the_preset(tmp_path):
    """Found by make test: a unit test loaded a user copy named dgx-h100, and a later emitted bench
    job (same process) recorded that file, not the preset, as its platform."""
    preset = load_platform("dgx-h100")
    copy = tmp_path / "mine.toml"
    copy.write_text('name = "dgx-h100"\nbase = "dgx-h100"\n[hardware]\ndevices_per_node = 4\n')
    mine = load_platform(str(copy))
    assert mine.name == preset.name and mine != preset
    assert load_platform("dgx-h100") is preset  # the cached preset, loaded again after the copy
    assert platform_argument(preset) == "dgx-h100"
    assert platform_argument(mine) == str(copy)


def test_a_model_file_named_like_a_preset_does_not_stand_for_the_preset(tmp_path):
    preset = load_model("tiny-llama")
    copy = tmp_path / "tiny.toml"
    copy.write_text(_with_layers(preset, 3))
    mine = load_model(str(copy))
    assert mine.name == preset.name and mine != preset
    assert load_model("tiny-llama") is preset
    assert model_argument(preset) == "tiny-llama"
    assert model_argument(mine) == str(copy)


def _with_layers(spec, layers: int) -> str:
    """The preset's own TOML with another block count."""
    from prism_strategy.specs.presets import DATA

    text = (DATA / "models" / f"{spec.name}.toml").read_text()
    return "\n".join(f"layers = {layers}" if line.startswith("layers =") else line for line in text.splitlines())
