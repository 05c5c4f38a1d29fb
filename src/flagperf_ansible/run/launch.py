"""Names for launching a round: vendor image tags, framework environment names and container
names.

The command line and environment of a node come from its launcher (``flagperf_ansible.config.launchers``).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Mapping


def image_tag(project: Path, vendor: str, framework: str, inputs: Mapping[str, Any]) -> str:
    """Content hash of an image's build inputs: every file under
    ``vendors/<vendor>/docker_image/<framework>/`` (path and bytes) and ``inputs`` (base image,
    wheel names, pip settings) as JSON. 16 hex digits of SHA-256: a changed input gives a new
    tag (a rebuild), unchanged inputs the same tag (no rebuild).

    Raises:
        FileNotFoundError: the vendor has no image definition for the framework.
    """
    folder = project / "vendors" / vendor / "docker_image" / framework
    if not (folder / "Dockerfile").is_file():
        raise FileNotFoundError(f"{folder.relative_to(project)}/Dockerfile: no image definition")
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        digest.update(str(path.relative_to(folder)).encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    digest.update(json.dumps(dict(inputs), sort_keys=True, default=str).encode())
    return digest.hexdigest()[:16]


def framework_env_name(project: Path, vendor: str, framework: str, extra: list[str]) -> str:
    """``<vendor>-<framework>-<hash>``: the folder name of a framework's virtual environment on
    the hosts (container runtime none, roles/framework_env), 12 hex digits of SHA-256 over
    ``vendors/<vendor>/docker_image/<framework>/requirements.txt`` and the cases' ``extra``
    requirement lines: changed requirements name a new environment, which prepare makes.

    Raises:
        FileNotFoundError: the vendor has no requirements file for the framework.
    """
    path = project / "vendors" / vendor / "docker_image" / framework / "requirements.txt"
    if not path.is_file():
        raise FileNotFoundError(f"{path.relative_to(project)}: no requirements for the environment")
    digest = hashlib.sha256(path.read_bytes() + b"\0" + "\n".join(sorted(extra)).encode())
    return f"{vendor}-{framework}-{digest.hexdigest()[:12]}"


def container_name(run_id: str, case_id: str, round_no: int, noderank: int) -> str:
    """``flagperf-<run_id>-<case_id>-r<k>-n<i>``: unique per run, round and node."""
    return f"flagperf-{run_id}-{case_id}-r{round_no}-n{noderank}"
