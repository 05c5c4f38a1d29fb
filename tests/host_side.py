"""Host-side entry modules run as a host runs them: from the ``flagperf_host`` archive (the
bytes ``piped_script`` ships), with a Python that has no site packages."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from flagperf_ansible.run import host_archive, host_steps

# A host's Python, not the venv's (which another user may not be able to run).
HOST_PYTHON = shutil.which("python3", path="/usr/bin:/bin")
# Readable by every user a test runs a check as (pytest's tmp_path is under a root-only folder).
_FOLDER = Path(tempfile.gettempdir()) / "flagperf-host-archive"


def archive() -> Path:
    """The archive's file, written once per content into a folder every user can read."""
    _FOLDER.mkdir(mode=0o755, exist_ok=True)
    _FOLDER.chmod(0o755)
    return host_archive.write(_FOLDER)


def command(module: str, *argv: str, python: str | None = None) -> list[str]:
    """``python -m flagperf_host.<module> ARGV...``: run it with ``env(...)``'s environment."""
    return [python or HOST_PYTHON or "python3", "-m", f"flagperf_host.{module}", *argv]


def env(base: dict[str, str] | None = None) -> dict[str, str]:
    """``base`` (default: PATH=/usr/bin:/bin only) with the archive on ``PYTHONPATH``."""
    return {**(base if base is not None else {"PATH": "/usr/bin:/bin"}), "PYTHONPATH": str(archive())}


def run_step(module: str, *argv: str, python: str | None = None, env: dict[str, str] | None = None,
             timeout: float = 60) -> subprocess.CompletedProcess:
    """Run ``flagperf_host.<module> ARGV...`` exactly as ``piped_script`` runs a step on a host:
    the runner's shell command, the archive and the step's words on its standard input
    (``flagperf_ansible.run.host_steps``); text output."""
    command, data = host_steps.exchange(python or sys.executable, [host_steps.Step(
        module=f"flagperf_host.{module}", argv=list(argv))])
    done = subprocess.run(command, shell=True, input=data, capture_output=True, env=env, timeout=timeout)
    return subprocess.CompletedProcess(done.args, done.returncode, done.stdout.decode("utf-8", "replace"),
                                       done.stderr.decode("utf-8", "replace"))
