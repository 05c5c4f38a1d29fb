"""The roles and plugins as the collection flagperf.benchmark: built with ansible-galaxy,
installed into a temporary folder, and used by a playbook outside the checkout (its roles and
plugins out of reach) to describe the host, monitor it and run one diagnostic round."""

import csv
import json
import os
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path

import psutil
import pytest
import yaml

from flagperf_ansible.results.perflog import parse_rank_log
from flagperf_ansible.run.plan import build_plan

ROOT = Path(__file__).resolve().parents[1]
PLAYBOOK = """
- name: One diagnostic round with the flagperf.benchmark roles
  hosts: bench
  gather_facts: false
  vars:
    node_dir: "{{ workdir }}/sleep-pytorch-cpux1x1/round1/localhost_noderank0"
  tasks:
    - name: Describe the host into sys_info.json
      ansible.builtin.import_role:
        name: flagperf.benchmark.sys_info
      vars:
        sys_info_output_dir: "{{ node_dir }}"
        sys_info_python: "{{ ansible_playbook_python }}"
        sys_info_vendor_dir: "{{ checkout }}/vendors/cpu"

    - name: Start the monitor
      ansible.builtin.import_role:
        name: flagperf.benchmark.monitor
        tasks_from: start
      vars: &monitor
        monitor_output_dir: "{{ node_dir }}"
        monitor_python: "{{ ansible_playbook_python }}"
        monitor_interval: 0.2
        monitor_max_seconds: 120
        monitor_vendor_plugin: "{{ checkout }}/vendors/cpu/monitor.py"

    # launch builds its command line with the collection's filters (flagperf.benchmark.*).
    - name: Run the round
      ansible.builtin.import_role:
        name: flagperf.benchmark.launch
      vars:
        launch_round: "{{ round }}"
        launch_output_dir: "{{ node_dir }}"
        launch_root: "{{ checkout }}"
        launch_python: "{{ ansible_playbook_python }}"

    - name: Stop the monitor
      ansible.builtin.import_role:
        name: flagperf.benchmark.monitor
        tasks_from: stop
      vars: *monitor

    - name: Keep how the launch ended
      ansible.builtin.copy:
        content: "{{ launch_result | to_json }}"
        dest: "{{ workdir }}/launch_outcome.json"
        mode: "0644"
"""


def galaxy(*args: str, cwd: Path) -> str:
    done = subprocess.run([str(Path(sys.executable).parent / "ansible-galaxy"), "collection", *args],
                          cwd=cwd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


@pytest.fixture(scope="module")
def collection(ansible_playbook, tmp_path_factory) -> tuple[Path, Path]:
    """(the built tarball, the folder it is installed in)."""
    work = tmp_path_factory.mktemp("collection")
    galaxy("build", str(ROOT), "--output-path", str(work / "dist"), cwd=work)
    (tarball,) = (work / "dist").glob("flagperf-benchmark-*.tar.gz")
    # Offline: the dependencies (ansible.posix, community.crypto, community.docker) come with
    # the ansible package.
    galaxy("install", "--offline", str(tarball), "-p", str(work / "collections"), cwd=work)
    return tarball, work / "collections"


def test_the_collection_holds_roles_and_plugins_only(collection):
    tarball, installed = collection
    with tarfile.open(tarball) as archive:
        top = {name.split("/")[0] for name in archive.getnames()}
        manifest = json.load(archive.extractfile("MANIFEST.json"))["collection_info"]
    assert top == {"MANIFEST.json", "FILES.json", "README.md", "CHANGELOG.md", "meta", "plugins",
                   "roles"}
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert (manifest["namespace"], manifest["name"]) == ("flagperf", "benchmark")
    assert manifest["version"] == project["version"]
    root = installed / "ansible_collections/flagperf/benchmark"
    roles = sorted(p.name for p in (root / "roles").iterdir())
    assert roles == sorted(p.name for p in (ROOT / "roles").iterdir())
    for role in roles:
        assert (root / "roles" / role / "README.md").is_file(), role
    assert (root / "plugins/filter/flagperf.py").is_file()
    assert (root / "plugins/callback/flagperf_results.py").is_file()
    assert yaml.safe_load((root / "meta/runtime.yml").read_text())["requires_ansible"]


def test_a_playbook_outside_the_checkout_runs_the_installed_roles(collection, tmp_path):
    _, installed = collection
    settings = yaml.safe_load((ROOT / "roles/flagperf/defaults/main.yml").read_text())
    settings["flagperf_cases"] = ["sleep:pytorch:cpu:1:1:1"]
    (round_,) = build_plan(settings, {}, ["localhost"], {"localhost": "127.0.0.1"}, ROOT)["rounds"]
    site = tmp_path / "site"
    site.mkdir()
    (site / "play.yml").write_text(PLAYBOOK)
    (site / "hosts.yml").write_text(yaml.safe_dump({"bench": {"hosts": {"localhost": {
        "ansible_connection": "local",
        "ansible_python_interpreter": "{{ ansible_playbook_python }}"}}}}))
    workdir = tmp_path / "work"
    (site / "vars.json").write_text(json.dumps({"round": round_, "checkout": str(ROOT),
                                                "workdir": str(workdir)}))
    (tmp_path / "no-roles").mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update({"PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
                "ANSIBLE_COLLECTIONS_PATH": str(installed),
                "ANSIBLE_ROLES_PATH": str(tmp_path / "no-roles")})
    done = subprocess.run(["ansible-playbook", "play.yml", "-i", "hosts.yml", "-e", "@vars.json"],
                          cwd=site, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    # The roles were the installed collection's, found through ANSIBLE_COLLECTIONS_PATH.
    assert "TASK [flagperf.benchmark.launch : Wait for the case]" in done.stdout

    node = workdir / "sleep-pytorch-cpux1x1/round1/localhost_noderank0"
    outcome = json.loads((workdir / "launch_outcome.json").read_text())
    assert outcome["finished"] and outcome["rc"] == 0
    finished = parse_rank_log(node / "rank0.out.log").last("FINISHED")["value"]
    assert finished["converged"] is True and finished["num_trained_samples"] > 0

    sys_info = json.loads((node / "sys_info.json").read_text())
    assert sys_info["cpu"]["logical_cores"] > 0 and sys_info["memory"]["total_bytes"] > 0
    assert sys_info["accelerators"]["vendor"] == "cpu"

    monitor = json.loads((node / "monitor.json").read_text())
    assert monitor["status"] == "stopped"
    with open(node / "sys_monitor.csv", newline="") as handle:
        stamps = [int(row["timestamp_ms"]) for row in csv.DictReader(handle)]
    assert len(stamps) >= 3 and stamps == sorted(stamps)
    assert not [p.pid for p in psutil.process_iter(["cmdline"])
                if any(str(workdir) in a for a in p.info["cmdline"] or [])]
