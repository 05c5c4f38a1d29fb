"""Roles keep meta/argument_specs.yml in step with defaults/main.yml, and pass ansible-lint."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
ROLES = sorted(p.parent.parent for p in ROOT.glob("roles/*/defaults/main.yml"))


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_argument_specs_match_defaults(role):
    defaults = yaml.safe_load((role / "defaults/main.yml").read_text()) or {}
    specs = yaml.safe_load((role / "meta/argument_specs.yml").read_text())["argument_specs"]
    documented = {}
    for entry in specs.values():
        documented.update(entry.get("options") or {})
    assert set(documented) == set(defaults), role.name
    for name, option in documented.items():
        assert option.get("description"), f"{role.name}: {name} has no description"
        assert option.get("default") == defaults[name], f"{role.name}: {name} default differs"
        assert name.startswith(f"{role.name}_"), f"{role.name}: {name} is not role-prefixed"


def test_ansible_lint_production_profile():
    lint = shutil.which("ansible-lint", path=str(Path(sys.executable).parent)) or shutil.which("ansible-lint")
    assert lint, "ansible-lint is a test dependency (pip install -e '.[test]')"
    done = subprocess.run([lint, "--offline", "--nocolor"], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
