"""A copy of the checkout's runnable parts, for tests that change a case or vendor file."""

import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PARTS = ("benchmarks", "vendors", "roles", "playbooks", "plugins", "collections", "schemas",
         "inventories", "site.yml", "ansible.cfg")


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
