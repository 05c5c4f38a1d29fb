"""roles/framework_env: a framework's virtual environment made once per content, by the real
script (flagperf_host.framework_env) and through the plan and the prepare playbook's role."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

import host_side

from flagperf_ansible.run.launch import framework_env_name
from flagperf_ansible.run.plan import build_plan


def make(path: Path, requirements: Path) -> subprocess.CompletedProcess:
    return subprocess.run([*host_side.command("framework_env", python=sys.executable), "--path", str(path),
                           "--requirements", str(requirements)], capture_output=True, text=True,
                          env=host_side.env(dict(os.environ)))


def test_an_environment_is_made_once_even_by_hosts_at_the_same_time(tmp_path):
    # No package index: pip's options in the requirements file install nothing, quickly.
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("--no-index\n")
    path = tmp_path / "envs" / "cpu-x-0123"
    with ThreadPoolExecutor(3) as pool:
        results = list(pool.map(lambda _: make(path, requirements), range(3)))
    assert all(r.returncode == 0 for r in results), [r.stderr for r in results]
    outputs = [json.loads(r.stdout) for r in results]
    assert sorted(o["changed"] for o in outputs) == [False, False, True]
    python = Path(outputs[0]["python"])
    assert python == path / "bin/python"
    assert subprocess.run([str(python), "-c", "import sys; print(sys.prefix)"],
                          capture_output=True, text=True, check=True).stdout.strip() == str(path)
    assert json.loads(make(path, requirements).stdout)["changed"] is False


def test_a_failed_install_says_why_and_leaves_no_environment(tmp_path):
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("--no-index\nno-such-package-flagperf==1.0\n")
    path = tmp_path / "envs" / "cpu-x-4567"
    done = make(path, requirements)
    assert done.returncode == 1
    assert "no-such-package-flagperf" in done.stderr and "failed" in done.stderr
    assert not path.exists()
    requirements.write_text("--no-index\n")  # a later make starts afresh
    assert make(path, requirements).returncode == 0 and (path / "bin/python").exists()


def test_the_environment_is_named_by_its_requirements(scratch_project):
    name = framework_env_name(scratch_project, "cpu", "paddle", [])
    assert name.startswith("cpu-paddle-")
    assert framework_env_name(scratch_project, "cpu", "paddle", ["extra==1"]) != name
    path = scratch_project / "vendors/cpu/docker_image/paddle/requirements.txt"
    path.write_text(path.read_text() + "# changed\n")
    assert framework_env_name(scratch_project, "cpu", "paddle", []) != name


def _plan(project: Path, runtime: str) -> dict:
    settings = yaml.safe_load((project / "roles/flagperf/defaults/main.yml").read_text())
    settings |= {"flagperf_container_runtime": runtime, "flagperf_root": "/opt/fp",
                 "flagperf_workdir": "/var/tmp/fpw",
                 "flagperf_cases": [{"model": m, "framework": f, "hardware": "cpu", "nnodes": 1,
                                     "nproc_per_node": 1, "repeat": 1, "data_dir": "data/x"}
                                    for m, f in (("bert", "paddle"), ("resnet50", "pytorch"))]}
    return build_plan(settings, {}, ["localhost"], {}, project)


def test_runtime_none_plans_an_environment_for_a_venv_framework_only(project):
    plan = _plan(project, "none")
    assert list(plan["envs"]) == ["paddle"]  # pytorch runs in flagperf_python
    env = plan["envs"]["paddle"]
    assert env["path"] == f"/var/tmp/fpw/envs/{framework_env_name(project, 'cpu', 'paddle', [])}"
    assert env["python"] == env["path"] + "/bin/python"
    assert env["requirements"] == "/opt/fp/vendors/cpu/docker_image/paddle/requirements.txt"
    assert _plan(project, "docker")["envs"] == {}
