"""The data-set registry: one ``Format`` per on-disk layout that a case can name.

A format is the layout a case's loader reads (ImageNet folders, COCO, ...): a checker that says
what is wrong with a folder (``flagperf_host.checks.<format>``, standard library only, also
run on hosts at preflight by ``flagperf_host.data_check``) and a generator of tiny data in exactly that layout, for CI and the ``cpu`` profiles.
Everything that lists formats (``flagperf-ansible data list``, the CLI's choices) reads this
registry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Format:
    """One on-disk data-set layout.

    Attributes:
        name: what a case names (``imagenet``, ``coco2017``, ...).
        description: one line for ``data list``.
        check: ``check(folder) -> problems`` (one line each; empty when the layout is right).
        generate: ``generate(folder) -> counts`` writes tiny data in the layout under
            ``folder`` (created if missing; deterministic, nothing downloaded) and returns what it
            wrote per part, e.g. ``{"train": 1437, "val": 360}``.
        aliases: other names ``data prepare`` accepts (``digits`` for ``imagenet``).
    """

    name: str
    description: str
    check: Callable[[Path], list[str]]
    generate: Callable[[Path], dict[str, int]]
    aliases: tuple[str, ...] = ()


class UnknownFormat(KeyError, ValueError):
    """No format has this name; the message lists the known ones."""

    def __str__(self) -> str:  # KeyError's would quote the message
        return str(self.args[0])


_FORMATS: dict[str, Format] = {}


def register(data_format: Format, *, replace: bool = False) -> Format:
    """Add ``data_format`` to the registry and return it.

    Raises:
        ValueError: its name or an alias is taken (unless ``replace`` and by the same name).
    """
    taken = {n: f.name for f in _FORMATS.values() for n in (f.name, *f.aliases)}
    for name in (data_format.name, *data_format.aliases):
        if name in taken and not (replace and taken[name] == data_format.name):
            raise ValueError(f"data format name {name!r} is taken by {taken[name]!r}")
    _FORMATS[data_format.name] = data_format
    return data_format


def unregister(name: str) -> None:
    """Remove the format ``name`` (no error when absent)."""
    _FORMATS.pop(name, None)


def formats() -> list[Format]:
    """Every registered format, by name."""
    return [_FORMATS[name] for name in sorted(_FORMATS)]


def names() -> list[str]:
    """Every name and alias ``get`` accepts, sorted."""
    return sorted(n for f in _FORMATS.values() for n in (f.name, *f.aliases))


def get(name: str) -> Format:
    """The format called ``name`` (or with that alias).

    Raises:
        UnknownFormat: no such format (a KeyError and a ValueError).
    """
    for data_format in _FORMATS.values():
        if name == data_format.name or name in data_format.aliases:
            return data_format
    raise UnknownFormat(f"unknown data format {name!r} (known: {', '.join(names())})")
