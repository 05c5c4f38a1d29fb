"""Kept for earlier callers: the data-set formats and their tiny data live in
``flagperf_ansible.datasets`` (``digits`` is the tiny data of its ``imagenet`` format).
"""

from __future__ import annotations

from pathlib import Path

from flagperf_ansible import datasets
from flagperf_ansible.datasets.imagenet import generate as _generate_digits

DATASETS = tuple(datasets.names())


def prepare_digits(target: Path) -> dict[str, int]:
    """Write the digits data set in the ImageNet folder layout under ``target`` and return
    image counts per split (``{"train": 1437, "val": 360}``); see ``datasets.imagenet``.

    Raises:
        OSError: ``target`` cannot be written.
    """
    return _generate_digits(Path(target))


def prepare(name: str, target: Path) -> dict[str, int]:
    """Write tiny data of format ``name`` (or an alias such as ``digits``) under ``target``.

    Raises:
        ValueError: an unknown name (``datasets.UnknownFormat``).
    """
    return datasets.prepare(name, target)
