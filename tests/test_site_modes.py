"""site.yml's phase tags, the roles' tags, and check mode: a --check run of the whole site.yml
(diagnostic case) fails nowhere and leaves no file behind."""

import json
import re
import shutil
import subprocess
from pathlib import Path

import psutil
import pytest
import yaml

from unavailable import unavailable

ROOT = Path(__file__).resolve().parents[1]
# Every role with tasks (flagperf has defaults only; monitor has start.yml and stop.yml).
ROLES = sorted({p.parent.parent for p in ROOT.glob("roles/*/tasks/*.yml")})
PHASES = {"Validate every input on the controller": {"preflight", "always"},
          "Reach the benchmark hosts and check them": {"preflight"},
          "Prepare the hosts - case code, framework environments and vendor images": {"prepare"},
          "Run each case round on its hosts": {"rounds"},
          "Summarise the run": {"report"}}


def list_tags(playbook: Path, env: dict, cwd: Path) -> dict[str, tuple[set, set]]:
    """``{play name: (play tags, task tags)}`` as ``ansible-playbook --list-tags`` prints them."""
    done = subprocess.run(["ansible-playbook", str(playbook), "-i", "inventories/local",
                           "--list-tags"], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    plays = re.findall(r"play #\d+ \([^)]*\): (.*?)\tTAGS: \[(.*?)\]\n\s+TASK TAGS: \[(.*?)\]",
                       done.stdout)
    assert plays, done.stdout
    return {name: ({t for t in play.split(",") if t}, {t.strip() for t in task.split(",") if t})
            for name, play, task in plays}


def role_task_tags(role: Path) -> dict[str, set]:
    """Tags on each top-level task or block of the role's task files, by task name."""
    found = {}
    for path in sorted((role / "tasks").glob("*.yml")):
        for task in yaml.safe_load(path.read_text()) or []:
            found[f"{path.name}: {task['name']}"] = set(task.get("tags") or [])
    return found


def test_site_yml_tags_each_phase(venv_env):
    plays = list_tags(ROOT / "site.yml", venv_env, ROOT)
    assert {name: tags for name, (tags, _) in plays.items()} == PHASES
    # Statically imported roles show their own tags under the phase that runs them.
    tasks = {name: tags for name, (_, tags) in plays.items()}
    assert "preflight_hosts" in tasks["Reach the benchmark hosts and check them"]
    assert "deploy_copy" in tasks["Prepare the hosts - case code, framework environments and vendor images"]


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_every_role_task_has_a_role_prefixed_tag(role):
    for task, tags in role_task_tags(role).items():
        assert any(t.startswith(f"{role.name}_") for t in tags), f"{role.name}: {task}: {tags}"


def test_role_tags_are_listed_when_the_roles_are_imported(tmp_path, venv_env):
    """A play importing every role (as another fleet's playbook would) lists exactly the tags
    written in the roles' task files."""
    tasks = []
    expected = set()
    for role in ROLES:
        for path in sorted((role / "tasks").glob("*.yml")):
            if path.name == "mesh.yml":  # included by ssh_trust's main.yml
                continue
            tasks.append({"name": f"{role.name} {path.stem}",
                          "ansible.builtin.import_role": {"name": role.name,
                                                          "tasks_from": path.name}})
        expected |= set().union(*role_task_tags(role).values())
    playbook = tmp_path / "roles.yml"
    playbook.write_text(yaml.safe_dump([{"name": "Every role", "hosts": "flagperf_hosts",
                                         "gather_facts": False, "tasks": tasks}]))
    (listed,) = list_tags(playbook, venv_env, ROOT).values()
    assert listed[1] - {"always"} == expected
    assert { "monitor_start", "monitor_stop", "sys_info_describe",
            "collect_fetch", "cache_clear_drop"} <= expected


def test_check_mode_runs_everywhere_and_writes_nothing(project, tmp_path, venv_env):
    results, workdir = tmp_path / "results", tmp_path / "work"
    done = subprocess.run(
        ["ansible-playbook", "site.yml", "-i", "inventories/local", "--check",
         "-e", json.dumps({"flagperf_results_dir": str(results), "flagperf_workdir": str(workdir),
                           "flagperf_cases": ["sleep:pytorch:cpu:1:1:2"],
                           "flagperf_clear_caches": True})],
        cwd=project, env=venv_env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    recap = re.search(r"localhost\s+: ok=(\d+)\s+changed=\d+\s+unreachable=0\s+failed=0",
                      done.stdout)
    assert recap, done.stdout[-2000:]
    # It went through every phase and both rounds, not around them.
    for task in ("preflight : Validate the settings and plan the rounds", "deploy : ",
                 "sys_info : Describe the host into sys_info.json",
                 "Start the system monitor and the node's case", "launch : Wait for the case",
                 "Stop the node's case and monitor",
                 "collect : Fetch the node's round files", "Write summary.json and summary.md"):
        assert f"TASK [{task}" in done.stdout, task
    assert done.stdout.count("TASK [Begin round") == 2
    assert "flagperf:" not in done.stdout  # the results callback was handed nothing
    assert not results.exists() and not workdir.exists()
    assert not [p.pid for p in psutil.process_iter(["cmdline"])
                if any(str(workdir) in a for a in p.info["cmdline"] or [])]


def test_image_build_check_mode_builds_nothing(tmp_path, venv_env):
    """Check mode reports an image it lacks as to be built, without a build context on disk."""
    if shutil.which("docker") is None or subprocess.run(
            ["docker", "info"], capture_output=True).returncode != 0:
        unavailable("no running Docker engine here")
    context = tmp_path / "context"
    playbook = tmp_path / "build.yml"
    playbook.write_text(yaml.safe_dump([{
        "name": "Build an image in check mode", "hosts": "localhost", "gather_facts": False,
        "tasks": [{"name": "Build", "ansible.builtin.import_role": {"name": "image_build"},
                   "vars": {"image_build_name": "flagperf-check-mode",
                            "image_build_tag": "never-built",
                            "image_build_definition_dir": str(tmp_path / "not-shipped"),
                            "image_build_context_dir": str(context)}}]}]))
    done = subprocess.run(["ansible-playbook", str(playbook), "-i", "localhost,", "--check",
                           "-c", "local", "-e", "ansible_python_interpreter={{ ansible_playbook_python }}"],
                          cwd=ROOT, env=venv_env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:]
    assert re.search(r"localhost\s+: ok=\d+\s+changed=1\s+unreachable=0\s+failed=0", done.stdout)
    assert "flagperf-check-mode:never-built is not on the host and would be built" in done.stdout
    assert not context.exists()
    assert subprocess.run(["docker", "image", "inspect", "flagperf-check-mode:never-built"],
                          capture_output=True).returncode != 0
