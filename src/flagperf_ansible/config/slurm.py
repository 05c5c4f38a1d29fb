"""Backend slurm: a round as one Slurm job, its ``sbatch`` command line, and the checks of the
settings that reach it.

A round is one batch job of ``nnodes`` nodes and one task per node (``--ntasks-per-node=1``),
never requeued (``--no-requeue``: a round that lost a node failed; it is not run again
silently), its output in the round's folder on the submit host. Its batch step runs every node's
part with ``srun --kill-on-bad-exit=1`` (``flagperf_host.slurm_job batch``), so a node whose
case failed ends the others. The node steps are rendered on the controller before the nodes are
known: where they need the job's nodes, they hold ``node_tokens`` (``flagperf_host.slurm_node``
replaces them on each node with the job's own).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

# The tokens the nodes replace with their job's own (node i's name and address, the job's id).
from flagperf_host.slurm_node import ADDR_TOKEN, HOST_TOKEN, JOB_TOKEN  # noqa: F401

#: Slurm's time forms: minutes, minutes:seconds, hours:minutes:seconds, days-hours,
#: days-hours:minutes, days-hours:minutes:seconds (sbatch(1) --time), or no limit.
TIME_LIMIT_PATTERN = re.compile(r"(\d+-\d+(:\d{1,2}){0,2}|\d+(:\d{1,2}){0,2}|UNLIMITED|INFINITE)")
#: One long sbatch option, one word: ``--name`` or ``--name=value`` (no shell, no spaces).
OPTION_PATTERN = re.compile(r"--([a-z][a-z0-9-]*)(=[A-Za-z0-9_.,:=/+@%*\[\]-]+)?")
#: Options a round sets itself (sbatch(1) long names): another value would break it.
OWN_OPTIONS = frozenset({
    "nodes", "ntasks", "ntasks-per-node", "job-name", "output", "error", "input", "chdir",
    "partition", "account", "qos", "reservation", "time", "exclusive", "parsable", "wrap",
    "wait", "requeue", "no-requeue", "array", "hold", "export", "export-file", "get-user-env",
    "uid", "gid", "test-only", "kill-on-invalid-dep", "open-mode", "ignore-pbs",
})
#: The time a job gets beyond its case timeout, unless ``flagperf_slurm_time_limit`` says:
#: the node steps' start and end (monitor, container, the fetch of nothing: it is shared).
TIME_MARGIN_S = 600


def check_time_limit(value: str) -> str:
    """Accept ``""`` or a time limit in one of Slurm's forms (see ``TIME_LIMIT_PATTERN``).

    Raises:
        ValueError: any other text.
    """
    if value and not TIME_LIMIT_PATTERN.fullmatch(value):
        raise ValueError(f"{value!r} is not a Slurm time limit (minutes, HH:MM:SS, D-HH:MM, ...)")
    return value


def check_options(value: list[str]) -> list[str]:
    """Accept extra sbatch options, each one long option in one word.

    Raises:
        ValueError: a short option or two words (``-C a100``: give ``--constraint=a100``), a
        character beyond a plain value's, or an option the round sets itself.
    """
    for item in value:
        match = OPTION_PATTERN.fullmatch(item) if isinstance(item, str) else None
        if match is None:
            raise ValueError(f"{item!r} is not one long sbatch option in one word "
                             "(--name or --name=value, e.g. --constraint=a100)")
        if match.group(1) in OWN_OPTIONS:
            raise ValueError(f"{item!r}: --{match.group(1)} is set by the round itself "
                             "(flagperf_slurm_* settings, the case spec)")
    return value


def job_name(run_id: str, case_id: str, round_no: int) -> str:
    """``flagperf-<run_id>-<case_id>-r<k>``: a round's job, unique per run and round (what
    ``squeue`` shows, and how the round's job is found again to be cancelled)."""
    return f"flagperf-{run_id}-{case_id}-r{round_no}"


def time_limit(settings_limit: str, timeout_s: float) -> str:
    """The job's ``--time``: ``flagperf_slurm_time_limit`` when set, else the case timeout
    plus ``TIME_MARGIN_S``, in whole minutes (rounded up)."""
    return settings_limit or str(math.ceil((float(timeout_s) + TIME_MARGIN_S) / 60))


def sbatch_argv(slurm: Mapping[str, Any], name: str, nnodes: int, limit: str,
                output: str) -> list[str]:
    """The ``sbatch`` command line of a round's job, without its script (which the submit step
    writes and adds last).

    Args:
        slurm: the plan's ``slurm`` (``partition``, ``account``, ``qos``, ``reservation``,
            ``exclusive``, ``options``; "" and false leave an option out).
        name: the job's name (``job_name``).
        nnodes: the round's nodes: one task on each.
        limit: the ``--time`` value (``time_limit``).
        output: the job's standard output and error file (sbatch's ``%j`` is its id).

    Returns:
        ``["sbatch", "--parsable", "--job-name=...", "--nodes=N", "--ntasks-per-node=1",
        "--no-requeue", "--time=...", "--output=...", (partition, account, qos, reservation,
        exclusive where set), *options]``.
    """
    argv = ["sbatch", "--parsable", f"--job-name={name}", f"--nodes={int(nnodes)}",
            "--ntasks-per-node=1", "--no-requeue", f"--time={limit}", f"--output={output}"]
    for key in ("partition", "account", "qos", "reservation"):
        if slurm.get(key):
            argv.append(f"--{key}={slurm[key]}")
    if slurm.get("exclusive"):
        argv.append("--exclusive")
    return argv + [str(option) for option in slurm.get("options") or ()]


def node_tokens(nnodes: int) -> dict[str, list[str]]:
    """What the plan's round holds in place of its nodes under backend slurm: ``{"hosts":
    [node i's name token], "nodes": [node i's address token]}`` in noderank order (the first is
    the master), which ``flagperf_host.slurm_node`` replaces on the nodes."""
    return {"hosts": [HOST_TOKEN.format(i) for i in range(int(nnodes))],
            "nodes": [ADDR_TOKEN.format(i) for i in range(int(nnodes))]}
