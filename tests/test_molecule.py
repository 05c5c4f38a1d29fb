"""`molecule test` for each scenario under molecule/: the roles that run on a plain host, on a
container of the local Docker engine, with molecule's idempotence pass and a verify that reads
their results back (about a minute each on an idle 2-core machine)."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = sorted(p.parent.name for p in ROOT.glob("molecule/*/molecule.yml"))
STEPS = ("create", "prepare", "converge", "idempotence", "verify", "destroy")


@pytest.fixture(scope="module")
def molecule(base_image):
    """The molecule executable, once the Docker engine and the base image are there."""
    found = shutil.which("molecule", path=str(Path(sys.executable).parent)) or shutil.which("molecule")
    assert found, "molecule is a test dependency (pip install -e '.[test]')"
    return found


def test_there_is_a_scenario():
    assert "default" in SCENARIOS  # an empty glob would parametrize nothing


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_molecule_scenario(molecule, scenario, tmp_path):
    instance_id = f"{os.getpid()}-{scenario}"
    env = dict(os.environ)
    env.update({
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        # Own state and instance name: other checkouts may run molecule on the same engine.
        "MOLECULE_EPHEMERAL_DIRECTORY": str(tmp_path / "molecule"),
        "FLAGPERF_MOLECULE_ID": instance_id,
        # The scenarios live in molecule/ (galaxy.yml would otherwise send molecule to extensions/).
        "MOLECULE_GLOB": "molecule/*/molecule.yml",
        "NO_COLOR": "1", "ANSIBLE_NOCOLOR": "1", "PY_COLORS": "0",
    })
    done = subprocess.run([molecule, "test", "--scenario-name", scenario], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=900)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-6000:]
    for step in STEPS:  # every step ran its playbook: none missing, none skipped
        assert re.search(rf"{scenario} (?:➜|>) {step}: Executed: Successful", output), step
    left = subprocess.run(["docker", "ps", "-a", "--filter", f"name=flagperf-molecule-{instance_id}",
                           "--format", "{{.Names}}"], capture_output=True, text=True, check=True)
    assert left.stdout.split() == []
