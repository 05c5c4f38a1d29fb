"""The one error type users see: a single line naming the file and key at fault."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable

from pydantic import ValidationError


class ConfigError(Exception):
    """Bad input, reported as ``<file>: <key>: <message>`` before any host is touched.

    Args:
        message: what is wrong and, where it helps, what is allowed.
        source: the file (or "command line") the value came from; may be empty.
        key: the dotted key path at fault, e.g. ``flagperf_cases[0].nnodes``; may be empty.
    """

    def __init__(self, message: str, source: str = "", key: str = "") -> None:
        self.message = message
        self.source = source
        self.key = key
        super().__init__(str(self))

    def __str__(self) -> str:
        parts = [p for p in (self.source, self.key) if p]
        prefix = ": ".join(parts)
        text = f"{prefix}: {self.message}" if prefix else self.message
        # One line, whatever the input held (a key or file name may carry a line break).
        return text.replace("\r", "\\r").replace("\n", "\\n")


def format_loc(prefix: str, loc: tuple) -> str:
    """``("flagperf_cases", 0, "nnodes")`` -> ``flagperf_cases[0].nnodes`` under ``prefix``."""
    key = prefix
    for part in loc:
        if isinstance(part, int):
            key += f"[{part}]"
        else:
            key = f"{key}.{part}" if key else str(part)
    return key


@contextmanager
def raise_first(source: str | Callable[[str], str], key: str = ""):
    """Turn a pydantic ``ValidationError`` into a ``ConfigError`` for its first error.

    ``source`` is the file, or a function from the top-level key at fault to its file.
    """
    try:
        yield
    except ValidationError as err:
        first = err.errors()[0]
        message = first["msg"]
        if first["type"] == "extra_forbidden":
            message = "unknown key"
        elif first["type"] == "missing":
            message = "required key is missing"
        elif message.startswith("Value error, "):
            message = message[len("Value error, "):]
        loc = tuple(first["loc"])
        if callable(source):
            source = source(str(loc[0]) if loc else "")
        raise ConfigError(message, source, format_loc(key, loc)) from None
