"""Filters over the flagperf_ansible package: the case-spec parser and the run plan."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path

try:
    import flagperf_ansible  # noqa: F401
except ImportError:  # running from a checkout without `pip install`: src/ beside plugins/
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from ansible.errors import AnsibleFilterError

# Only light modules here: every forked worker that renders a template with a filter imports
# this file again, once per task and host. The case-spec and plan filters (pydantic models,
# YAML) import what they need when called.
from flagperf_ansible.launch import container_name, image_tag
from flagperf_ansible.launchers import launch_argv, launch_env
from flagperf_ansible.provenance import node_dir_name
from flagperf_ansible.round_wait import job_status, node_outcome

DOCUMENTATION = """
name: flagperf
short_description: flagperf-ansible case specs and run plans
"""


def _plain(value):
    """Deep copy into plain dicts, lists and scalars (Ansible hands filters lazy containers)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, str):
        return str(value)
    return value


def flagperf_case_spec(item):
    """A case spec (mapping or FlagPerf ``model:framework:hardware:nnodes:nproc:repeat``)
    as a mapping with ``case_id``."""
    from flagperf_ansible.casespec import parse_case_spec
    from flagperf_ansible.errors import ConfigError

    try:
        spec = parse_case_spec(_plain(item))
    except ConfigError as err:
        raise AnsibleFilterError(str(err)) from None
    return {**spec.model_dump(), "case_id": spec.case_id}


def _yaml_inventory(source: Path) -> bool:
    """Whether ``source`` is an inventory in the layout the package reads (YAML, no plugin)."""
    if source.is_dir():
        return any((source / n).is_file() for n in ("hosts.yml", "hosts.yaml"))
    if source.suffix not in (".yml", ".yaml") or not source.is_file():
        return False
    head = source.read_text(encoding="utf-8", errors="replace")
    return not any(line.startswith("plugin:") for line in head.splitlines())


def _host_settings(hostvars, host):
    """The ``flagperf_*`` variables Ansible gives ``host`` (group_vars, host_vars, extra vars);
    one that cannot be rendered on the controller yet is left to the host's own plays."""
    found = {}
    host_vars = hostvars[host]
    for name in list(host_vars.keys()):
        if str(name).startswith("flagperf_"):
            try:
                found[str(name)] = _plain(host_vars[name])
            except Exception:  # noqa: BLE001 - a value only the host can render
                continue
    return found


def _host_vars_file(inventory_source, host: str) -> str:
    """Where ``host``'s own variables most likely are, as shown in error messages."""
    source = Path(str(inventory_source))
    base = source if source.is_dir() else source.parent
    for name in (f"{host}.yml", f"{host}.yaml", host):
        if (base / "host_vars" / name).exists():
            path = (base / "host_vars" / name).resolve()
            try:
                return str(path.relative_to(Path.cwd()))
            except ValueError:
                return str(path)
    return f"host {host}'s variables"


def flagperf_plan(settings, inventory_source, hosts, hostvars, project_dir):
    """Validate the ``flagperf_*`` settings and return the run plan (see ``build_plan``).

    The settings are checked as every benchmark host sees them (the play's own view, then each
    host's group_vars and host_vars), so a bad value set for ``flagperf_hosts`` only is caught
    on the controller too. ``inventory_source`` (first of ``ansible_inventory_sources``) is read
    again to name the file a bad setting came from; an inventory in the package's YAML layout
    that it rejects (a malformed group, an unsafe host name) stops the run here.

    Raises:
        AnsibleFilterError: one line naming the file and key at fault.
    """
    from flagperf_ansible.errors import ConfigError
    from flagperf_ansible.inventory import CONNECTION_VARS, HOST_GROUP, check_hosts, load_inventory
    from flagperf_ansible.plan import build_plan

    project = Path(project_dir)
    base = _plain(settings)
    hosts = [str(h) for h in hosts]
    try:
        try:
            inventory = load_inventory(str(inventory_source), project)
        except ConfigError:
            if not hosts or _yaml_inventory(Path(str(inventory_source))):
                raise
            inventory = None
        if not hosts:
            raise ConfigError(f"no hosts in the group '{HOST_GROUP}'", str(inventory_source))
        connection = {h: {k: _plain(hostvars[h].get(k)) for k in CONNECTION_VARS
                          if hostvars[h].get(k) is not None} for h in hosts}
        check_hosts(hosts, connection, str(inventory_source))
        addresses = {h: str(connection[h].get("ansible_host", h)) for h in hosts}
        # Values every host shares (e.g. group_vars/flagperf_hosts) join the play's own view
        # (the controller's play does not see the host group's vars); a value set per host is
        # checked in that host's view.
        per_host = [_host_settings(hostvars, h) for h in hosts]
        common = {k: v for k, v in per_host[0].items()
                  if all(k in other and other[k] == v for other in per_host[1:])}
        main = {**base, **common}
        views = [(None, main)] + [(h, {**main, **own}) for h, own in zip(hosts, per_host)]
        plan, seen = None, []
        for host, view in views:
            if view in seen:
                continue
            seen.append(view)
            origins = {}
            if inventory is not None:
                # A value that differs from the inventory's own came from extra vars (-e)...
                origins = {k: src for k, src in inventory.origins.items()
                           if view.get(k) == inventory.settings.get(k)
                           or "{{" in str(inventory.settings.get(k))}
            if host is not None:
                # ...unless only this host has it: its host_vars.
                where = _host_vars_file(inventory_source, host)
                origins.update({k: where for k, v in view.items()
                                if k not in origins and main.get(k) != v})
            checked = build_plan(view, origins, hosts, addresses, project)
            plan = plan or checked
        return plan
    except ConfigError as err:
        raise AnsibleFilterError(str(err)) from None


def flagperf_round_hosts(hosts, hostvars, active, poll_var, deadline_passed=False):
    """``[{host, noderank, rc, timed_out, stopped, lost, error, wait_slices}]`` of a round, from each host's
    last poll result, registered as ``poll_var`` (see ``round_wait.node_outcome``; ``rc`` None
    where the node never exited by itself; ``stopped`` when the round stopped it; ``lost`` when
    the host left the play, e.g. it became unreachable; ``error``: an orchestration error on
    that host, the round's ``__round_error`` fact or a failed stop of its node, else "";
    ``wait_slices``: the wait exchanges it took, None when it was not waited for).
    ``deadline_passed``: the round's timeout has passed (a node still running then counts as
    timed out)."""
    rows = []
    active = {str(h) for h in active}
    for noderank, host in enumerate(hosts):
        own = hostvars[host]
        poll = _plain(own.get(str(poll_var)) or {})
        outcome = node_outcome(poll, bool(deadline_passed))
        error = str(own.get("__round_error") or "")
        stop = _plain(own.get("__node_stop") or {})
        if not error and stop.get("rc") not in (None, 0):
            error = f"stopping the node failed: {stop.get('msg') or stop.get('stderr') or stop.get('rc')}"
        rows.append({"host": str(host), "noderank": noderank, "rc": outcome["rc"],
                     "timed_out": outcome["timed_out"], "stopped": outcome["stopped"],
                     "lost": str(host) not in active, "error": error,
                     "wait_slices": poll.get("slices")})
    return rows


def flagperf_results_root(results_dir, project_dir):
    """The controller folder of the runs' results (see ``flagperf_ansible.plan.results_root``)."""
    from flagperf_ansible.plan import results_root

    return str(results_root(str(results_dir), Path(str(project_dir))))


def flagperf_job_status(poll):
    """A node's poll result as a job status (see ``round_wait.job_status``): ``finished``,
    ``rc``, ``timed_out``, ``msg``, ``stdout``."""
    return dict(job_status(_plain(poll or {})))


def flagperf_launch_argv(round_, noderank, python, root, output_dir, data_dir, master_port):
    """argv of one node of a round by the round's launcher (see
    ``flagperf_ansible.launchers.launch_argv``)."""
    try:
        return launch_argv(_plain(round_), int(noderank), str(python), str(root), str(output_dir),
                           str(data_dir), int(master_port))
    except ValueError as err:
        raise AnsibleFilterError(str(err)) from None


def flagperf_launch_env(round_, noderank, root, master_port, extra=None):
    """Environment of one node of a round (see ``flagperf_ansible.launchers.launch_env``):
    ``root`` is where the checkout is as the node's processes see it (``FLAGPERF_VENDOR_DIR``
    is under it); ``extra`` comes last."""
    try:
        return launch_env(_plain(round_), int(noderank), str(root), int(master_port),
                          _plain(extra or {}))
    except ValueError as err:
        raise AnsibleFilterError(str(err)) from None


def flagperf_image_tag(framework, project_dir, vendor, inputs=None):
    """Content-hash tag of ``vendors/<vendor>/docker_image/<framework>/`` and ``inputs``."""
    try:
        return image_tag(Path(project_dir), str(vendor), str(framework), _plain(inputs or {}))
    except FileNotFoundError as err:
        raise AnsibleFilterError(str(err)) from None


def flagperf_container_name(round_, run_id, noderank):
    """Container name unique per run, round and node."""
    return container_name(str(run_id), str(round_["case_id"]), int(round_["round"]), int(noderank))


def flagperf_node_dir(host, noderank, mask=False):
    """A node's round folder name: ``<host>_noderank<i>``, or ``host<i>_noderank<i>`` masked."""
    return node_dir_name(str(host), int(noderank), bool(mask))


class FilterModule:
    def filters(self):
        return {
            "flagperf_case_spec": flagperf_case_spec,
            "flagperf_launch_argv": flagperf_launch_argv,
            "flagperf_launch_env": flagperf_launch_env,
            "flagperf_image_tag": flagperf_image_tag,
            "flagperf_container_name": flagperf_container_name,
            "flagperf_plan": flagperf_plan,
            "flagperf_round_hosts": flagperf_round_hosts,
            "flagperf_results_root": flagperf_results_root,
            "flagperf_job_status": flagperf_job_status,
            "flagperf_node_dir": flagperf_node_dir,
        }
