"""Shared fixtures: the checkout, a scratch copy of it for config-layering tests, digits data,
and the real components tests use (Docker, Ansible, torchrun, a browser, PostgreSQL, the test
clusters). A test's tier follows from those fixtures (``TIERS``)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
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


#: A test's tier is that of the slowest real component among its fixtures (their closure, so a
#: module's fixture that starts a cluster counts), the first tier listed here that names one;
#: a test with none of them is ``fast``. ``make test-fast`` runs ``-m fast``.
TIERS = {
    # The local run's rounds, the frameworks' environments, the GPU check's CPU half.
    "e2e": {"local_run", "framework_python", "gpu_check_cpu_half"},
    # Loopback sshd hosts, Slurm.
    "cluster": {"loopback_machine", "slurm_machine"},
    # ansible-playbook, Docker, torchrun, headless Chromium, PostgreSQL, molecule.
    "integration": {"ansible_playbook", "venv_env", "docker_engine", "base_image", "torchrun",
                    "chromium", "postgres", "database_url"},
}


#: Modules that run after the local run, which trains on every core meanwhile
#: (tests/local_job.py), and wait for its end (``local_run_finished``): those that time work
#: against other work, and the fault tests, whose signals land in ansible-core's own windows
#: more often on a loaded machine (a SIGINT between rounds once ended ansible-playbook with
#: "process object is closed", exit 250).
AFTER_THE_LOCAL_RUN = {"test_base_figures.py", "test_faults.py"}


def pytest_collection_modifyitems(config, items):
    for item in items:
        used = set(item.fixturenames)
        tier = next((name for name, fixtures in TIERS.items() if used & fixtures), "fast")
        item.add_marker(getattr(pytest.mark, tier))
    # Last, whole modules at a time (a module's fixtures are set up once): the modules whose
    # tests read the local run, started with the session, then those that time work.
    readers = {item.path for item in items if "local_run" in item.fixturenames}
    items.sort(key=lambda item: 2 if item.path.name in AFTER_THE_LOCAL_RUN
               else int(item.path in readers))


@pytest.fixture(scope="session")
def project() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def ansible_playbook() -> Path:
    """This Python's ``ansible-playbook`` (a test runs it with ``venv_env``'s PATH)."""
    found = Path(sys.executable).parent / "ansible-playbook"
    assert found.is_file(), "ansible-core is a dependency (pip install -e .)"
    return found


@pytest.fixture(scope="session")
def docker_engine() -> None:
    """A running Docker engine: skipped without one, a failure under CI (.ci/run starts it)."""
    from unavailable import unavailable

    if shutil.which("docker") is None or subprocess.run(
            ["docker", "info"], capture_output=True).returncode != 0:
        unavailable("no running Docker engine here (.ci/run starts dockerd)")


@pytest.fixture(scope="session")
def base_image(docker_engine) -> str:
    """The cluster's base image (``loopback_cluster.BASE_IMAGE``), made once per machine."""
    import loopback_cluster
    from unavailable import unavailable

    if subprocess.run(["docker", "image", "inspect", loopback_cluster.BASE_IMAGE],
                      capture_output=True).returncode != 0:
        if os.geteuid() != 0 or shutil.which("debootstrap") is None:
            unavailable(f"no {loopback_cluster.BASE_IMAGE} image, and no root with debootstrap "
                        "to make it")
        loopback_cluster.ensure_base_image()
    return loopback_cluster.BASE_IMAGE


@pytest.fixture(scope="session")
def torchrun() -> list[str]:
    """torch's launcher in this Python (``python -m torch.distributed.run``)."""
    from unavailable import unavailable

    if importlib.util.find_spec("torch") is None:
        unavailable("no torch in this Python (pip install -e '.[local]')")
    return [sys.executable, "-m", "torch.distributed.run"]


@pytest.fixture(scope="session")
def chromium() -> str:
    """The headless Chromium binary (tests/browser.py)."""
    import browser

    return browser.chromium()


@pytest.fixture
def scratch_project(tmp_path: Path) -> Path:
    """A copy of the parts of the checkout that validation reads, free to edit."""
    target = tmp_path / "project"
    for part in ("benchmarks", "vendors", "roles/flagperf", "inventories/local"):
        shutil.copytree(ROOT / part, target / part,
                        ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "site.yml", target / "site.yml")
    return target


@pytest.fixture(scope="session")
def loopback_machine() -> None:
    """What the loopback test cluster needs (tests/loopback_cluster.py): root, sshd, a Docker
    engine. Skipped without them, a failure under CI (which must provide them)."""
    import loopback_cluster
    from unavailable import unavailable

    missing = loopback_cluster.problems()
    if missing:
        unavailable("no test cluster here: " + "; ".join(missing))


@pytest.fixture(scope="session")
def slurm_machine() -> None:
    """What the Slurm test cluster needs (tests/slurm_cluster.py): root, Debian's Slurm daemons
    and munge."""
    import slurm_cluster
    from unavailable import unavailable

    missing = slurm_cluster.problems()
    if missing:
        unavailable("no Slurm cluster here: " + "; ".join(missing))


@pytest.fixture(scope="module")
def cluster(loopback_machine, tmp_path_factory):
    """Two loopback sshd hosts with an inventory (tests/loopback_cluster.py), one set per test
    module."""
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


def ansible_env() -> dict[str, str]:
    """This environment, with PATH finding this Python's ansible-playbook first."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["ANSIBLE_CONFIG"] = str(ROOT / "ansible.cfg")
    return env


@pytest.fixture
def venv_env(ansible_playbook) -> dict[str, str]:
    """Environment whose PATH finds this Python's ansible-playbook first."""
    return ansible_env()


@pytest.fixture(scope="session", autouse=True)
def local_run_started(request, tmp_path_factory):
    """The local run (tests/local_job.py), started when the session starts, where a selected
    test reads it; stopped at the session's end if it still runs."""
    if not any("local_run" in item.fixturenames for item in request.session.items):
        yield None
        return
    import local_job

    job = local_job.Background(ROOT, tmp_path_factory.mktemp("local-run"), ansible_env())
    yield job
    job.stop()


@pytest.fixture(scope="session")
def local_run_finished(local_run_started) -> None:
    """The local run started with the session has ended (it is not judged here): the cores are
    this test's."""
    if local_run_started is not None:
        local_run_started.wait()


@pytest.fixture(scope="session")
def local_run(ansible_playbook, local_run_started):
    """The local inventory's run, once per session: every case of the quickstart's main job,
    one round each (``local_job.LocalRun``). Tests read its results; none may change them."""
    return local_run_started.result()


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
