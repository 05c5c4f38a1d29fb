"""Where the project's own trees are: benchmarks/, vendors/, roles/, playbooks/."""

from __future__ import annotations

import os
from pathlib import Path


def project_dir() -> Path:
    """The checkout (or installed tree) holding ``site.yml``, ``benchmarks/`` and ``vendors/``.

    ``FLAGPERF_PROJECT_DIR`` overrides; otherwise the directory two levels above this package
    (``src/flagperf_ansible`` in a checkout).

    Raises:
        FileNotFoundError: no ``site.yml`` there.
    """
    root = Path(os.environ.get("FLAGPERF_PROJECT_DIR") or Path(__file__).resolve().parents[2])
    if not (root / "site.yml").is_file():
        raise FileNotFoundError(
            f"{root} holds no site.yml; set FLAGPERF_PROJECT_DIR to the flagperf-ansible checkout"
        )
    return root
