"""A config.json in a folder whose name says nothing (hf/, checkpoint/) is labelled from the config
itself, not "hf" (issue 36): the config's model_type and shape."""

import json
import shutil
from pathlib import Path

from prism_strategy.specs.presets import load_model

HF = Path(__file__).parents[2] / "fixtures" / "hf"


def _a_config() -> Path:
    return next(p for p in sorted(HF.rglob("config.json")) if "_name_or_path" not in json.loads(p.read_text()))


def test_a_generic_folder_gives_way_to_the_configs_own_shape(tmp_path):
    src = _a_config()
    cfg = json.loads(src.read_text())
    text = cfg.get("text_config", cfg)
    (tmp_path / "hf").mkdir()
    shutil.copy(src, tmp_path / "hf" / "config.json")
    spec = load_model(str(tmp_path / "hf" / "config.json"))
    assert spec.name == f"{text['model_type']}-{text['num_hidden_layers']}x{text['hidden_size']}"


def test_a_named_folder_still_names_the_model(tmp_path):
    (tmp_path / "Llama-3.1-8B").mkdir()
    shutil.copy(_a_config(), tmp_path / "Llama-3.1-8B" / "config.json")
    assert load_model(str(tmp_path / "Llama-3.1-8B" / "config.json")).name == "Llama-3.1-8B"
