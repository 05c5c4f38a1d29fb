"""Shared fixtures: the checkout, a scratch copy of it for config-layering tests, digits data."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests"))

# torch's dynamo refuses to load once ansible-core has patched sys.intern (its SysInternPatch is
# not a function), and the optimizers load dynamo on first use: load it before any test module
# imports ansible, so that the trainer tests may run in the same process as the playbook tests.
try:
    import torch._dynamo  # noqa: F401
except ImportError:       # a controller-only environment: no torch, no trainer tests
    pass


@pytest.fixture(scope="session")
def project() -> Path:
    return ROOT


@pytest.fixture
def scratch_project(tmp_path: Path) -> Path:
    """A copy of the parts of the checkout that validation reads, free to edit."""
    target = tmp_path / "project"
    for part in ("benchmarks", "vendors", "roles/flagperf", "inventories/local"):
        shutil.copytree(ROOT / part, target / part,
                        ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "site.yml", target / "site.yml")
    return target


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Two loopback sshd hosts with an inventory (tests/loopback_cluster.py), one set per test
    module; skipped where they cannot run, a failure in CI (which must provide them)."""
    import loopback_cluster

    running = loopback_cluster.start_for_test(tmp_path_factory.mktemp("cluster"), count=2)
    yield running
    running.stop()


@pytest.fixture(scope="session")
def digits_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The digits data set in the ImageNet folder layout (written once per session)."""
    from flagperf_ansible.datasets.imagenet import generate as prepare_digits

    target = tmp_path_factory.mktemp("data") / "digits"
    prepare_digits(target)
    return target


#: Where the tests and inventories/local (flagperf_workdir /var/tmp/flagperf) keep the frameworks'
#: environments: made once per machine, shared by both.
FRAMEWORK_ENVS = Path("/var/tmp/flagperf/envs")


@pytest.fixture(scope="session")
def framework_python():
    """``framework_python(framework) -> Path``: a Python with the cpu vendor's
    ``docker_image/<framework>/requirements.txt`` installed, made on first use by the framework_env
    role's script (the environment runtime none runs that framework's cases in), under
    ``FRAMEWORK_ENVS``. ``FLAGPERF_FRAMEWORK_PYTHON_<FRAMEWORK>`` names another one instead."""
    import json
    import subprocess

    from flagperf_ansible.run.launch import framework_env_name

    def get(framework: str) -> Path:
        override = os.environ.get(f"FLAGPERF_FRAMEWORK_PYTHON_{framework.upper()}")
        if override:
            return Path(override)
        path = FRAMEWORK_ENVS / framework_env_name(ROOT, "cpu", framework, [])
        made = subprocess.run(
            [sys.executable, "-m", "flagperf_host.framework_env", "--path", str(path), "--requirements",
             str(ROOT / "vendors/cpu/docker_image" / framework / "requirements.txt")],
            capture_output=True, text=True)
        assert made.returncode == 0, made.stderr
        return Path(json.loads(made.stdout)["python"])

    return get


@pytest.fixture
def venv_env() -> dict[str, str]:
    """Environment whose PATH finds this Python's ansible-playbook first."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["ANSIBLE_CONFIG"] = str(ROOT / "ansible.cfg")
    return env


@pytest.fixture(scope="session")
def postgres():
    """A real PostgreSQL server (tests/postgres_server.py), started once per session: skipped
    where Debian's postgresql is not installed, a failure in CI (which installs it)."""
    import postgres_server

    server = postgres_server.start()
    yield server
    server.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request, tmp_path) -> str:
    """A fresh, empty results database: a SQLite file, then a database on the session's
    PostgreSQL server; the tests that take it run once on each."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'results.db'}"
    return request.getfixturevalue("postgres").new_database()


@pytest.fixture(scope="session")
def artifacts() -> Path:
    """Where tests keep what a person may want to look at afterwards (screenshots):
    ``$FLAGPERF_TEST_ARTIFACTS``, else ``test-artifacts/`` in the checkout (ignored by git)."""
    folder = Path(os.environ.get("FLAGPERF_TEST_ARTIFACTS") or ROOT / "test-artifacts")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture(scope="session")
def results_sources(tmp_path_factory) -> dict[str, Path]:
    """The runs of every source the results database ingests (tests/results_sources.py),
    written once per session; read-only for the tests."""
    from results_sources import write_sources

    return write_sources(tmp_path_factory.mktemp("results-sources"))
