"""Read an inventory's settings the way Ansible will, remembering which file set each key.

Supported layout (Ansible's own): INVENTORY is a YAML inventory file, or a directory holding
``hosts.yml`` (or ``hosts.yaml``) beside ``group_vars/`` and ``host_vars/``. The hosts a run uses
are the members of the group ``flagperf_hosts``, in inventory order; noderank 0 comes first.
Settings (``flagperf_*``) come, lowest first, from ``roles/flagperf/defaults/main.yml``, the
inventory's ``all`` vars, ``group_vars/all``, the ``flagperf_hosts`` group's vars and
``group_vars/flagperf_hosts``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flagperf_ansible.cases import read_yaml
from flagperf_ansible.errors import ConfigError

HOST_GROUP = "flagperf_hosts"
DEFAULTS = Path("roles/flagperf/defaults/main.yml")


@dataclass
class Inventory:
    """What validation needs of an inventory."""

    path: Path
    hosts: list[str]
    host_vars: dict[str, dict[str, Any]]
    settings: dict[str, Any]
    origins: dict[str, str] = field(default_factory=dict)

    def address(self, host: str) -> str:
        """The address other hosts reach ``host`` at (``ansible_host``, else its name)."""
        return str(self.host_vars.get(host, {}).get("ansible_host", host))


def _shown(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _vars_files(directory: Path, name: str) -> list[Path]:
    """``group_vars/<name>.yml`` or every YAML file of ``group_vars/<name>/``, Ansible's order."""
    files = [directory / f"{name}{ext}" for ext in ("", ".yml", ".yaml")]
    found = [f for f in files if f.is_file()]
    folder = directory / name
    if folder.is_dir():
        found += sorted(p for p in folder.rglob("*") if p.suffix in (".yml", ".yaml") and p.is_file())
    return found


def _group_members(groups: dict[str, Any], name: str, seen: set[str] | None = None) -> list[str]:
    seen = seen or set()
    if name in seen:
        return []
    seen.add(name)
    group = groups.get(name) or {}
    members = list((group.get("hosts") or {}).keys())
    for child in (group.get("children") or {}):
        members += [h for h in _group_members(groups, child, seen) if h not in members]
    return members


def _collect_groups(tree: dict[str, Any], groups: dict[str, Any]) -> None:
    for name, body in tree.items():
        body = body or {}
        groups[name] = body
        _collect_groups(body.get("children") or {}, groups)


def load_inventory(path: str | Path, project: Path) -> Inventory:
    """Load ``path`` (file or directory) with its group_vars and host_vars.

    Raises:
        ConfigError: naming the file (and key) that is missing or malformed.
    """
    path = Path(path)
    if path.is_dir():
        candidates = [path / n for n in ("hosts.yml", "hosts.yaml", "hosts")]
        hosts_file = next((c for c in candidates if c.is_file()), None)
        if hosts_file is None:
            raise ConfigError("no hosts.yml in the inventory directory", _shown(path))
        base = path
    elif path.is_file():
        hosts_file, base = path, path.parent
    else:
        raise ConfigError("no such inventory file or directory", _shown(path))

    tree = read_yaml(hosts_file) or {}
    if not isinstance(tree, dict):
        raise ConfigError("an inventory is a mapping of groups", _shown(hosts_file))
    groups: dict[str, Any] = {}
    _collect_groups(tree, groups)
    if HOST_GROUP not in groups:
        raise ConfigError(f"no group '{HOST_GROUP}': list the benchmark hosts under it",
                          _shown(hosts_file))
    hosts = _group_members(groups, HOST_GROUP)
    if not hosts:
        raise ConfigError("the group has no hosts", _shown(hosts_file), HOST_GROUP)

    host_vars: dict[str, dict[str, Any]] = {}
    for group in groups.values():
        for host, hvars in (group.get("hosts") or {}).items():
            host_vars.setdefault(host, {}).update(hvars or {})
    for host in hosts:
        for vars_file in _vars_files(base / "host_vars", host):
            host_vars.setdefault(host, {}).update(_mapping(vars_file))

    settings: dict[str, Any] = {}
    origins: dict[str, str] = {}

    def merge(values: dict[str, Any], origin: str) -> None:
        for key, value in values.items():
            if str(key).startswith("flagperf_"):
                settings[key] = value
                origins[key] = origin

    defaults = project / DEFAULTS
    merge(_mapping(defaults), str(DEFAULTS))
    merge((groups.get("all") or {}).get("vars") or {}, _shown(hosts_file))
    for vars_file in _vars_files(base / "group_vars", "all"):
        merge(_mapping(vars_file), _shown(vars_file))
    merge((groups.get(HOST_GROUP) or {}).get("vars") or {}, _shown(hosts_file))
    for vars_file in _vars_files(base / "group_vars", HOST_GROUP):
        merge(_mapping(vars_file), _shown(vars_file))
    return Inventory(path=path, hosts=hosts, host_vars=host_vars, settings=settings, origins=origins)


def _mapping(path: Path) -> dict[str, Any]:
    data = read_yaml(path)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError("expected a mapping of variables", _shown(path))
    return data
