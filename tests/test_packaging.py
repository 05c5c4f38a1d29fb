"""The controller installs without the benchmark side.

`pip install flagperf-ansible` brings Ansible, the plugins' Python and the reports; torch,
torchvision, transformers and scikit-learn come with the vendor image, or with the `local` extra
for runtime `none`. Checked here: every controller module and plugin imports, and the controller's
commands run, in Pythons where those packages cannot be imported (a `sys.meta_path` finder
installed by a `sitecustomize` on PYTHONPATH, so that every Python the commands start, Ansible's
included, is blocked as well); pyproject's base dependencies name none of them; and the `local`
extra pins the same torch and torchvision as the vendor images.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())

# Import names and distribution names of the benchmark side.
BLOCKED_MODULES = ("torch", "torchvision", "torchaudio", "transformers", "sklearn", "timm",
                   "megatron")
BENCHMARK_DISTRIBUTIONS = {"torch", "torchvision", "torchaudio", "transformers", "scikit-learn",
                           "timm", "megatron-core"}

# Raises ModuleNotFoundError, as a missing package does, and notes every attempt (even one the
# importer catches) in $FLAGPERF_BLOCK_LOG, so an optional `try: import torch` shows up too.
SITECUSTOMIZE = f"""
import os, sys, traceback

BLOCKED = {BLOCKED_MODULES!r}


class BenchmarkSideBlocker:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] not in BLOCKED:
            return None
        with open(os.environ["FLAGPERF_BLOCK_LOG"], "a") as log:
            where = "".join(traceback.format_stack(limit=8)[:-1])
            log.write(f"{{os.getpid()}} {{name}}\\n{{where}}\\n")
        raise ModuleNotFoundError(f"No module named {{name!r}} (blocked)", name=name)


sys.meta_path.insert(0, BenchmarkSideBlocker())
"""

# Imports every module of the package (but __main__, which runs the CLI) and every plugin file
# the way Ansible loads it (by path), and prints what it imported.
IMPORT_ALL = """
import importlib, importlib.util, json, pkgutil, sys
from pathlib import Path

import flagperf_ansible

names = sorted(m.name for m in pkgutil.walk_packages(flagperf_ansible.__path__, "flagperf_ansible.")
               if not m.name.endswith(".__main__"))
for name in names:
    importlib.import_module(name)
plugins = sorted(Path(sys.argv[1]).glob("plugins/*/*.py"))
for path in plugins:
    spec = importlib.util.spec_from_file_location(f"plugin_{path.parent.name}_{path.stem}", path)
    spec.loader.exec_module(importlib.util.module_from_spec(spec))
print(json.dumps({"modules": names, "plugins": [p.stem for p in plugins],
                  "loaded": sorted(sys.modules)}))
"""


@pytest.fixture
def blocked_env(tmp_path: Path) -> dict[str, str]:
    """Environment in which no Python can import the benchmark side; attempts go to
    ``tmp_path/attempts.log``."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(textwrap.dedent(SITECUSTOMIZE))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(ROOT / "src")])
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["ANSIBLE_CONFIG"] = str(ROOT / "ansible.cfg")
    env["FLAGPERF_BLOCK_LOG"] = str(tmp_path / "attempts.log")
    return env


def attempts(env: dict[str, str]) -> str:
    log = Path(env["FLAGPERF_BLOCK_LOG"])
    return log.read_text() if log.exists() else ""


def test_the_blocker_blocks(blocked_env):
    """The check below would pass vacuously if the finder were not in place."""
    for name in ("torch", "sklearn.datasets", "transformers"):
        done = subprocess.run([sys.executable, "-c", f"import {name}"], env=blocked_env,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 1
        assert f"No module named '{name.partition('.')[0]}' (blocked)" in done.stderr
    assert attempts(blocked_env).count("\n") >= 3


def test_controller_modules_and_plugins_import_without_the_benchmark_side(blocked_env):
    done = subprocess.run([sys.executable, "-c", IMPORT_ALL, str(ROOT)], env=blocked_env,
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    imported = json.loads(done.stdout.splitlines()[-1])
    # The walk found the package and the plugins, not an empty folder.
    assert {"flagperf_ansible.cli", "flagperf_ansible.datasets", "flagperf_ansible.run.runner",
            "flagperf_ansible.results.report", "flagperf_ansible.results.summary"} <= set(imported["modules"])
    assert {"flagperf", "flagperf_results", "flagperf_preload", "piped_script",
            "node_wait"} <= set(imported["plugins"])
    assert not [m for m in imported["loaded"] if m.partition(".")[0] in BLOCKED_MODULES]
    assert attempts(blocked_env) == ""


def write_flagperf_results(folder: Path) -> None:
    """A FlagPerf results folder with one converged round of one case."""
    node = folder / "resnet50:pytorch_1.8:A100:1:8:1" / "round1" / "10.0.0.1_noderank0"
    node.mkdir(parents=True)
    finished = {"e2e_time": 100.0, "raw_train_time": 90.0, "num_trained_samples": 9000,
                "p_whole": 100.0, "converged": True, "final_acc1": 76.5, "target_acc1": 75.9}
    record = {"event": "FINISHED", "value": finished,
              "metadata": {"file": "run_pretraining.py", "lineno": 1, "time_ms": 1, "rank": 0}}
    (node / "rank0.out.log").write_text(f"[PerfLog] {json.dumps(record)}\n")


def test_controller_commands_run_without_the_benchmark_side(blocked_env, tmp_path):
    """cases, validate, summarize (with the HTML plots) and compare, every Python they start
    blocked too."""
    runs = tmp_path / "flagperf_run"
    write_flagperf_results(runs)
    commands = [["cases"], ["validate", "-i", "inventories/local"], ["summarize", str(runs)],
                ["compare", str(runs), str(runs)]]
    for command in commands:
        done = subprocess.run([sys.executable, "-m", "flagperf_ansible", *command],
                              env=blocked_env, capture_output=True, text=True, timeout=300,
                              cwd=ROOT)
        assert done.returncode == 0, (command, done.stdout[-2000:], done.stderr[-2000:])
    assert (runs / "summary.html").stat().st_size > 0
    assert json.loads((runs / "summary.json").read_text())["status"] == "passed"
    assert attempts(blocked_env) == ""


def test_check_mode_site_runs_without_the_benchmark_side(ansible_playbook, blocked_env, tmp_path):
    """The whole of site.yml in check mode (filters, callback, actions, every role) in Pythons
    that cannot import the benchmark side."""
    done = subprocess.run(
        ["ansible-playbook", "site.yml", "-i", "inventories/local", "--check",
         "-e", json.dumps({"flagperf_results_dir": str(tmp_path / "results"),
                           "flagperf_workdir": str(tmp_path / "work"),
                           "flagperf_cases": ["sleep:pytorch:cpu:1:1:1"]})],
        cwd=ROOT, env=blocked_env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "TASK [preflight : Validate the settings and plan the rounds" in done.stdout
    assert "Write summary.json and summary.md" in done.stdout
    assert attempts(blocked_env) == ""


def test_base_dependencies_hold_no_benchmark_side():
    base = {canonicalize_name(Requirement(r).name) for r in PYPROJECT["project"]["dependencies"]}
    assert {"ansible", "ansible-runner", "jinja2", "pyyaml"} <= base
    assert not base & BENCHMARK_DISTRIBUTIONS


def pins(requirements: list[str]) -> dict[str, str]:
    """{name: version} of the ``name==version`` requirements among ``requirements``."""
    found = {}
    for line in requirements:
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        requirement = Requirement(line)
        exact = [s.version for s in requirement.specifier if s.operator == "=="]
        if exact:
            found[canonicalize_name(requirement.name)] = exact[0]
    return found


def test_one_torch_for_make_run_and_the_vendor_images():
    """make run (the `local` extra), the cpu image and the nvidia image pin the same torch,
    torchvision and torchaudio; the `local` extra brings the rest of the benchmark side."""
    local = PYPROJECT["project"]["optional-dependencies"]["local"]
    local_names = {canonicalize_name(Requirement(r).name) for r in local}
    assert {"torch", "torchvision", "transformers", "scikit-learn", "numpy", "pillow"} <= local_names
    expected = {k: v for k, v in pins(local).items() if k in ("torch", "torchvision", "torchaudio")}
    assert set(expected) == {"torch", "torchvision", "torchaudio"}
    for vendor in ("cpu", "nvidia"):
        path = ROOT / "vendors" / vendor / "docker_image" / "pytorch" / "requirements.txt"
        found = pins(path.read_text().splitlines())
        assert {k: found.get(k) for k in expected} == expected, path
