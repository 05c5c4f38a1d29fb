"""Read an inventory's settings the way Ansible will, remembering which file set each key.

Supported layout (Ansible's own): INVENTORY is a YAML inventory file, or a directory holding
``hosts.yml`` (or ``hosts.yaml``) beside ``group_vars/`` and ``host_vars/``. The hosts a run uses
are the members of the group ``flagperf_hosts``, in inventory order; noderank 0 comes first.
Settings (``flagperf_*``) come, lowest first, from ``roles/flagperf/defaults/main.yml``, the
inventory's ``all`` vars, ``group_vars/all``, the ``flagperf_hosts`` group's vars and
``group_vars/flagperf_hosts``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from flagperf_ansible.yamlio import read_yaml
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


GROUP_KEYS = ("hosts", "children", "vars")
#: Host names and addresses: DNS names, IPv4 and IPv6 (a zone after '%'); never a leading '-'
#: (ssh would read it as an option).
HOST_PATTERN = re.compile(r"[A-Za-z0-9_:\[][A-Za-z0-9_.:%\[\]-]{0,252}")
USER_PATTERN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}")


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


def _kind(value: Any) -> str:
    return {list: "a list", str: "a string", int: "a number", float: "a number",
            bool: "a boolean"}.get(type(value), type(value).__name__)


def _collect_groups(tree: dict[str, Any], groups: dict[str, Any], source: str,
                    parent: str = "") -> None:
    """Gather every group of ``tree`` by name, checking each has Ansible's YAML shape.

    Raises:
        ConfigError: a group, its ``hosts``, ``children`` or ``vars``, or a host's variables
        are not mappings, or a group has a key other than hosts, children and vars.
    """
    for name, body in tree.items():
        where = f"{parent}.{name}" if parent else str(name)
        if body is None:
            body = {}
        if not isinstance(body, dict):
            raise ConfigError(f"a group is a mapping with hosts, children or vars, "
                              f"not {_kind(body)}", source, where)
        unknown = sorted(str(k) for k in body if k not in GROUP_KEYS)
        if unknown:
            raise ConfigError("unknown key in a group (hosts, children, vars)", source,
                              f"{where}.{unknown[0]}")
        for part in GROUP_KEYS:
            value = body.get(part)
            if value is not None and not isinstance(value, dict):
                what = {"hosts": "host names to their variables", "children": "group names",
                        "vars": "variable names to values"}[part]
                raise ConfigError(f"expected a mapping of {what}, not {_kind(value)}",
                                  source, f"{where}.{part}")
        for host, hvars in (body.get("hosts") or {}).items():
            if hvars is not None and not isinstance(hvars, dict):
                raise ConfigError(f"a host's variables are a mapping, not {_kind(hvars)}",
                                  source, f"{where}.hosts.{host}")
        groups[name] = body
        _collect_groups(body.get("children") or {}, groups, source, f"{where}.children")


def _templated(value: Any) -> bool:
    return isinstance(value, str) and "{{" in value


def check_hosts(hosts: list[str], host_vars: Mapping[str, Mapping[str, Any]],
                source: str | Callable[[str, str], str]) -> None:
    """Check the benchmark hosts' names and connection variables are safe and well formed.

    Host names become folder names on the controller, addresses and users end up in ssh's
    argv and MASTER_ADDR; a value Ansible renders later (``{{ ... }}``) is left to it.

    Args:
        hosts: the members of ``flagperf_hosts``.
        host_vars: each host's variables (``ansible_host``, ``ansible_port``, ``ansible_user``).
        source: the file that lists the hosts, or a function (host, variable) -> the file
            that set it (variable "" for the host's name).

    Raises:
        ConfigError: naming the file and ``flagperf_hosts.<host>[.<variable>]``.
    """
    def where(host: str, variable: str) -> str:
        return source(host, variable) if callable(source) else source

    for host in hosts:
        key = f"{HOST_GROUP}.{host}"
        if not isinstance(host, str) or not HOST_PATTERN.fullmatch(host):
            raise ConfigError(
                f"{host!r} is not a safe host name (letters, digits, '.', '-', '_', ':'; "
                f"not starting with '-')", where(host, ""), key)
        hvars = host_vars.get(host) or {}
        address = hvars.get("ansible_host")
        if address is not None and not _templated(address) and (
                not isinstance(address, str) or not HOST_PATTERN.fullmatch(address)):
            raise ConfigError(f"{address!r} is not a host name or IP address",
                              where(host, "ansible_host"), f"{key}.ansible_host")
        port = hvars.get("ansible_port")
        if port is not None and not _templated(port):
            text = str(port).strip()
            if isinstance(port, bool) or not text.isascii() or not text.isdigit() \
                    or not 1 <= int(text) <= 65535:
                raise ConfigError(f"{port!r} is not a port (1..65535)",
                                  where(host, "ansible_port"), f"{key}.ansible_port")
        user = hvars.get("ansible_user")
        if user is not None and not _templated(user) and (
                not isinstance(user, str) or not USER_PATTERN.fullmatch(user)):
            raise ConfigError(f"{user!r} is not a safe user name", where(host, "ansible_user"),
                              f"{key}.ansible_user")


CONNECTION_VARS = ("ansible_host", "ansible_port", "ansible_user")


def _check_connections(hosts: list[str], groups: dict[str, Any], base: Path, shown: str) -> None:
    """``check_hosts`` over the connection variables each host gets, lowest first from the
    ``all`` and ``flagperf_hosts`` vars (inline and group_vars files), then the host's own
    (inline, then host_vars), remembering the file that set each."""
    values: dict[str, dict[str, Any]] = {h: {} for h in hosts}
    origin: dict[tuple[str, str], str] = {}

    def take(host: str, variables: Mapping[str, Any], file: str) -> None:
        for name in CONNECTION_VARS:
            if name in variables:
                values[host][name] = variables[name]
                origin[(host, name)] = file

    for host in hosts:
        for group in ("all", HOST_GROUP):
            take(host, (groups.get(group) or {}).get("vars") or {}, shown)
            for vars_file in _vars_files(base / "group_vars", group):
                take(host, _mapping(vars_file), _shown(vars_file))
        for group in groups.values():
            take(host, ((group.get("hosts") or {}).get(host) or {}), shown)
        for vars_file in _vars_files(base / "host_vars", host):
            take(host, _mapping(vars_file), _shown(vars_file))
    check_hosts(hosts, values, lambda host, name: origin.get((host, name), shown))


def _check_host_settings(hosts: list[str], groups: dict[str, Any], base: Path, shown: str,
                         settings: dict[str, Any], origins: dict[str, str]) -> None:
    """A host's own ``flagperf_*`` variables (inline or host_vars) are checked like the
    group's: Ansible gives them to that host's plays."""
    from flagperf_ansible.settings import check_settings

    for host in hosts:
        own: dict[str, Any] = {}
        own_origins: dict[str, str] = {}
        sources = [((g.get("hosts") or {}).get(host) or {}, shown) for g in groups.values()]
        sources += [(_mapping(f), _shown(f)) for f in _vars_files(base / "host_vars", host)]
        for variables, file in sources:
            for key, value in variables.items():
                if str(key).startswith("flagperf_"):
                    own[key], own_origins[key] = value, file
        if own:
            check_settings({**settings, **own}, {**origins, **own_origins})


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

    shown = _shown(hosts_file)
    tree = read_yaml(hosts_file) or {}
    if not isinstance(tree, dict):
        raise ConfigError(f"an inventory is a mapping of groups, not {_kind(tree)}", shown)
    groups: dict[str, Any] = {}
    _collect_groups(tree, groups, shown)
    if HOST_GROUP not in groups:
        raise ConfigError(f"no group '{HOST_GROUP}': list the benchmark hosts under it", shown)
    hosts = _group_members(groups, HOST_GROUP)
    if not hosts:
        raise ConfigError("the group has no hosts", shown, HOST_GROUP)

    host_vars: dict[str, dict[str, Any]] = {}
    for group in groups.values():
        for host, hvars in (group.get("hosts") or {}).items():
            host_vars.setdefault(host, {}).update(hvars or {})
    for host in hosts:
        for vars_file in _vars_files(base / "host_vars", host):
            host_vars.setdefault(host, {}).update(_mapping(vars_file))
    _check_connections(hosts, groups, base, shown)

    settings: dict[str, Any] = {}
    origins: dict[str, str] = {}

    def merge(values: dict[str, Any], origin: str) -> None:
        for key, value in values.items():
            if str(key).startswith("flagperf_"):
                settings[key] = value
                origins[key] = origin

    defaults = project / DEFAULTS
    merge(_mapping(defaults), str(DEFAULTS))
    merge((groups.get("all") or {}).get("vars") or {}, shown)
    for vars_file in _vars_files(base / "group_vars", "all"):
        merge(_mapping(vars_file), _shown(vars_file))
    merge((groups.get(HOST_GROUP) or {}).get("vars") or {}, shown)
    for vars_file in _vars_files(base / "group_vars", HOST_GROUP):
        merge(_mapping(vars_file), _shown(vars_file))
    _check_host_settings(hosts, groups, base, shown, settings, origins)
    return Inventory(path=path, hosts=hosts, host_vars=host_vars, settings=settings, origins=origins)


def _mapping(path: Path) -> dict[str, Any]:
    data = read_yaml(path)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError("expected a mapping of variables", _shown(path))
    return data
