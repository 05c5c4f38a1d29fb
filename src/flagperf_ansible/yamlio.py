"""Reading YAML configuration: safe loading only, errors as one line naming the file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from flagperf_ansible.errors import ConfigError


def read_yaml(path: Path, project: Path | None = None) -> Any:
    """Load a YAML file, raising ``ConfigError`` naming the file on a syntax error."""
    shown = str(path.relative_to(project)) if project and path.is_relative_to(project) else str(path)
    try:
        with open(path, encoding="utf-8") as handle:
            return yaml.safe_load(handle)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark else ""
        problem = getattr(err, "problem", None) or "invalid YAML"
        raise ConfigError(f"{where}{problem}", shown) from None
    except OSError as err:
        raise ConfigError(err.strerror or str(err), shown) from None
