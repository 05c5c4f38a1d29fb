"""What every case's entry point does first: read its arguments and configuration, and send
its output to ``<output_dir>/rank<R>.out.log``."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any, Mapping

import yaml


def parse_case_args(description: str) -> argparse.Namespace:
    """``--config FILE --output_dir DIR [--data_dir DIR]`` as the launch role passes them
    (and ``--case DIR``, which ``driver.run`` reads)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--case", type=Path, help="the case folder (python -m driver.run)")
    parser.add_argument("--config", required=True, type=Path,
                        help="effective configuration (YAML) written by the launch role")
    parser.add_argument("--output_dir", required=True, type=Path,
                        help="this node's output folder for the round")
    parser.add_argument("--data_dir", default="", help="the data set's root folder")
    return parser.parse_args()


def load_config(path: Path) -> dict[str, Any]:
    """The effective hyper-parameters: a YAML mapping (never executed as code)."""
    with open(path, encoding="utf-8") as handle:
        config = yaml.safe_load(handle) or {}
    if not isinstance(config, dict):
        raise SystemExit(f"{path}: expected a mapping of hyper-parameters")
    return config


def setting(config: Mapping[str, Any], key: str, default: Any) -> Any:
    """``config[key]``, or ``default`` where the key is missing or null (a YAML ``~`` means
    "the case's default")."""
    value = config.get(key)
    return default if value is None else value


def redirect_rank_output(output_dir: Path, rank: int) -> Path:
    """Point this process's stdout and stderr at ``<output_dir>/rank<R>.out.log``.

    Both file descriptors are redirected, so warnings and tracebacks from native code land in
    the same per-rank log that the collect role fetches and the parser reads.
    """
    output_dir.mkdir(parents=True, exist_ok=True)
    path = output_dir / f"rank{rank}.out.log"
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stdout = os.fdopen(1, "w", buffering=1, closefd=False)
    sys.stderr = os.fdopen(2, "w", buffering=1, closefd=False)
    return path
