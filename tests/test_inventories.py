"""Any inventory Ansible reads, through both front doors: ``flagperf-ansible validate`` and
``run`` (the wrapper) and ``ansible-playbook site.yml``, with a YAML folder, an INI file, an
executable inventory script, the ``constructed`` plugin, two ``-i`` sources, ``-e @file``
overriding the case list and ``--limit`` to one host. Each kind runs one round of the
diagnostic case both ways, and both write the same plan.json.

The hosts are reached with ``ansible_connection: local`` (the loopback sshd cluster tests run
the same playbooks over ssh); the case code is this checkout itself.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from flagperf_ansible.config.errors import ConfigError
from flagperf_ansible.config.inventory import read_inventory

ROOT = Path(__file__).resolve().parents[1]
SLEEP = "sleep:pytorch:cpu:1:1:1"
HOST = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}

def settings(base: Path, kind: str, cases: list[str] | None = None) -> dict:
    """The group_vars of every kind: this checkout as flagperf_root, no cache clearing, a host
    folder and results folder of its own (the kinds run side by side)."""
    return {"flagperf_vendor": "cpu", "flagperf_container_runtime": "none",
            "flagperf_root": str(ROOT), "flagperf_python": sys.executable,
            "flagperf_workdir": str(base / "work" / kind), "flagperf_clear_caches": False,
            "flagperf_results_dir": str(base / "results" / kind),
            "flagperf_cases": cases or [SLEEP]}


def write(path: Path, text: str, executable: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    if executable:
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def group_vars(folder: Path, values: dict) -> None:
    write(folder / "group_vars" / "all.yml", yaml.safe_dump(values))


def yaml_hosts(folder: Path, *names: str, name: str = "hosts.yml") -> Path:
    """A YAML inventory file listing ``names`` under flagperf_hosts."""
    return write(folder / name, yaml.safe_dump(
        {"all": {"children": {"flagperf_hosts": {"hosts": {n: HOST for n in names}}}}}))


def ini_host(name: str) -> str:
    return f"{name} ansible_connection=local ansible_python_interpreter={sys.executable}"


def make_inventories(base: Path) -> dict[str, tuple[list[str], int]]:
    """Each kind's command-line arguments (-i, -e, --limit) and the hosts its plan has."""
    kinds: dict[str, tuple[list[str], int]] = {}

    folder = base / "yaml"
    yaml_hosts(folder, "bench1")
    group_vars(folder, settings(base, "yaml-folder"))
    kinds["yaml-folder"] = (["-i", str(folder)], 1)

    folder = base / "ini"
    write(folder / "hosts.ini", f"""\
        [flagperf_hosts]
        {ini_host("bench1")}

        [flagperf_hosts:vars]
        flagperf_master_port=29511
        """)
    group_vars(folder, settings(base, "ini-file"))
    kinds["ini-file"] = (["-i", str(folder / "hosts.ini")], 1)

    # An executable inventory script: Ansible's script plugin runs it with --list.
    folder = base / "script"
    inventory = {"flagperf_hosts": {"hosts": ["bench1"], "vars": settings(base, "script")},
                 "_meta": {"hostvars": {"bench1": HOST}}}
    write(folder / "inventory.py", f"""\
        #!{sys.executable}
        import json
        print(json.dumps({inventory!r}))
        """, executable=True)
    kinds["script"] = (["-i", str(folder / "inventory.py")], 1)

    # The constructed plugin makes the group from a host variable, in a folder of sources
    # that Ansible reads in name order.
    folder = base / "constructed"
    write(folder / "01-hosts.yml", yaml.safe_dump(
        {"all": {"hosts": {"bench1": {**HOST, "bench_role": "trainer"},
                           "other": {**HOST, "bench_role": "storage"}}}}))
    write(folder / "02-groups.yml", """\
        plugin: ansible.builtin.constructed
        strict: true
        groups:
          flagperf_hosts: bench_role == 'trainer'
        """)
    group_vars(folder, settings(base, "constructed"))
    kinds["constructed"] = (["-i", str(folder)], 1)

    # Two sources: the hosts in YAML, a second host and a setting in INI.
    folder = base / "two"
    yaml_hosts(folder, "bench1")
    write(folder / "more.ini", f"""\
        [flagperf_hosts]
        {ini_host("bench2")}

        [flagperf_hosts:vars]
        flagperf_monitor_interval=0.5
        """)
    group_vars(folder, settings(base, "two-sources"))
    kinds["two-sources"] = (["-i", str(folder / "hosts.yml"), "-i", str(folder / "more.ini")], 2)

    # -e @file replaces the inventory's case list (three rounds there, one here).
    folder = base / "extra"
    yaml_hosts(folder, "bench1")
    group_vars(folder, settings(base, "extra-vars-file", cases=["sleep:pytorch:cpu:1:1:3"]))
    cases = write(base / "cases.yml", yaml.safe_dump({"flagperf_cases": [SLEEP]}))
    kinds["extra-vars-file"] = (["-i", str(folder), "-e", f"@{cases}"], 1)

    # --limit to the second of two hosts: noderank 0 is bench2.
    folder = base / "limit"
    yaml_hosts(folder, "bench1", "bench2")
    group_vars(folder, settings(base, "limit"))
    kinds["limit"] = (["-i", str(folder), "--limit", "bench2"], 1)
    return kinds


@pytest.fixture(scope="module")
def inventories(tmp_path_factory) -> tuple[Path, dict[str, tuple[list[str], int]]]:
    base = tmp_path_factory.mktemp("inventories")
    return base, make_inventories(base)


def environment(base: Path, kind: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["ANSIBLE_CONFIG"] = str(ROOT / "ansible.cfg")
    # The kinds run side by side and name their hosts alike: a fact cache of each kind's own.
    env["ANSIBLE_CACHE_PLUGIN_CONNECTION"] = str(base / "facts" / kind)
    env["COLUMNS"] = "300"
    return env


KINDS = ["yaml-folder", "ini-file", "script", "constructed", "two-sources", "extra-vars-file",
         "limit"]


def run_kind(base: Path, kind: str, args: list[str]) -> dict[str, subprocess.CompletedProcess]:
    """``validate``, a one-round ``run`` and ``ansible-playbook site.yml`` with one kind."""
    def call(argv: list[str]) -> subprocess.CompletedProcess:
        return subprocess.run(argv, cwd=base, env=environment(base, kind), capture_output=True,
                              text=True, timeout=900)

    done = {"validate": call([sys.executable, "-m", "flagperf_ansible", "validate", *args]),
            "run": call([sys.executable, "-m", "flagperf_ansible", "run", *args])}
    # ansible-playbook's --limit skips the controller's plays (hosts: localhost) unless it
    # names localhost; the wrapper adds it.
    site_args = [f"{a},localhost" if i and args[i - 1] == "--limit" else a
                 for i, a in enumerate(args)]
    done["site"] = call(["ansible-playbook", str(ROOT / "site.yml"), *site_args])
    return done


@pytest.fixture(scope="module")
def outcomes(ansible_playbook, inventories) -> dict[str, dict[str, subprocess.CompletedProcess]]:
    """Each kind's three commands; the kinds side by side (each its own folders and facts)."""
    base, kinds = inventories
    with ThreadPoolExecutor(max_workers=3) as pool:
        futures = {kind: pool.submit(run_kind, base, kind, kinds[kind][0]) for kind in KINDS}
        return {kind: future.result() for kind, future in futures.items()}


def comparable(plan: dict) -> dict:
    """A plan less what differs between two runs of the same input (none today: the run id
    and times are run.json's, not the plan's)."""
    return {k: v for k, v in plan.items() if k not in ("run_id", "created")}


@pytest.mark.parametrize("kind", KINDS)
def test_both_front_doors_plan_and_run_the_same(inventories, outcomes, kind):
    base, kinds = inventories
    host_count = kinds[kind][1]
    results = base / "results" / kind
    done = outcomes[kind]

    validated = done["validate"]
    assert validated.returncode == 0, validated.stdout + validated.stderr
    assert f"1 round(s) on {host_count} host(s): sleep-pytorch-cpux1x1" in validated.stdout
    for step in ("run", "site"):
        assert done[step].returncode == 0, done[step].stdout[-3000:] + done[step].stderr[-3000:]
    runs = sorted(results.glob("run*"))
    assert len(runs) == 2, runs

    plans = [json.loads((run / "plan.json").read_text()) for run in runs]
    assert comparable(plans[0]) == comparable(plans[1])
    plan = plans[0]
    assert len(plan["hosts"]) == host_count and [r["key"] for r in plan["rounds"]] == \
        ["sleep-pytorch-cpux1x1/round1"]
    first = "bench2" if kind == "limit" else "bench1"
    assert plan["rounds"][0]["hosts"] == [first]
    for run in runs:
        summary = json.loads((run / "summary.json").read_text())
        assert summary["status"] == "passed", summary
        document = json.loads((run / "sleep-pytorch-cpux1x1/round1/round.json").read_text())
        assert document["status"] == "passed" and document["nodes"][0]["host"] == first
        assert (run / f"sleep-pytorch-cpux1x1/round1/{first}_noderank0/rank0.out.log").is_file()
    if kind == "ini-file":
        assert plan["rounds"][0]["master_addr"] == "bench1"


# -- where a value came from, without running anything ----------------------------------------

def bad_value(base: Path, files: dict[str, str], args: list[str] | None = None) -> str:
    """The one error line of ``read_inventory`` on an inventory made of ``files``."""
    for name, text in files.items():
        write(base / name, text)
    argv = args or ["-i", str(base / "inv")]
    sources = [argv[i + 1] for i, a in enumerate(argv) if a == "-i"]
    extra = [argv[i + 1] for i, a in enumerate(argv) if a == "-e"]
    limit = next((argv[i + 1] for i, a in enumerate(argv) if a == "--limit"), None)
    from flagperf_ansible.run.plan import build_plan

    with pytest.MonkeyPatch.context() as patch, pytest.raises(ConfigError) as caught:
        patch.setenv("ANSIBLE_CONFIG", str(ROOT / "ansible.cfg"))
        run = read_inventory(sources, extra, limit)
        build_plan(run.settings, run.origins, run.hosts,
                   {h: run.address(h) for h in run.hosts}, ROOT)
    return str(caught.value)


GOOD_VARS = yaml.safe_dump({"flagperf_cases": [SLEEP]})


def test_a_bad_value_in_an_ini_inventory_names_the_ini_file(tmp_path):
    ini = "[flagperf_hosts]\nnode1\n\n[flagperf_hosts:vars]\nflagperf_master_port={}\n"
    line = bad_value(tmp_path / "a", {"inv/hosts.ini": ini.format(80),
                                      "inv/group_vars/all.yml": GOOD_VARS},
                     ["-i", str(tmp_path / "a" / "inv" / "hosts.ini")])
    assert "hosts.ini: flagperf_master_port:" in line, line
    # group_vars/all outranks a group's vars in the inventory itself (Ansible's precedence):
    # the value that counts, and the file named, are group_vars/all's.
    line = bad_value(tmp_path / "b", {"inv/hosts.ini": ini.format(29500),
                                      "inv/group_vars/all.yml": GOOD_VARS + "flagperf_master_port: 80\n"},
                     ["-i", str(tmp_path / "b" / "inv" / "hosts.ini")])
    assert "group_vars/all.yml: flagperf_master_port:" in line, line


def test_a_bad_value_in_group_vars_of_a_child_group_names_that_file(tmp_path):
    line = bad_value(tmp_path, {"inv/hosts.ini": "[flagperf_hosts]\nnode1\n",
                                "inv/group_vars/all.yml": GOOD_VARS,
                                "inv/group_vars/flagperf_hosts/ports.yml": "flagperf_master_port: x\n"},
                     ["-i", str(tmp_path / "inv" / "hosts.ini")])
    assert "group_vars/flagperf_hosts/ports.yml: flagperf_master_port:" in line, line


def test_a_bad_value_from_extra_vars_names_them(tmp_path):
    files = {"inv/hosts.ini": "[flagperf_hosts]\nnode1\n", "inv/group_vars/all.yml": GOOD_VARS}
    line = bad_value(tmp_path, files, ["-i", str(tmp_path / "inv"), "-e", "flagperf_vendor=acme"])
    assert line.startswith("extra vars: flagperf_vendor:"), line
    write(tmp_path / "more.yml", "flagperf_wait_slice: -1\n")
    line = bad_value(tmp_path, files, ["-i", str(tmp_path / "inv"), "-e", f"@{tmp_path / 'more.yml'}"])
    assert "more.yml: flagperf_wait_slice:" in line, line


def test_an_ini_file_ansible_cannot_read_is_one_line_naming_it(tmp_path):
    line = bad_value(tmp_path, {"inv/hosts.ini": "[flagperf_hosts\nnode1 = =\n"},
                     ["-i", str(tmp_path / "inv" / "hosts.ini")])
    assert "hosts.ini: not an inventory Ansible can read" in line and "\n" not in line, line


def test_a_limit_that_leaves_no_benchmark_host_is_refused(tmp_path):
    line = bad_value(tmp_path, {"inv/hosts.ini": "[flagperf_hosts]\nnode1\n[others]\nnode9\n",
                                "inv/group_vars/all.yml": GOOD_VARS},
                     ["-i", str(tmp_path / "inv"), "--limit", "node9"])
    assert line.startswith("command line: --limit: leaves no host of flagperf_hosts"), line


def test_one_machine_listed_twice_is_refused_and_distinct_endpoints_are_not(tmp_path):
    # A host's name is its address when ansible_host is not set.
    line = bad_value(tmp_path / "a", {
        "inv/hosts.ini": "[flagperf_hosts]\n10.0.0.7\nnode2 ansible_host=10.0.0.7\n",
        "inv/group_vars/all.yml": GOOD_VARS}, ["-i", str(tmp_path / "a" / "inv" / "hosts.ini")])
    assert "flagperf_hosts.node2.ansible_host: the same address as host 10.0.0.7" in line, line
    # Another port of the same address is another sshd; local hosts are not reached by address.
    for name, ini in (("ports", "node1 ansible_host=10.0.0.7 ansible_port=2201\n"
                                "node2 ansible_host=10.0.0.7 ansible_port=2202\n"),
                      ("local", "node1 ansible_connection=local\nnode2 ansible_connection=local\n")):
        folder = write(tmp_path / name / "hosts.ini", "[flagperf_hosts]\n" + ini).parent
        group_vars(folder, {"flagperf_cases": [SLEEP]})
        assert read_inventory([str(folder / "hosts.ini")]).hosts == ["node1", "node2"]
