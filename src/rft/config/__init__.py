"""Config: one typed schema (schema.py), loading with overrides (load.py), validation (validate.py)."""

from rft.config.load import ConfigError, load_config, load_dpo_config, load_sft_config, to_dict, to_yaml
from rft.config.schema import RFTConfig

__all__ = ["ConfigError", "RFTConfig", "load_config", "load_dpo_config", "load_sft_config", "to_dict", "to_yaml"]
