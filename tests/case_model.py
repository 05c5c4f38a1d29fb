"""A case's ``model.py`` for tests: every case has one, so each is imported under a name of its
own (``case_model_<model>``), never as ``model``."""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


@functools.cache
def case_model(model: str, framework: str = "pytorch") -> ModuleType:
    """``benchmarks/<model>/<framework>/model.py``, imported once."""
    path = ROOT / "benchmarks" / model / framework / "model.py"
    spec = importlib.util.spec_from_file_location(f"case_model_{model}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
