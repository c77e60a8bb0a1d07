"""The two errors that mean bad input; each message names the key or file and the value."""

from __future__ import annotations


class ConfigError(ValueError):
    """A bad config value; the message names the key and the value."""


class DatasetError(ValueError):
    """A dataset that cannot be loaded as configured; the message says what to set."""
