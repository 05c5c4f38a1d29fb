"""A copy of the checkout's runnable parts, for tests that change a case or vendor file, and
a one-host inventory for runs on this machine."""

import shutil
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
PARTS = ("benchmarks", "vendors", "src/flagperf_host", "roles", "playbooks", "plugins", "collections",
         "schemas", "inventories", "site.yml", "ansible.cfg")


def copy_checkout(target: Path) -> Path:
    """Copy what ansible-playbook runs (roles, playbooks, plugins, cases, vendors, inventories,
    ansible.cfg) to ``target``; returns it."""
    for part in PARTS:
        source = ROOT / part
        if source.is_dir():
            shutil.copytree(source, target / part, symlinks=True,
                            ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(source, target / part)
    return target


def shorten_profiles(project: Path, edits: dict[str, dict]) -> Path:
    """Set keys among the ``params`` of YAML case profiles in the checkout copy ``project``
    (``edits``: profile path relative to it, then keys). A shortened profile's target is one a
    model meets without learning, so its ``baselines`` are dropped: its rounds score none and
    are not failed for that. Its ``scaling`` goes with them: a target that proves nothing
    holds at any topology, so such a round proves distribution only. Returns ``project``."""
    for name, params in edits.items():
        document = yaml.safe_load((project / name).read_text())
        document["params"].update(params)
        document["profile"].pop("baselines", None)
        document["profile"].pop("scaling", None)
        (project / name).write_text(yaml.safe_dump(document, sort_keys=False))
    return project


def write_local_inventory(folder: Path, settings: dict) -> Path:
    """``folder/hosts.yml`` with this machine as the one flagperf host (``ansible_connection:
    local``, this Python) and ``settings`` as ``folder/group_vars/all.yml``; returns ``folder``."""
    (folder / "group_vars").mkdir(parents=True)
    (folder / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": {"flagperf_hosts": {
        "hosts": {"localhost": {"ansible_connection": "local",
                                "ansible_python_interpreter": sys.executable}}}}}}))
    (folder / "group_vars/all.yml").write_text(yaml.safe_dump(settings))
    return folder
