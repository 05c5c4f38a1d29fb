"""Load the project's filter plugin module the way Ansible does (by file path)."""

import importlib.util
from pathlib import Path

PLUGIN = Path(__file__).resolve().parents[1] / "plugins" / "filter" / "flagperf.py"


def load_filters() -> dict:
    spec = importlib.util.spec_from_file_location("flagperf_filters", PLUGIN)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.FilterModule().filters()
