"""Config: the typed schemas (schema.py, sft_schema.py, dpo_schema.py, offline_schema.py), reading YAML with overrides
(load.py), the check registry (checks.py) and config's own checks (validate.py). config/ sits below the code it
configures: it imports none of it. Loading and checking a config: `rft.trainer.configure`."""

from rft.config.errors import ConfigError
from rft.config.load import to_dict, to_yaml
from rft.config.schema import RFTConfig

__all__ = ["ConfigError", "RFTConfig", "to_dict", "to_yaml"]
