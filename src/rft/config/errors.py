"""The error every config check raises."""


class ConfigError(ValueError):
    """A config value or key that rft refuses, with what to do instead."""
