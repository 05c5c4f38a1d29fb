"""Load the project's plugin modules the way Ansible does (by file path)."""

import importlib.util
from pathlib import Path

PLUGIN = Path(__file__).resolve().parents[1] / "plugins" / "filter" / "flagperf.py"


def load_filters() -> dict:
    spec = importlib.util.spec_from_file_location("flagperf_filters", PLUGIN)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.FilterModule().filters()


def load_plugin(relative: str, name: str = "plugin_under_test"):
    """The plugin module at ``relative`` (e.g. ``plugins/action/node_wait.py``), loaded by
    file as Ansible loads it."""
    path = Path(__file__).resolve().parents[1] / relative
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
