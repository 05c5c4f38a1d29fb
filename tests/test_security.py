"""Security defaults, checked on the real files and code.

* privilege escalation (``become``) only in roles/cache_clear, off unless asked for;
* ssh host keys are checked: ansible.cfg keeps host_key_checking on and nothing turns
  StrictHostKeyChecking off;
* containers are not privileged unless the vendor definition says so (plan -> role);
* no shell string is built from user values: the one shell task is cache_clear's constant
  command, every command task passes ``argv``, and no Python here runs a shell or evaluates text;
* the test cluster and the documented inventories connect as a non-root user.
"""

from __future__ import annotations

import ast
import configparser
import re
import shutil
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

from flagperf_ansible.run.plan import build_plan

ROOT = Path(__file__).resolve().parents[1]
#: Every YAML file Ansible reads as tasks or plays.
PLAY_FILES = sorted([ROOT / "site.yml", *ROOT.glob("playbooks/**/*.yml"),
                     *ROOT.glob("roles/*/tasks/*.yml"), *ROOT.glob("roles/*/handlers/*.yml")])
#: Every YAML file of roles, playbooks and inventories (defaults, vars, meta included).
ALL_YAML = sorted({*PLAY_FILES, *ROOT.glob("roles/**/*.yml"), *ROOT.glob("roles/**/*.yaml"),
                   *ROOT.glob("inventories/**/*.yml"), *ROOT.glob("molecule/**/*.yml")})
PYTHON_SOURCES = sorted(p for pattern in ("src/**/*.py", "plugins/filter/*.py",
                                          "plugins/callback/*.py", "roles/*/files/*.py",
                                          "vendors/**/*.py", "benchmarks/**/*.py")
                        for p in ROOT.glob(pattern) if "__pycache__" not in p.parts)
SHELLISH = {"shell", "raw", "script", "expect"}
SHELL_PROGRAMS = {"sh", "bash", "dash", "zsh", "ksh", "env", "sudo", "su", "eval", "xargs"}
TASK_KEYWORDS = {"block", "rescue", "always"}


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def load(path: Path) -> Any:
    return yaml.safe_load(path.read_text()) or []


def walk(node: Any) -> Iterator[dict]:
    """Every mapping anywhere in a YAML document."""
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from walk(value)


def tasks(node: Any) -> Iterator[dict]:
    """Every task of a task file or playbook, blocks and play sections opened."""
    if isinstance(node, list):
        for item in node:
            yield from tasks(item)
    elif isinstance(node, dict):
        sections = [k for k in ("tasks", "pre_tasks", "post_tasks", "handlers", *TASK_KEYWORDS)
                    if isinstance(node.get(k), list)]
        if sections:
            for key in sections:
                yield from tasks(node[key])
        elif "hosts" not in node and "import_playbook" not in str(list(node)):
            yield node


def module_of(task: dict) -> tuple[str, Any]:
    """``(short module name, its arguments)`` of a task."""
    for key, value in task.items():
        short = str(key).rsplit(".", 1)[-1]
        if short in SHELLISH | {"command", "docker_container"} or str(key).startswith(
                ("ansible.builtin.", "ansible.posix.", "community.")):
            return short, value
    return "", None


ALL_TASKS = [(path, task) for path in PLAY_FILES for task in tasks(load(path))]


def test_the_scan_sees_the_tasks():
    names = {module_of(task)[0] for _path, task in ALL_TASKS}
    assert {"command", "shell", "copy"} <= names, names
    assert len(ALL_TASKS) > 30


# -- privilege escalation ----------------------------------------------------------------------

def test_become_only_in_cache_clear_and_off_by_default():
    found = []
    for path in ALL_YAML:
        for mapping in walk(load(path)):
            found += [(rel(path), key) for key in mapping
                      if re.fullmatch(r"(ansible_)?become(_\w+)?", str(key))]
    assert found, "the scan finds cache_clear's become"
    outside = [(path, key) for path, key in found if not path.startswith("roles/cache_clear/")]
    assert outside == []
    defaults = load(ROOT / "roles/cache_clear/defaults/main.yml")
    assert defaults["cache_clear_become"] is False
    config = configparser.ConfigParser()
    config.read(ROOT / "ansible.cfg")
    assert not config.has_section("privilege_escalation") or not config.getboolean(
        "privilege_escalation", "become", fallback=False)


# -- ssh host keys -----------------------------------------------------------------------------

def test_ansible_cfg_checks_host_keys():
    config = configparser.ConfigParser()
    config.read(ROOT / "ansible.cfg")
    assert config.getboolean("defaults", "host_key_checking") is True
    ssh_args = config.get("ssh_connection", "ssh_args", fallback="")
    assert "StrictHostKeyChecking" not in ssh_args and "/dev/null" not in ssh_args


TRUST_OFF = re.compile(r"StrictHostKeyChecking\s*=?\s*(no|off|false|accept-new)|"
                       r"UserKnownHostsFile\s*=?\s*/dev/null|HOST_KEY_CHECKING\s*[=:]\s*['\"]?"
                       r"(false|no|0)", re.IGNORECASE)


def test_nothing_turns_host_key_checking_off():
    files = [*ALL_YAML, ROOT / "ansible.cfg", *PYTHON_SOURCES, ROOT / "tests/loopback_cluster.py",
             *ROOT.glob("*.md"), *ROOT.glob("docs/**/*.md"), *ROOT.glob("vendors/**/*.md"),
             *ROOT.glob(".ci/*"), ROOT / "Makefile"]
    scanned = [p for p in files if p.is_file()]
    hits = [f"{rel(p)}: {m.group(0)}" for p in scanned for m in TRUST_OFF.finditer(p.read_text())]
    assert len(scanned) > 40 and hits == []
    # The pattern is live: it sees the settings that would turn checking off.
    assert TRUST_OFF.search("ssh_args = -o StrictHostKeyChecking=no")
    assert TRUST_OFF.search("ANSIBLE_HOST_KEY_CHECKING: 'False'")


# -- containers ----------------------------------------------------------------------------------

def _container_module_args() -> dict:
    """The docker_container arguments of the container role's start step (its vars/main.yml)."""
    step = load(ROOT / "roles/container/vars/main.yml")["_container_start_step"]
    assert step["input_module"]["name"] == "community.docker.docker_container"
    assert step["input_module"]["args"]["state"] == "started"
    return step["input_module"]["args"]


def _privileged_of_the_container_task() -> str:
    return _container_module_args()["privileged"]


def _render(expression: str, **variables: Any) -> Any:
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template

    return Templar(loader=DataLoader(), variables=variables).template(trust_as_template(expression))


def _docker_plan(project: Path, vendor: str) -> dict:
    return build_plan({**yaml.safe_load((ROOT / "roles/flagperf/defaults/main.yml").read_text()),
                       "flagperf_vendor": vendor, "flagperf_container_runtime": "docker",
                       "flagperf_cases": ["sleep:pytorch:cpu:1:1:1"]},
                      {}, ["node1"], {"node1": "node1"}, project)


def test_containers_are_not_privileged_unless_the_vendor_says_so(scratch_project):
    expression = _privileged_of_the_container_task()
    # Every vendor in the checkout: its options, through the role's expression, say not privileged.
    for vendor_yml in sorted(ROOT.glob("vendors/*/vendor.yml")):
        container = (load(vendor_yml) or {}).get("container") or {}
        assert container.get("privileged", False) is False, rel(vendor_yml)
        assert _render(expression, container_options=container) is False
    # The reference vendor's plan, and a vendor that says nothing: not privileged.
    assert _render(expression, container_options=_docker_plan(ROOT, "cpu")["container"]) is False
    assert _render(expression, container_options={}) is False
    # A vendor that does say so gets it.
    acme = scratch_project / "vendors/acme"
    shutil.copytree(scratch_project / "vendors/cpu", acme)
    for path in acme.glob("inference/*/vendor_config/cpu_configurations.yaml"):
        path.rename(path.with_name("acme_configurations.yaml"))   # seed 004 names them by vendor
    text = (acme / "vendor.yml").read_text()
    (acme / "vendor.yml").write_text(text.replace("privileged: false", "privileged: true"))
    options = _docker_plan(scratch_project, "acme")["container"]
    assert options["privileged"] is True
    assert _render(expression, container_options=options) is True


def test_no_task_asks_for_privileged_containers_itself():
    hits = [rel(p) for p in PLAY_FILES if re.search(r"privileged:\s*(true|yes)\b|--privileged",
                                                     p.read_text(), re.IGNORECASE)]
    assert hits == []


# -- no shell strings from user values -----------------------------------------------------------

STEP_NAME = re.compile(r"_(monitor|launch|container|sys_info|slurm_job)(_[a-z_]+)?_steps?")


def step_definitions() -> dict[str, Any]:
    """Every role's steps (flagperf.benchmark.piped_script steps in roles/*/vars/main.yml):
    name -> one step, or a list of steps."""
    found = {}
    for path in ROOT.glob("roles/*/vars/main.yml"):
        found.update({k: v for k, v in (load(path) or {}).items() if STEP_NAME.fullmatch(k)})
    return found


def test_scripts_get_an_argument_list():
    """Our scripts go to the host's interpreter by `flagperf.benchmark.piped_script`, which
    quotes each element of `argv` as one word: no command line is built from values, and no
    task uses `ansible.builtin.script` (a command line string). The roles' step definitions
    (their vars/main.yml), which the roles' tasks and a round's combined steps run, are held
    to the same: constant module names of the host package, argument lists (or the package's argv builder
    after our options: a launcher's, a container's in a Slurm job, the sbatch line); a step's
    input module is a constant module name with a mapping of arguments, its input data (a Slurm
    job's definition) no command line. A task's `steps` names those definitions only."""
    scripts = [(rel(path), task) for path, task in ALL_TASKS
               if "flagperf.benchmark.piped_script" in task]
    assert {path for path, _task in scripts} >= {
        "roles/monitor/tasks/start.yml", "roles/monitor/tasks/stop.yml",
        "roles/sys_info/tasks/main.yml", "roles/launch/tasks/start.yml",
        "roles/launch/tasks/stop.yml", "roles/container/tasks/start.yml",
        "roles/container/tasks/end.yml", "playbooks/tasks/round.yml", "playbooks/tasks/node_end.yml"}
    definitions = step_definitions()
    assert {"_monitor_start_step", "_monitor_stop_step", "_launch_start_step", "_launch_stop_step",
            "_container_start_step", "_container_end_steps"} <= set(definitions)
    steps = []
    for path, task in scripts:
        args = task["flagperf.benchmark.piped_script"]
        where = f"{path}: {task.get('name')}"
        assert set(args) <= {"module", "argv", "steps", "keep_going", "executable"}, where
        if "steps" not in args:
            steps.append((where, {k: v for k, v in args.items() if k in ("module", "argv")}))
            continue
        named = set(STEP_NAME.findall(str(args["steps"])))
        words = re.findall(r"\b_[a-z_]+_steps?\b", str(args["steps"]))
        assert named and all(w in definitions for w in words), where
    for name, value in definitions.items():
        steps += [(name, step) for step in (value if isinstance(value, list) else [value])]
    for where, step in steps:
        assert set(step) <= {"module", "argv", "environment", "input", "input_module"}, where
        assert re.fullmatch(r"flagperf_host\.[a-z_]+", step["module"]), where
        if "input_module" in step:
            # A constant module, its arguments a mapping (module arguments, not words).
            assert "{{" not in step["input_module"]["name"], where
            assert isinstance(step["input_module"]["args"], dict), where
        argv = step.get("argv", [])
        if isinstance(argv, str):
            # One expression producing the list: the package's argv builder after our options.
            text = " ".join(argv.split())
            assert text.startswith("{{ [") and re.search(
                r"\+ (launch_round \| flagperf\.benchmark\.flagperf_launch_argv\("
                r"|container_round \| flagperf\.benchmark\.flagperf_container_argv\("
                r"|slurm_job_sbatch }}$)", text), where
        else:
            assert isinstance(argv, list), where
    assert not [rel(path) for path, task in ALL_TASKS if module_of(task)[0] == "script"]


def test_the_only_shell_is_cache_clears_constant_command():
    shells = [(rel(path), task) for path, task in ALL_TASKS
              if module_of(task)[0] in SHELLISH - {"script"}]
    assert [path for path, _task in shells] == ["roles/cache_clear/tasks/main.yml"]
    args = module_of(shells[0][1])[1]
    command = args["cmd"] if isinstance(args, dict) else args
    assert "{{" not in command and "{%" not in command
    assert not any(k in shells[0][1] for k in ("loop", "with_items", "vars", "args"))


def test_every_command_task_passes_argv():
    commands = [(rel(path), task) for path, task in ALL_TASKS if module_of(task)[0] == "command"]
    assert len(commands) >= 1
    for path, task in commands:
        args = module_of(task)[1]
        where = f"{path}: {task.get('name')}"
        assert isinstance(args, dict), f"{where}: free-form command"
        assert "argv" in args and "cmd" not in args, where
        assert "_raw_params" not in task.get("args", {}), where
        argv = args["argv"]
        if isinstance(argv, list):
            # Each element reaches the program as one argument; no element hands a string to a
            # shell or an interpreter to run.
            programs = [Path(str(e)).name for e in argv]
            assert not set(programs) & SHELL_PROGRAMS, where
            assert "-c" not in argv[1:2] and "-e" not in argv[1:2], where
        else:
            # One expression producing the list: the package's argv builder.
            assert "flagperf_launch_argv" in argv, where


def test_container_commands_come_from_the_argv_builder():
    runs = [(rel(path), module_of(task)[1]) for path, task in ALL_TASKS
            if module_of(task)[0] == "docker_container" and "command" in module_of(task)[1]]
    runs.append(("roles/container/vars/main.yml", _container_module_args()))
    for path, args in runs:
        assert "flagperf_launch_argv" in str(args["command"]), path
        assert "entrypoint" not in args, path


def _calls(path: Path) -> Iterator[tuple[str, ast.Call]]:
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else (
                f"{getattr(func.value, 'id', '?')}.{func.attr}" if isinstance(func, ast.Attribute)
                else "")
            yield name, node


def test_python_runs_no_shell_and_evaluates_no_text():
    assert len(PYTHON_SOURCES) > 20
    found = []
    for path in PYTHON_SOURCES:
        for name, call in _calls(path):
            shell = any(k.arg == "shell" and not (isinstance(k.value, ast.Constant)
                                                   and k.value.value is False)
                        for k in call.keywords)
            if shell or name in {"eval", "exec", "os.system", "os.popen", "compile"}:
                found.append(f"{rel(path)}:{call.lineno}: {name}")
    assert found == []


def test_the_python_scan_sees_a_shell_call(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("import subprocess, os\nsubprocess.run('id', shell=True)\nos.system('id')\n")
    names = [(name, any(k.arg == "shell" for k in call.keywords)) for name, call in _calls(sample)]
    assert ("subprocess.run", True) in names and ("os.system", False) in names


# -- non-root ssh user -----------------------------------------------------------------------------

def test_the_loopback_cluster_connects_as_a_non_root_user():
    tree = ast.parse((ROOT / "tests/loopback_cluster.py").read_text())
    user = next(node.value.value for node in tree.body if isinstance(node, ast.Assign)
                and any(getattr(t, "id", "") == "USER" for t in node.targets))
    assert user and user != "root"
    # The inventory it writes names that user.
    values = [node.values[node.keys.index(key)] for node in ast.walk(tree)
              if isinstance(node, ast.Dict)
              for key in node.keys if isinstance(key, ast.Constant) and key.value == "ansible_user"]
    assert values and all(isinstance(v, ast.Name) and v.id == "USER" for v in values)
    # It adds that user without sudo rights (only to the docker group).
    source = (ROOT / "tests/loopback_cluster.py").read_text()
    assert "sudo" not in re.findall(r'run\("useradd"[^)]*\)', source)[0]


def test_documented_inventories_connect_as_a_non_root_user():
    users = {}
    for path in sorted(ROOT.glob("inventories/**/*.yml")):
        for mapping in walk(load(path)):
            if "ansible_user" in mapping:
                users[rel(path)] = mapping["ansible_user"]
    assert users, "the example cluster inventory names its ssh user"
    assert all(user not in ("root", 0, "0") for user in users.values()), users
    docs = [*ROOT.glob("*.md"), *ROOT.glob("docs/**/*.md"), *ROOT.glob("vendors/**/*.md")]
    in_docs = [m.group(1) for p in docs
               for m in re.finditer(r"ansible_user\W{1,3}(\w+)", p.read_text())]
    assert "root" not in in_docs


@pytest.mark.parametrize("inventory", sorted(p.parent for p in ROOT.glob("inventories/*/hosts.yml")),
                         ids=lambda p: p.name)
def test_ssh_inventories_name_a_user(inventory, monkeypatch):
    """Hosts reached over ssh say which (non-root) user; local connections need none (as
    Ansible resolves each host's variables)."""
    from flagperf_ansible.config.inventory import read_inventory

    monkeypatch.setenv("ANSIBLE_CONFIG", str(ROOT / "ansible.cfg"))
    loaded = read_inventory([str(inventory)])
    assert loaded.hosts
    for host in loaded.hosts:
        host_vars = loaded.host_vars[host]
        if host_vars.get("ansible_connection") == "local":
            continue
        assert host_vars.get("ansible_user") not in (None, "root"), (inventory.name, host)
