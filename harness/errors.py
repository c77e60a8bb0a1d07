"""The harness's errors: two mean bad input (exit 2), one a backend's fault at run time (exit 1).

Each message is one line naming the key, file or process and what was wrong.
"""

from __future__ import annotations


class ConfigError(ValueError):
    """A bad config value; the message names the key and the value."""


class DatasetError(ValueError):
    """A dataset that cannot be loaded as configured; the message says what to set."""


class BackendError(RuntimeError):
    """An engine or server that would not start, died or answered with an error; the message
    names it and the cause (a failed job, recorded in ``failures.jsonl``)."""


def first_line(exc: BaseException) -> str:
    """``<ExceptionType>: <first line of its message>`` (the type alone without one)."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
