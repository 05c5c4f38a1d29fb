"""The run's hosts and settings as Ansible itself reads them: the one front door of validation.

Hosts and variables come from ansible-core's own inventory and variable managers, so every
source ``ansible-playbook -i`` accepts works the same here: a YAML or INI file, a folder of
several sources with its ``group_vars/`` and ``host_vars/``, an executable inventory script, an
inventory plugin such as ``constructed``, and several ``-i``. Extra vars take
``ansible-playbook``'s ``-e`` syntax (``k=v``, YAML/JSON, ``@file``) and win over everything;
``--limit`` narrows the hosts as it does for a play. The benchmark hosts are the members of
the group ``flagperf_hosts`` left by the limit, in inventory order: noderank 0 comes first.

The wrapper (``run``, ``validate``) and the preflight play (the ``flagperf_plan`` filter) both
call ``read_inventory`` with the same sources, extra vars and limit, so both plan the same run.
Where a value came from a file, errors name that file: the inventories' ``group_vars`` and
``host_vars`` are searched in Ansible's precedence order; otherwise the inventory source or
the extra vars that set it.
"""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

from flagperf_ansible.config.errors import ConfigError
from flagperf_ansible.config.yamlio import utf8_text

HOST_GROUP = "flagperf_hosts"
#: Where a setting left at its default is declared (the role's defaults follow from it).
EXTRA_VARS = "extra vars"
CONNECTION_VARS = ("ansible_host", "ansible_port", "ansible_user")
#: Host names and addresses: DNS names, IPv4 and IPv6 (a zone after '%'); never a leading '-'
#: (ssh would read it as an option).
HOST_PATTERN = re.compile(r"[A-Za-z0-9_:\[][A-Za-z0-9_.:%\[\]-]{0,252}")
USER_PATTERN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}")
#: How Ansible names the types of what it loaded: ``<class '..._AnsibleTaggedList'>``.
_TAGGED = re.compile(r"\"?(?:<class )?'(?:[\w.]*\.)?_?(?:AnsibleTagged)?(List|Dict|Str|Int|Float)'>?\"?")
#: The inventory plugin whose failure explains a file that no plugin could read, by suffix.
_PLUGIN_BY_SUFFIX = {".ini": "ini", ".cfg": "ini", ".yml": "yaml", ".yaml": "yaml",
                     ".json": "yaml", ".toml": "toml"}


@dataclass
class RunInventory:
    """What planning needs of an inventory, as Ansible resolved it.

    ``hosts``: the benchmark hosts in noderank order; ``host_vars``: each one's connection
    variables; ``settings``: the run's view of every ``flagperf_*`` variable (the role
    defaults, the controller's view, the values every benchmark host shares, extra vars), each
    host's own differing values having been checked in its view; ``origins``: the file (or
    "extra vars", or the inventory source) of each setting.
    """

    sources: list[str]
    hosts: list[str]
    host_vars: dict[str, dict[str, Any]]
    settings: dict[str, Any]
    origins: dict[str, str]

    def address(self, host: str) -> str:
        """The address other hosts reach ``host`` at (``ansible_host``, else its name)."""
        return str(self.host_vars.get(host, {}).get("ansible_host", host))


def shown(path: str | Path) -> str:
    """``path`` as error lines show it: relative to the working folder when under it."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except (ValueError, OSError):
        return str(path)


def plain(value: Any) -> Any:
    """Plain dicts, lists and scalars (Ansible tags what it loads with subclasses of them)."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    for kind in (bool, int, float, str):
        if isinstance(value, kind):
            return kind(value)
    return value


def _templated(value: Any) -> bool:
    return isinstance(value, str) and "{{" in value


# -- Ansible's managers ----------------------------------------------------------------------

def _ansible_ready() -> None:
    """ansible-core's plugin loader, ready (inside ansible-playbook it is already)."""
    from ansible.utils.collection_loader import AnsibleCollectionConfig

    if AnsibleCollectionConfig.collection_finder is None:
        from ansible.plugins.loader import init_plugin_loader

        init_plugin_loader()


@contextlib.contextmanager
def _captured_warnings() -> Iterator[list[tuple[str, Any]]]:
    """Ansible's warnings while inventories parse, kept instead of printed: a source no plugin
    could read is only warned about, and the reason becomes our one error line."""
    from ansible.utils.display import Display

    display = Display()
    caught: list[tuple[str, Any]] = []
    saved = display.warning, display.error_as_warning

    def warning(msg, *args, **kwargs):
        caught.append((str(msg), None))

    def error_as_warning(msg, exception=None, *args, **kwargs):
        caught.append((str(msg), exception))

    display.warning, display.error_as_warning = warning, error_as_warning
    try:
        yield caught
    finally:
        display.warning, display.error_as_warning = saved


def _first_line(error: BaseException) -> str:
    """An Ansible error in one line: its message, and the line it points at."""
    message = str(getattr(error, "message", "") or error).strip()
    cause = error.__cause__
    if message.rstrip(".").endswith("Failed to parse inventory") or not message:
        message = str(cause or error)
    line = _TAGGED.sub(lambda m: f"a {m.group(1).lower()}", " ".join(message.split("\n")[0].split()))
    origin = getattr(error, "obj", None)
    origin = getattr(origin, "origin", origin)
    line_no = getattr(origin, "line_num", None)
    return f"line {line_no}: {line}" if line_no and "line " not in line else line


def _parse_failures(caught: list[tuple[str, Any]]) -> dict[str, list[tuple[str, Any]]]:
    """Each source (a file, or a folder none of whose files parsed) that no inventory plugin
    read, with the plugins' failures Ansible warned of before it, in Ansible's order."""
    failed: dict[str, list[tuple[str, Any]]] = {}
    pending: list[tuple[str, Any]] = []
    for msg, exc in caught:
        if exc is not None:
            pending.append((msg, exc))
            continue
        match = re.fullmatch(r"Unable to parse (.+) as an inventory source", msg)
        if match:
            failed[match.group(1)] = pending
            pending = []
    return failed


def _unreadable_source(source: str, failures: list[tuple[str, Any]]) -> ConfigError:
    """The error of a source no plugin read: the failure of the plugin its name calls for."""
    path = Path(source)
    if path.is_dir():
        return ConfigError("no inventory source in this folder (a YAML or INI hosts file, an "
                           "executable script, an inventory plugin's file)", shown(path))
    wanted = "script" if os.access(path, os.X_OK) else _PLUGIN_BY_SUFFIX.get(path.suffix.lower())
    chosen = next((exc for msg, exc in failures if wanted and f"'{wanted}' plugin" in msg),
                  failures[0][1] if failures else None)
    reason = _first_line(chosen) if chosen is not None else "no inventory plugin could read it"
    if wanted == "yaml" and not reason.startswith("line "):
        reason = _yaml_problem(path) or reason
    if not reason.startswith("line "):
        reason = f"not an inventory Ansible can read: {reason}"
    return ConfigError(reason, shown(path))


def _yaml_problem(path: Path) -> str:
    """``line N: <problem>`` where ``path`` is not YAML at all; "" where it is."""
    import yaml

    try:
        yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.MarkedYAMLError as bad:
        mark = bad.problem_mark
        return f"{f'line {mark.line + 1}: ' if mark is not None else ''}{bad.problem or bad}"
    except (OSError, ValueError, yaml.YAMLError) as bad:
        return str(bad).split("\n")[0]
    return ""


def load_extra_vars(loader: Any, extra_vars: list[str] | tuple[str, ...],
                    origins: dict[str, str]) -> dict[str, Any]:
    """``-e`` values as ``ansible-playbook`` reads them (``ansible.utils.vars.load_extra_vars``'s
    rules: ``@file``, YAML or JSON, else ``k=v`` pairs), later ones winning; ``origins`` gets
    each key's source: the ``@file``, else "extra vars".

    Raises:
        ConfigError: a file that is missing or not YAML, or a value that is not a mapping.
    """
    from ansible.errors import AnsibleError
    from ansible.parsing.splitter import parse_kv
    from ansible.template import trust_as_template
    from ansible.utils.vars import combine_vars

    merged: dict[str, Any] = {}
    for option in extra_vars:
        # Trusted as templates, as ansible-playbook trusts its own command line.
        option = trust_as_template(str(option))
        if not option:
            continue
        where = shown(option[1:]) if option.startswith("@") else EXTRA_VARS
        try:
            if option.startswith("@"):
                if not Path(option[1:]).is_file():
                    raise ConfigError("no such extra vars file", where)
                check_text_file(Path(option[1:]))
                data = loader.load_from_file(option[1:], trusted_as_template=True)
            elif option[0] in "/.":
                raise ConfigError(f"{option!r}: a file of extra vars is named with '@'", where)
            elif option[0] in "[{":
                data = loader.load(option)
            else:
                data = parse_kv(option)
        except AnsibleError as error:
            raise ConfigError(_first_line(error), where) from None
        if not isinstance(data, Mapping):
            raise ConfigError("extra vars are a mapping of variable names to values", where)
        merged = combine_vars(merged, data)
        origins.update({str(k): where for k in data})
    return merged


# -- encodings -------------------------------------------------------------------------------

def check_text_file(path: Path) -> None:
    """Refuse a file that is not plain UTF-8 text (``yamlio.utf8_text``).

    Raises:
        ConfigError: naming the file, and the line of a stray byte or byte-order mark.
    """
    utf8_text(path.read_bytes(), shown(path))


def check_inventory_encodings(sources: list[str] | tuple[str, ...]) -> None:
    """``check_text_file`` on every file Ansible would read for ``sources``: each source file
    (not an executable script, whose output is what counts), the files of a source folder, and
    the ``group_vars``/``host_vars`` beside a source file or inside a source folder. Files
    Ansible skips in an inventory folder (hidden ones, its ignored extensions) are skipped.

    Raises:
        ConfigError: see ``check_text_file``.
    """
    from ansible import constants as C

    ignored = tuple(C.INVENTORY_IGNORE_EXTS)

    def files_under(folder: Path) -> list[Path]:
        found = []
        for path in sorted(folder.rglob("*")):
            parts = path.relative_to(folder).parts
            if any(part.startswith(".") for part in parts) or path.name.endswith(ignored):
                continue
            if path.is_file() and not os.access(path, os.X_OK):
                found.append(path)
        return found

    for source in sources:
        if "," in source:
            continue
        path = Path(source)
        if path.is_dir():
            files = files_under(path)
        else:
            files = [] if os.access(path, os.X_OK) else [path]
            for name in ("group_vars", "host_vars"):
                if (path.parent / name).is_dir():
                    files += files_under(path.parent / name)
        for file in files:
            check_text_file(file)


# -- where a value came from -----------------------------------------------------------------

def _vars_files(directory: Path, name: str) -> list[Path]:
    """``<dir>/<name>``, ``<name>.yml|.yaml|.json`` or every such file of ``<dir>/<name>/``,
    as Ansible's host_group_vars plugin reads them."""
    files = [directory / f"{name}{ext}" for ext in ("", ".yml", ".yaml", ".json")]
    found = [f for f in files if f.is_file()]
    folder = directory / name
    if folder.is_dir():
        found += sorted(p for p in folder.rglob("*")
                        if p.suffix in ("", ".yml", ".yaml", ".json") and p.is_file())
    return found


class Origins:
    """Which file set a variable, searched the way Ansible layers them, highest last:
    the inventory source's own vars, ``group_vars/all``, ``group_vars/<group>`` (groups in
    Ansible's order), the host's own vars, ``host_vars/<host>``; extra vars above all."""

    def __init__(self, sources: list[str], extra: Mapping[str, str], all_group: Any = None) -> None:
        self.sources = [s for s in sources if "," not in s]
        self.all_group = all_group
        self.bases = [Path(s) if Path(s).is_dir() else Path(s).parent for s in self.sources]
        self.extra = extra
        self._keys: dict[Path, set[str]] = {}
        # The inventory files' text, read once for every origin looked up in them.
        self._texts: list[tuple[Path, str]] | None = None

    def _keys_of(self, path: Path) -> set[str]:
        if path not in self._keys:
            import yaml

            try:
                data = yaml.safe_load(path.read_text(encoding="utf-8"))
            except (OSError, ValueError, yaml.YAMLError):
                data = None
            self._keys[path] = {str(k) for k in data} if isinstance(data, dict) else set()
        return self._keys[path]

    def _source_files(self) -> Iterator[Path]:
        """The inventory files of the sources (a folder's own files, not its vars folders)."""
        for source in self.sources:
            path = Path(source)
            if path.is_file():
                yield path
            elif path.is_dir():
                yield from sorted(p for p in path.iterdir() if p.is_file()
                                  and not p.name.startswith("."))

    def inline(self, name: str) -> str:
        """The inventory file that most likely holds ``name`` itself (a host, a group, a
        variable set in the inventory), else the first source."""
        if self._texts is None:
            self._texts = []
            for path in self._source_files():
                try:
                    self._texts.append((path, path.read_text(encoding="utf-8", errors="replace")))
                except OSError:
                    continue
        found = next((path for path, text in self._texts if name in text), None)
        if found is not None:
            return shown(found)
        return shown(self.sources[0]) if self.sources else "inventory"

    def vars_error(self, error: BaseException) -> ConfigError:
        """A group_vars or host_vars file Ansible could not load, as one line naming it."""
        text = _first_line(error)
        match = re.match(r"Could not process '([^']+)': (.*)", text)
        if match:
            reason = match.group(2)
            kind = re.search(r"got a \S+ and (a \w+)", reason)
            if "expected dicts" in reason and kind:
                reason = f"expected a mapping of variables, not {kind.group(1)}"
            return ConfigError(reason, shown(match.group(1)))
        for base in self.bases:
            for folder in ("group_vars", "host_vars"):
                for path in sorted((base / folder).rglob("*")):
                    if path.is_file() and path.suffix in ("", ".yml", ".yaml", ".json"):
                        problem = _yaml_problem(path)
                        if problem:
                            return ConfigError(problem, shown(path))
        return ConfigError(text, self.inline(HOST_GROUP))

    def of(self, name: str, host: Any) -> str:
        """The origin of variable ``name`` as Ansible layers it for ``host`` (an inventory
        Host), lowest precedence first (ansible-core's ``VARIABLE_PRECEDENCE`` default): every
        group's vars in the inventory itself, then the group_vars files (groups in Ansible's
        order, ``all`` first), then the host's own vars, then its host_vars files; extra vars
        above all."""
        from ansible.inventory.helpers import sort_groups

        if name in self.extra:
            return self.extra[name]
        # The implicit localhost belongs to no group, yet sees the group all's variables.
        groups = sort_groups(host.get_groups()) or ([self.all_group] if self.all_group else [])

        def files(folder: str, owner: str) -> list[Path]:
            return [path for base in self.bases for path in _vars_files(base / folder, owner)
                    if name in self._keys_of(path)]

        found = ""
        layers = [[g.vars for g in groups], [files("group_vars", g.name) for g in groups],
                  [host.vars], [files("host_vars", host.name)]]
        for layer in layers:
            for entry in layer:
                if isinstance(entry, list) and entry:
                    found = shown(entry[-1])
                elif isinstance(entry, Mapping) and name in entry:
                    found = self.inline(name)
        return found or self.inline(name)


# -- reading --------------------------------------------------------------------------------

def read_inventory(sources: list[str] | tuple[str, ...],
                   extra_vars: list[str] | tuple[str, ...] = (),
                   limit: str | None = None) -> RunInventory:
    """Read the inventory ``sources`` with Ansible, apply ``extra_vars`` (``-e`` values) and
    ``limit`` (``--limit``), and check the benchmark hosts and the settings they see. Ansible
    is configured as this process found it (the wrapper names the project's ``ansible.cfg``).

    Args:
        sources: the ``-i`` values, in order.
        extra_vars: the ``-e`` values, in order.
        limit: a host pattern, as ``--limit`` takes it.

    Raises:
        ConfigError: one line naming the file (or source) and key at fault: a source no
        plugin reads, a malformed vars file, no ``flagperf_hosts``, a limit that leaves none of
        them, an unsafe host name or connection variable, a bad setting.
    """
    from flagperf_ansible.config.settings import DEFAULTS_FILE, check_settings, defaults

    _ansible_ready()
    from ansible.errors import AnsibleError
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.vars.manager import VariableManager

    if not sources:
        raise ConfigError("no inventory: name one with -i", "command line", "-i")
    for source in sources:
        if "," not in source and not Path(source).exists():
            raise ConfigError("no such inventory file or directory", shown(source))
    check_inventory_encodings(sources)
    loader = DataLoader()
    extra_origins: dict[str, str] = {}
    extra = load_extra_vars(loader, extra_vars, extra_origins)
    paths = [s if "," in s else str(Path(s).resolve()) for s in sources]
    with _captured_warnings() as caught:
        try:
            manager = InventoryManager(loader=loader, sources=paths)
        except AnsibleError as error:
            raise ConfigError(_first_line(error), shown(sources[0])) from None
    # Ansible only warns of a source it could not read, and would run without its hosts.
    failed = _parse_failures(caught)
    for path in sorted(failed, key=lambda p: Path(p).is_dir()):
        raise _unreadable_source(path, failed[path])
    origins = Origins(list(sources), extra_origins, manager.groups.get("all"))
    where = origins.inline(HOST_GROUP)
    if HOST_GROUP not in manager.groups:
        hint = next((m for m, _ in caught if "flagperf_hosts" in m), "")
        raise ConfigError(f"no group '{HOST_GROUP}': list the benchmark hosts under it"
                          + (f" (Ansible: {' '.join(hint.split())})" if hint else ""), where)
    all_members = manager.groups[HOST_GROUP].get_hosts()
    if not all_members:
        hint = next((m for m, _ in caught if "key" in m.lower()), "")
        raise ConfigError("the group has no hosts"
                          + (f" (Ansible: {' '.join(hint.split())})" if hint else ""),
                          where, HOST_GROUP)
    if limit:
        manager.subset(limit)
    with _captured_warnings():
        members = manager.get_hosts(HOST_GROUP, order="inventory")
    if not members:
        raise ConfigError(f"leaves no host of {HOST_GROUP} "
                          f"({', '.join(h.name for h in all_members)})", "command line", "--limit")
    if any(h.name == "localhost" for h in all_members) and \
            not any(h.name == "localhost" for h in members):
        # The controller's plays (validation, report) run on localhost: a limit without it
        # skips them, and localhost cannot be in a play without being a benchmark host too.
        raise ConfigError(f"leaves out localhost, a host of {HOST_GROUP} that also runs the "
                          "controller's plays: keep it in, or list the controller apart",
                          "command line", "--limit")
    variables = VariableManager(loader=loader, inventory=manager)

    def view(host: Any) -> dict[str, Any]:
        try:
            raw = variables.get_vars(host=host, include_hostvars=False)
        except AnsibleError as error:
            raise origins.vars_error(error) from None
        return {**raw, **extra}

    hosts = [h.name for h in members]
    host_vars: dict[str, dict[str, Any]] = {}
    host_views: dict[str, dict[str, Any]] = {}
    by_name = {h.name: h for h in members}
    for host in members:
        seen = view(host)
        host_views[host.name] = _rendered(loader, seen, lambda k: k.startswith("flagperf_"))
        host_vars[host.name] = _rendered(loader, seen,
                                         lambda k: k in (*CONNECTION_VARS, "ansible_connection"))
    check_hosts(hosts, host_vars,
                lambda h, name: origins.of(name, by_name[h]) if name else origins.inline(h))

    controller = view(manager.localhost)
    own = _rendered(loader, controller, lambda k: k.startswith("flagperf_"))
    # The values every benchmark host shares join the controller's own (group_vars/
    # flagperf_hosts reaches the hosts, not the controller's play); a value one host sees
    # differently is checked in that host's view.
    first = host_views[hosts[0]]
    common = {k: v for k, v in first.items()
              if all(k in host_views[h] and host_views[h][k] == v for h in hosts[1:])}
    settings = {**defaults(), **own, **common}
    setting_origins = {k: DEFAULTS_FILE for k in defaults()}
    setting_origins.update({k: origins.of(k, manager.localhost) for k in own})
    setting_origins.update({k: origins.of(k, members[0])
                            for k in common if k not in own or own[k] != common[k]})
    for host in hosts:
        differs = {k: v for k, v in host_views[host].items() if settings.get(k) != v}
        if differs:
            check_settings({**settings, **differs},
                           {**setting_origins, **{k: origins.of(k, by_name[host]) for k in differs}})
    return RunInventory(sources=list(sources), hosts=hosts, host_vars=host_vars,
                        settings=settings, origins=setting_origins)


def _rendered(loader: Any, variables: Mapping[str, Any],
              wanted: Callable[[str], bool]) -> dict[str, Any]:
    """The ``wanted`` variables of a host's view as plain data, each rendered where Ansible
    can on the controller (``{{ lookup('env', 'HOME') }}``); one only the host can render (a
    fact) is left as written, for the host's own plays."""
    from ansible.template import Templar

    templar = None
    found = {}
    for name in [str(k) for k in variables if wanted(str(k))]:
        value = variables[name]
        if "{{" in repr(value):
            templar = templar or Templar(loader=loader, variables=variables)
            try:
                value = templar.template(value)
            except Exception:  # noqa: BLE001 - whatever fails to render stays as written
                pass
        found[name] = plain(value)
    return found


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
    _check_unique_endpoints(hosts, host_vars, where)


def _check_unique_endpoints(hosts: list[str], host_vars: Mapping[str, Mapping[str, Any]],
                            where: Callable[[str, str], str]) -> None:
    """Refuse two hosts reached at the same address and port: one machine listed twice would
    run two nodes' ranks and monitors side by side and be counted as two. Hosts that Ansible
    does not reach over the network (``ansible_connection: local``) and templated values are
    left out.

    Raises:
        ConfigError: naming the second host's ``ansible_host`` (or its name) and its file.
    """
    seen: dict[tuple[str, str], str] = {}
    for host in hosts:
        hvars = host_vars.get(host) or {}
        if hvars.get("ansible_connection") == "local":
            continue
        address, port = hvars.get("ansible_host", host), hvars.get("ansible_port")
        if _templated(address) or (port is not None and _templated(port)):
            continue
        endpoint = (str(address).lower(), "" if port is None else str(port).strip())
        if endpoint in seen:
            variable = "ansible_host" if "ansible_host" in hvars else ""
            key = f"{HOST_GROUP}.{host}.{variable}" if variable else f"{HOST_GROUP}.{host}"
            reached = f"{address}:{port}" if port is not None else str(address)
            raise ConfigError(
                f"the same address{' and port' if port is not None else ''} as host "
                f"{seen[endpoint]} ({reached}): one machine listed twice",
                where(host, variable), key)
        seen[endpoint] = host
