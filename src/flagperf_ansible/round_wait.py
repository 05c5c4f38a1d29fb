"""Waiting for a round's nodes: when it is over, and how each node ended.

Each node of a round runs in the background under the launch role's ``node_job.py`` (polled
with its ``wait``, which blocks on the host for a slice): runtime ``none`` the case itself,
runtime ``docker`` a ``community.docker.docker_container`` module run that starts the node's
container and waits for it (its result is the wait's ``result``). The container role's own flow
runs the module as an Ansible async job instead (polled with its ``async_wait.py``, which reads
the job's results file as ``ansible.builtin.async_status`` does). The round
playbook polls them all a slice at a time and asks ``round_over`` after each. A round is over when
every node has finished, when any node failed (the others are then stopped, as a distributed
job cannot go on without one of its ranks), when a host is gone, or past the deadline.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from typing import Any

TIMEOUT_MSG = "Timeout exceeded"     # what async_wrapper leaves when it kills a job at its limit


def job_status(poll: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """A node's poll result as a job status: an ``async_status`` result as it is; for a
    ``flagperf.benchmark.piped_script`` run of ``node_job.py`` or ``async_wait.py``, the JSON
    document it printed (its last JSON line), or, when it printed none (it could not run), a
    finished job with no exit code and the script's error as ``msg``."""
    if not poll or "finished" in poll or poll.get("skipped") or poll.get("unreachable"):
        return poll or {}
    stdout = poll.get("stdout")
    if not isinstance(stdout, str) or "rc" not in poll:
        return poll
    for line in reversed(stdout.strip().splitlines()):
        try:
            document = json.loads(line)
        except ValueError:
            continue
        if isinstance(document, dict):
            return document
    error = str(poll.get("stderr") or poll.get("msg") or stdout).strip()
    return {"finished": 1, "rc": None, "msg": error[-2000:] or "the job's helper printed nothing"}


def node_finished(poll: Mapping[str, Any] | None) -> bool:
    """Whether a poll result (see ``job_status``) says the job has ended (any way)."""
    poll = job_status(poll)
    return bool(poll) and bool(poll.get("finished")) and not poll.get("skipped")


def node_rc(poll: Mapping[str, Any]) -> int | None:
    """Exit code of a finished job: the case's (``command``: ``rc``) or the container's
    (``community.docker.docker_container``: ``status``, also as the ``result`` of the module run
    that ``node_job.py`` supervised, whose own exit code is 0 whatever the container's); None
    when it never exited itself."""
    poll = job_status(poll)
    result = poll.get("result")
    if isinstance(result, Mapping):
        code = node_rc(result)
        if code is not None:
            return code
    for key in ("rc", "status"):
        value = poll.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    container = poll.get("container")
    if isinstance(container, Mapping):
        state = container.get("State") or {}
        if isinstance(state.get("ExitCode"), int) and not state.get("Running"):
            return state["ExitCode"]
    return None


def node_failed(poll: Mapping[str, Any]) -> bool:
    """A finished job that did not exit 0 (or was killed at its time limit)."""
    poll = job_status(poll)
    return node_rc(poll) != 0 or TIMEOUT_MSG in str(poll.get("msg", ""))


def round_over(round_hosts: Iterable[str], polls: Mapping[str, Any], active: Iterable[str],
               deadline_ms: float, now_ms: float | None = None) -> bool:
    """True when the round's wait should end.

    Args:
        round_hosts: the round's hosts (noderank order).
        polls: host -> its latest poll result (see ``job_status``).
        active: hosts still in the play (an unreachable host leaves it).
        deadline_ms: epoch milliseconds after which the round is over regardless.
        now_ms: the present, epoch milliseconds (default: now).
    """
    now_ms = time.time() * 1000 if now_ms is None else now_ms
    active = set(active)
    pending = False
    for host in round_hosts:
        if host not in active:
            return True
        poll = polls.get(host) or {}
        if not node_finished(poll):
            pending = True
        elif node_failed(poll):
            return True
    return not pending or now_ms > deadline_ms


def node_outcome(poll: Mapping[str, Any] | None, deadline_passed: bool = False,
                 output: str = "") -> dict[str, Any]:
    """How one node ended, as round.json records it: ``rc`` (None when it did not exit by
    itself), ``timed_out`` (killed at the case timeout), ``stopped`` (it had not ended when the
    round did: another node failed, a host was lost or the run was interrupted) and
    ``output`` (the launcher's own stdout and stderr, or the job's message). A node still
    running when the round's deadline passed counts as timed out."""
    poll = job_status(poll)
    finished = node_finished(poll)
    timed_out = TIMEOUT_MSG in str(poll.get("msg", "")) or (deadline_passed and not finished)
    text = output or "\n".join(str(poll.get(k) or "") for k in ("stdout", "stderr", "msg")).strip()
    return {"rc": node_rc(poll) if finished else None, "timed_out": bool(timed_out),
            "stopped": not finished and not timed_out, "output": text}
