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

from flagperf_ansible.casespec import parse_case_spec
from flagperf_ansible.errors import ConfigError
from flagperf_ansible.inventory import load_inventory
from flagperf_ansible.launch import container_name, image_tag, launch_argv, launch_env
from flagperf_ansible.plan import build_plan
from flagperf_ansible.results import node_dir_name

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
    try:
        spec = parse_case_spec(_plain(item))
    except ConfigError as err:
        raise AnsibleFilterError(str(err)) from None
    return {**spec.model_dump(), "case_id": spec.case_id}


def flagperf_plan(settings, inventory_source, hosts, hostvars, project_dir):
    """Validate the ``flagperf_*`` settings and return the run plan (see ``build_plan``).

    ``inventory_source`` (first of ``ansible_inventory_sources``) is read again only to name the
    file a bad setting came from.
    """
    project = Path(project_dir)
    settings = _plain(settings)
    try:
        inventory = load_inventory(str(inventory_source), project)
    except ConfigError:
        inventory = None
    origins = {}
    if inventory is not None:
        # A value that differs from the inventory's own came from extra vars (-e).
        origins = {k: src for k, src in inventory.origins.items()
                   if settings.get(k) == inventory.settings.get(k) or "{{" in str(inventory.settings.get(k))}
    addresses = {str(h): str(hostvars[h].get("ansible_host", h)) for h in hosts}
    try:
        return build_plan(settings, origins, [str(h) for h in hosts], addresses, project)
    except ConfigError as err:
        raise AnsibleFilterError(str(err)) from None


def flagperf_round_hosts(hosts, hostvars):
    """``[{host, noderank, rc, timed_out}]`` of a round from each host's ``launch_outcome`` or
    ``container_outcome``
    (``rc`` None where the host never reported, e.g. it became unreachable)."""
    rows = []
    for noderank, host in enumerate(hosts):
        outcome = hostvars[host].get("launch_outcome") or hostvars[host].get("container_outcome") or {}
        rows.append({"host": host, "noderank": noderank, "rc": outcome.get("rc"),
                     "timed_out": bool(outcome.get("timed_out", False))})
    return rows


def flagperf_launch_argv(round_, noderank, python, root, output_dir, data_dir, master_port):
    """argv of one node of a round (see ``flagperf_ansible.launch.launch_argv``)."""
    return launch_argv(_plain(round_), int(noderank), str(python), str(root), str(output_dir),
                       str(data_dir), int(master_port))


def flagperf_launch_env(round_, noderank, master_port, extra=None):
    """Environment of one node of a round (see ``flagperf_ansible.launch.launch_env``)."""
    return launch_env(_plain(round_), int(noderank), int(master_port), _plain(extra or {}))


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
            "flagperf_node_dir": flagperf_node_dir,
        }
