"""The round runs the monitor's and the launch role's scripts in combined steps (one exchange
per host: the start, playbooks/tasks/<runtime>/round.yml; the stops, vars/round_node.yml's
__node_stop_steps, which the round's collect task runs), and the container role's
docker_container task under the launch role's supervisor: their arguments must stay those of the
roles' own tasks, or a change to a role would not reach the round. The round's task files import
their own siblings by an explicit path."""

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
ROUND_NODE = yaml.safe_load((ROOT / "playbooks/vars/round_node.yml").read_text())

# The role's variables and the round's value for each (the round's names, vars/round_node.yml).
ROUND_NAMES = {
    "launch_output_dir": "__host_dir", "launch_round": "flagperf_round",
    "launch_noderank": "__noderank | int", "launch_python": "flagperf_python",
    "launch_root": "flagperf_root", "launch_master_port": "flagperf_master_port",
    "launch_env": "flagperf_env", "monitor_output_dir": "__host_dir",
    "monitor_interval": "flagperf_monitor_interval", "launch_wait_slice": "flagperf_wait_slice",
}


def tasks(relative: str) -> list[dict]:
    """A task file's tasks, those in blocks included."""
    def walk(items):
        for item in items:
            nested = [item.get(key) or [] for key in ("block", "rescue", "always")]
            if any(nested):
                for part in nested:
                    yield from walk(part)
            else:
                yield item
    return list(walk(yaml.safe_load((ROOT / relative).read_text())))


def named(relative: str, name: str) -> dict:
    """The task of that name in a task file."""
    found = [task for task in tasks(relative) if task.get("name") == name]
    assert len(found) == 1, (relative, name)
    return found[0]


def piped(task: dict) -> dict:
    return task["flagperf.benchmark.piped_script"]


def in_round_terms(value) -> str:
    """A role task's argument as the round writes it: its variables renamed, filters by
    their short names, whitespace folded."""
    text = " ".join(str(value).split()).replace("flagperf.benchmark.", "")
    for role_name, round_name in ROUND_NAMES.items():
        text = re.sub(rf"\b{role_name}\b", round_name, text)
    return text


def step(path: str, name: str, script: str) -> dict:
    found = [s for t in tasks(path) if t.get("name") == name for s in piped(t)["steps"]
             if s["script"].endswith(f"/files/{script}")]
    assert len(found) == 1, (path, name, script)
    return found[0]


def options(argv: list) -> list[str]:
    return [str(word) for word in argv if str(word).startswith("--")]


START = "Start the system monitor and the node's case, and wait a slice"
DOCKER_START = "Start the system monitor and the node's container, and wait a slice"


def node_stop_steps() -> list[dict]:
    """vars/round_node.yml's stop steps (the round's end; both runtimes)."""
    return ROUND_NODE["__node_stop_steps"]


def test_the_round_starts_the_case_as_the_launch_role_does():
    role = piped(tasks("roles/launch/tasks/start.yml")[0])
    role_env = tasks("roles/launch/tasks/start.yml")[0]["environment"]
    starts = [s for s in piped(named("playbooks/tasks/none/round.yml", START))["steps"]
              if s["script"].endswith("/files/node_job.py") and "start" in s["argv"]]
    assert len(starts) == 1
    assert " ".join(starts[0]["argv"].split()) == in_round_terms(role["argv"])
    assert " ".join(starts[0]["environment"].split()) == in_round_terms(role_env)


def test_the_round_waits_its_first_slice_as_the_launch_role_does():
    """The start's last step is the launch role's wait step; registered under the same name,
    it is what the round's decision and record read."""
    role = tasks("roles/launch/tasks/wait.yml")[0]
    start = named("playbooks/tasks/none/round.yml", START)
    last = piped(start)["steps"][-1]
    assert last["script"].endswith("/files/node_job.py")
    assert [in_round_terms(word) for word in piped(role)["argv"]] == last["argv"]
    assert start["register"] == role["register"] == "launch_poll"
    assert ROUND_NODE["__node_poll_var"] == "launch_poll"


def test_the_round_starts_and_stops_the_monitor_as_the_monitor_role_does():
    defaults = yaml.safe_load((ROOT / "roles/monitor/defaults/main.yml").read_text())
    for entry, argv in (("start", ROUND_NODE["__monitor_start_argv"]),
                        ("stop", ROUND_NODE["__monitor_stop_argv"])):
        role = piped(tasks(f"roles/monitor/tasks/{entry}.yml")[0])["argv"]
        assert argv[0] == role[0] == entry and options(argv) == options(role), entry
        # Where the round gives a constant, it is the role's default.
        for word, value in zip(role, argv):
            match = re.fullmatch(r"\{\{ (monitor_\w+) \}\}", str(word))
            if match and "{{" not in str(value):
                assert value == defaults[match.group(1)], (entry, word, value)
    for path, name in (("playbooks/tasks/none/round.yml", START),
                       ("playbooks/tasks/docker/round.yml", DOCKER_START)):
        assert step(path, name, "sys_monitor.py")["argv"] == "{{ __monitor_start_argv }}", path
    monitor = node_stop_steps()[-1]
    assert monitor["script"].endswith("/files/sys_monitor.py")
    assert monitor["argv"] == "{{ __monitor_stop_argv }}"


def test_the_round_stops_the_case_as_the_launch_role_does():
    """Both runtimes' ends stop what node_job.py runs first: the case, or the module run that
    started the container (docker's end removes a container still running by its own task)."""
    role = piped(tasks("roles/launch/tasks/stop.yml")[0])["argv"]
    case = node_stop_steps()[0]
    assert case["script"].endswith("/files/node_job.py")
    assert case["argv"] == [in_round_terms(word) for word in role]
    assert len(node_stop_steps()) == 2
    end = tasks("playbooks/tasks/round_end.yml")[0]
    assert end["vars"]["collect_stop_steps"] == "{{ __node_stop_steps }}"


def test_the_docker_round_starts_the_container_as_the_container_role_does():
    """The container role's docker_container task, run by node_job.py's supervisor: the same
    module, arguments and variables (the round sets the role's variables on its task)."""
    role = tasks("roles/container/tasks/run.yml")[0]
    role_vars = yaml.safe_load((ROOT / "roles/container/vars/main.yml").read_text())
    task = named("playbooks/tasks/docker/round.yml", DOCKER_START)
    monitor, first, last = piped(task)["steps"]
    assert monitor["script"].endswith("/files/sys_monitor.py")
    assert first["script"].endswith("/files/node_job.py")
    assert first["input_module"] == {"name": "community.docker.docker_container",
                                     "args": role["community.docker.docker_container"]}
    argv = first["argv"]
    assert argv[0] == "start" and {"--input", "--result"} <= set(argv)
    # The launch role's start writes config.yaml as for runtime none.
    assert argv[argv.index("--config-json") + 1] == "{{ flagperf_round.config | to_json }}"
    assert argv[argv.index("--") + 1:] == ["{{ flagperf_python }}", "-"]
    # Every variable of the role's task is set on the round's task, its volumes as the role's.
    used = set(re.findall(r"\b(container_\w+|__container_\w+)\b", str(role["community.docker.docker_container"])))
    assert used <= set(task["vars"]), used - set(task["vars"])
    assert task["vars"]["__container_volumes"] == role_vars["__container_volumes"]
    # Its end is the launch role's wait step, registered as the launch role's wait registers it.
    wait = tasks("roles/launch/tasks/wait.yml")[0]
    assert [in_round_terms(word) for word in piped(wait)["argv"]] == last["argv"]
    assert task["register"] == wait["register"] == "launch_poll"
    # The module runs no longer than the role's async job would (the case timeout).
    assert argv[argv.index("--timeout") + 1] == "{{ flagperf_round.timeout }}"
    assert role["async"] == "{{ container_round.timeout }}"
    assert task["vars"]["container_round"] == "{{ flagperf_round }}"


def test_the_round_files_import_their_own_task_files():
    # A bare file name in import_tasks is looked up along Ansible's search path, which holds the
    # folders of the roles the play uses: the docker round's "wait.yml" once ran the launch
    # role's wait.yml (a node_job.py wait on a folder with no job) and its "end.yml" not
    # playbooks/tasks/docker/end.yml (no removal of a container still running). Each import
    # names its folder: "../docker/end.yml", "../round_end.yml", "../tasks/round_record.yml".
    for path in sorted((ROOT / "playbooks/tasks").rglob("*.yml")):
        for task in tasks(str(path.relative_to(ROOT))):
            target = task.get("ansible.builtin.import_tasks")
            if target is None:
                continue
            assert target.startswith("../"), f"{path}: import_tasks {target}"
            assert (path.parent / target).resolve().is_file(), f"{path}: import_tasks {target}"
