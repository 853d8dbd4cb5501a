"""Issue #26 finding 11, loading a model from a path: a folder with a non-ASCII name names the
model as written (or the config's own `_name_or_path`); a folder without config.json says so
(not "unknown model ... use a preset"); a missing file's path is printed once."""

from __future__ import annotations

import json

import pytest

from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.presets import load_model, model_argument

TINY = {
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 256,
    "max_position_embeddings": 128,
}


def test_non_ascii_folder_names_the_model_as_written(tmp_path):
    folder = tmp_path / "modèle-ü" / "Llama-ßmall"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(TINY))
    spec = load_model(str(folder))
    assert spec.name == "Llama-ßmall"
    assert model_argument(spec) == str(folder)  # what a printed follow-up command passes


def test_recorded_name_or_path_wins_over_the_folder(tmp_path):
    folder = tmp_path / "checkpoint-500"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(TINY | {"_name_or_path": "meta-llama/Llama-3.2-1B"}))
    assert load_model(str(folder)).name == "Llama-3.2-1B"


def test_a_folder_without_config_json_says_so(tmp_path):
    with pytest.raises(SpecError, match="has no config.json") as e:
        load_model(str(tmp_path))
    assert "use a preset" not in str(e.value)


def test_a_missing_absolute_path_is_printed_once(tmp_path):
    missing = tmp_path / "nothere" / "config.json"
    with pytest.raises(SpecError) as e:
        load_model(str(missing))
    assert str(e.value).count(str(missing)) == 1
