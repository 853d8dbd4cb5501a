"""A framework's model names and the presets of the same architecture (data/framework_models.toml),
both ways: the readers map torchtitan's name + flavor to a preset, the writers back."""

from __future__ import annotations

from functools import cache
from importlib import resources

import tomllib


@cache
def framework_models() -> dict[str, dict[str, dict[str, str]]]:
    return tomllib.loads((resources.files("prism_strategy") / "data" / "framework_models.toml").read_text())


def preset_for(framework: str, name: str, flavor: str) -> str | None:
    return framework_models().get(framework, {}).get(name, {}).get(flavor)


def model_for(framework: str, preset: str) -> tuple[str, str] | None:
    """(name, flavor) of the framework's model with the preset's architecture, if it has one."""
    for name, flavors in framework_models().get(framework, {}).items():
        for flavor, p in flavors.items():
            if p == preset:
                return name, flavor
    return None
