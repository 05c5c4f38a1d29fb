""".ci/run and the README agree: the system packages the tests need, and the test command."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def ci_packages() -> set[str]:
    """The Debian packages ``.ci/run`` installs for the tests (its ``packages`` array)."""
    script = (ROOT / ".ci/run").read_text()
    found = re.search(r"^packages=\((.*?)\)", script, re.MULTILINE | re.DOTALL)
    assert found, "no packages=(...) in .ci/run"
    return set(found.group(1).split())


def readme_packages() -> set[str]:
    """The packages the README's Quickstart names for the tiers beyond ``fast``."""
    readme = (ROOT / "README.md").read_text()
    found = re.search(r"The tiers beyond `fast` need root and Debian's (.*?), and a running",
                      readme, re.DOTALL)
    assert found, "the README's Quickstart no longer lists the tests' packages"
    return set(re.findall(r"`([a-z0-9.+-]+)`", found.group(1)))


def test_the_readme_lists_the_packages_ci_installs():
    assert readme_packages() == ci_packages()


def test_ci_runs_the_readme_test_command_and_explains_itself():
    script = (ROOT / ".ci/run").read_text()
    (command,) = [line for line in script.splitlines() if line.rstrip().endswith("make test")]
    # Stopped as Ctrl-C stops it before CI's limit, so the durations are still printed.
    assert command.startswith("timeout -s INT ")
    assert "-rs" in script and "--junitxml=" in script
    assert "make test    # installs into .venv and runs the test suite" in (
        ROOT / "README.md").read_text()
