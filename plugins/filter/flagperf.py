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
from flagperf_ansible.run.launch import container_name, image_tag
from flagperf_ansible.config import containers, slurm
from flagperf_ansible.config.launchers import launch_argv, launch_env
from flagperf_ansible.results.provenance import node_dir_name
from flagperf_ansible.run.round_wait import job_status, node_outcome, slurm_job_record, \
    slurm_round_error, slurm_round_hosts

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
    from flagperf_ansible.config.casespec import parse_case_spec
    from flagperf_ansible.config.errors import ConfigError

    try:
        spec = parse_case_spec(_plain(item))
    except ConfigError as err:
        raise AnsibleFilterError(str(err)) from None
    return {**spec.model_dump(), "case_id": spec.case_id}


def flagperf_plan(sources, project_dir):
    """Validate the run and return its plan (``flagperf_ansible.run.plan.build_plan``), reading the
    inventory ``sources`` (``ansible_inventory_sources``) with this ansible-playbook's own ``-e``
    and ``--limit`` through the front door the wrapper uses (``inventory.read_inventory``), so
    that both plan the same run.

    Raises:
        AnsibleFilterError: one line naming the file and key at fault.
    """
    from ansible import context

    from flagperf_ansible.config.errors import ConfigError
    from flagperf_ansible.config.inventory import read_inventory
    from flagperf_ansible.run.plan import build_plan

    try:
        inventory = read_inventory([str(s) for s in sources],
                                   [str(e) for e in context.CLIARGS.get("extra_vars") or ()],
                                   context.CLIARGS.get("subset"))
        return build_plan(inventory.settings, inventory.origins, inventory.hosts,
                          {h: inventory.address(h) for h in inventory.hosts}, Path(project_dir))
    except ConfigError as err:
        raise AnsibleFilterError(str(err)) from None


def flagperf_run_plan(results_dir, run_id, project_dir):
    """The plan preflight wrote for run ``run_id`` (its plan.json under the results folder).

    Raises:
        AnsibleFilterError: the run has no plan (preflight did not run for it).
    """
    from flagperf_ansible.results.layout import PLAN_FILE, read_json
    from flagperf_ansible.run.plan import results_root

    path = results_root(str(results_dir), Path(str(project_dir))) / str(run_id) / PLAN_FILE
    if not run_id or not path.is_file():
        raise AnsibleFilterError(f"no plan for run '{run_id}' ({path}): run preflight first "
                                 "(site.yml), or name a run of these results with "
                                 "-e flagperf_run_id=RUN_ID")
    return read_json(path)


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
    """The controller folder of the runs' results (see ``flagperf_ansible.run.plan.results_root``)."""
    from flagperf_ansible.run.plan import results_root

    return str(results_root(str(results_dir), Path(str(project_dir))))


def flagperf_job_status(poll):
    """A node's poll result as a job status (see ``round_wait.job_status``): ``finished``,
    ``rc``, ``timed_out``, ``msg``, ``stdout``."""
    return dict(job_status(_plain(poll or {})))


def flagperf_launch_argv(round_, noderank, python, root, output_dir, data_dir, master_port):
    """argv of one node of a round by the round's launcher (see
    ``flagperf_ansible.config.launchers.launch_argv``)."""
    try:
        return launch_argv(_plain(round_), int(noderank), str(python), str(root), str(output_dir),
                           str(data_dir), int(master_port))
    except ValueError as err:
        raise AnsibleFilterError(str(err)) from None


def flagperf_launch_env(round_, noderank, root, master_port, extra=None):
    """Environment of one node of a round (see ``flagperf_ansible.config.launchers.launch_env``):
    ``root`` is where the checkout is as the node's processes see it (``FLAGPERF_VENDOR_DIR``
    is under it); ``extra`` comes last."""
    try:
        return launch_env(_plain(round_), int(noderank), str(root), int(master_port),
                          _plain(extra or {}))
    except ValueError as err:
        raise AnsibleFilterError(str(err)) from None


def flagperf_container_argv(round_, runtime, noderank, image, name, master_port, env, options,
                            user, root, output_dir):
    """Backend slurm: the command line that runs one node of a round in its container, where no
    Ansible module runs (``flagperf_ansible.config.containers.container_argv``: ``docker run
    --init`` with the job's label, pyxis's ``srun --container-image``, ``apptainer exec``), its
    launcher under the image's interpreter with the container's paths; ``env`` is the case's
    environment (passed by name)."""
    round_ = _plain(round_)
    noderank = int(noderank)
    try:
        argv = launch_argv(round_, noderank, str(round_["python"]), containers.ROOT,
                           containers.OUTPUT, containers.DATA, int(master_port))
        return containers.container_argv(
            str(runtime), str(image), str(name), slurm.JOB_TOKEN, str(round_["node_names"][noderank]),
            str(root), str(output_dir), str(round_.get("data_dir") or ""), sorted(_plain(env or {})),
            _plain(options or {}), str(user or ""), argv)
    except (ValueError, KeyError, IndexError) as err:
        raise AnsibleFilterError(f"flagperf_container_argv: {err}") from None


def flagperf_sbatch_argv(round_, run_id, settings, job_dir):
    """Backend slurm: the ``sbatch`` command line of a round's job (``config.slurm.sbatch_argv``),
    its output ``<job_dir>/slurm-<job id>.out``."""
    round_ = _plain(round_)
    settings = _plain(settings or {})
    name = slurm.job_name(str(run_id), str(round_["case_id"]), int(round_["round"]))
    return slurm.sbatch_argv(settings, name, int(round_["nnodes"]),
                             slurm.time_limit(str(settings.get("time_limit") or ""), round_["timeout"]),
                             f"{job_dir}/slurm-%j.out")


def flagperf_slurm_job_name(round_, run_id):
    """A round's Slurm job name (``config.slurm.job_name``)."""
    return slurm.job_name(str(run_id), str(round_["case_id"]), int(round_["round"]))


def flagperf_slurm_round_hosts(report, deadline_passed=False):
    """A Slurm round's host rows from its job's report (``round_wait.slurm_round_hosts``)."""
    return slurm_round_hosts(dict(job_status(_plain(report or {}))), bool(deadline_passed))


def flagperf_slurm_job(report):
    """What round.json keeps of a round's Slurm job (``round_wait.slurm_job_record``), and
    ``error``: what went wrong with the job itself ("" when its nodes say it all)."""
    report = dict(job_status(_plain(report or {})))
    return {**slurm_job_record(report), "error": slurm_round_error(report)}


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
            "flagperf_run_plan": flagperf_run_plan,
            "flagperf_results_root": flagperf_results_root,
            "flagperf_job_status": flagperf_job_status,
            "flagperf_node_dir": flagperf_node_dir,
            "flagperf_container_argv": flagperf_container_argv,
            "flagperf_sbatch_argv": flagperf_sbatch_argv,
            "flagperf_slurm_job_name": flagperf_slurm_job_name,
            "flagperf_slurm_round_hosts": flagperf_slurm_round_hosts,
            "flagperf_slurm_job": flagperf_slurm_job,
        }
