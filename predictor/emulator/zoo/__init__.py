"""Model zoo: every training workload is a ModelConfig with a stable config_id (see config.py)."""

from predictor.emulator.zoo.config import ModelBuildError, ModelConfig, Workload
from predictor.emulator.zoo.registry import ZOOS, build, check, make_optimizer, zoo_configs

__all__ = ["ZOOS", "ModelBuildError", "ModelConfig", "Workload", "build", "check", "make_optimizer", "zoo_configs"]
