"""The error every config check raises."""

from rft.errors import RftError


class ConfigError(RftError, ValueError):
    """A config value or key that rft refuses, with what to do instead."""
