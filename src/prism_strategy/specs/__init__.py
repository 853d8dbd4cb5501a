from prism_strategy.specs.cluster import Layout, PlatformSpec
from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.model import MultimodalSpec, ProjectorSpec, TransformerSpec
from prism_strategy.specs.presets import load_model, load_platform, model_names, platform_names
from prism_strategy.specs.training import TrainingSpec

__all__ = [
    "Layout",
    "PlatformSpec",
    "SpecError",
    "MultimodalSpec",
    "ProjectorSpec",
    "TransformerSpec",
    "TrainingSpec",
    "load_model",
    "load_platform",
    "model_names",
    "platform_names",
]
