"""What a test needs from the machine and does not find: a skip here, a failure under CI."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def unavailable(reason: str) -> NoReturn:
    """Skip the calling test for ``reason`` (something this machine lacks, with how to get it);
    under CI (``$CI`` set), which must provide everything the tests need, fail with it."""
    if os.environ.get("CI"):
        pytest.fail(f"CI must provide what this test needs: {reason}")
    pytest.skip(reason)


def need_module(name: str, how: str):
    """The module ``name``, imported; else ``unavailable`` with ``how`` to get it."""
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError as error:
        unavailable(f"no {name} here ({error}); {how}")
