"""A vendor's monitor plugin, ``vendors/<vendor>/monitor.py``: a Python file with
``device_info() -> dict`` and ``sample() -> list[dict]`` (``vendors/README.md``), loaded by path
by the monitor (its device rows) and by ``sys_info`` (the host's accelerators).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path


def load_plugin(path: str):
    """The vendor plugin module at ``path`` (a file with ``device_info`` and ``sample``).

    Raises:
        RuntimeError: the file is missing or lacks the interface; whatever importing it raises.
    """
    spec = importlib.util.spec_from_file_location("flagperf_vendor_monitor", path)
    if spec is None or spec.loader is None or not Path(path).is_file():
        raise RuntimeError(f"no vendor plugin at {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for name in ("device_info", "sample"):
        if not callable(getattr(module, name, None)):
            raise RuntimeError(f"{path} has no {name}()")
    return module
