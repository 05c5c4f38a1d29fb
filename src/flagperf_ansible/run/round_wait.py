"""Waiting for a round's nodes: how each node ended, and what its peers tell.

Each node of a round runs in the background under the launch role's ``flagperf_host.node_job``: runtime
``none`` the case itself, runtime ``docker`` a ``community.docker.docker_container`` module run
that starts the node's container and waits for it (its result is the wait's ``result``). The
``flagperf.benchmark.node_wait`` action waits for one node in a flat loop of wait slices (one
ssh exchange each, ``flagperf_host.node_job wait`` blocking on the host) and, between slices, reads what
the round's other nodes published on the controller (``RoundBoard``): a node that failed, or a
host that was lost, ends the wait of every other node of the round within about one slice (a
distributed job cannot go on without one of its ranks); the round's end then stops them.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

TIMEOUT_MSG = "Timeout exceeded"     # what async_wrapper leaves when it kills a job at its limit


def job_status(poll: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """A node's poll result as a job status: an ``async_status`` result as it is; for a
    ``flagperf.benchmark.piped_script`` run of ``flagperf_host.node_job`` or ``async_wait.py``, the JSON
    document it printed (its last JSON line), or, when it printed none (it could not run), a
    finished job with no exit code and the script's error as ``msg``; for a
    ``flagperf.benchmark.node_wait`` result, its ``node``."""
    if isinstance(poll, Mapping) and isinstance(poll.get("node"), Mapping):
        return poll["node"]
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
    that ``flagperf_host.node_job`` supervised, whose own exit code is 0 whatever the container's); None
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


class RoundBoard:
    """What the nodes of one round tell each other, on the controller: a file per node that
    ended (``ended``, ``failed``) or whose host was lost (``lost``), in a folder named after the
    round's start, which every wait of the round reads between slices. The waits of a round run
    in forks of one ``ansible-playbook`` process, which share its private temporary folder.

    Args:
        root: the controller folder that holds the boards (created when missing).
        round_id: names one start of one round (e.g. ``<case_id>/round<k>@<started_ms>``), so a
            round run again never reads an earlier attempt's board.
    """

    OUTCOMES = ("ended", "failed", "lost")

    def __init__(self, root: str | os.PathLike, round_id: str) -> None:
        digest = hashlib.sha256(round_id.encode("utf-8")).hexdigest()[:24]
        self.folder = Path(root) / f"round-{digest}"

    def publish(self, host: str, outcome: str) -> None:
        """Record how ``host``'s node ended (one of ``OUTCOMES``)."""
        if outcome not in self.OUTCOMES:
            raise ValueError(f"unknown outcome {outcome!r}")
        self.folder.mkdir(parents=True, exist_ok=True)
        name = hashlib.sha256(host.encode("utf-8")).hexdigest()[:24]
        tmp = self.folder / f".{name}.{os.getpid()}"
        tmp.write_text(json.dumps({"host": host, "outcome": outcome}), encoding="utf-8")
        os.replace(tmp, self.folder / f"{name}.json")

    def stopping_peer(self, host: str) -> str | None:
        """The first other host whose node failed or was lost (by name), or None."""
        try:
            entries = sorted(self.folder.glob("*.json"))
        except OSError:
            return None
        for entry in entries:
            try:
                said = json.loads(entry.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            if said.get("host") != host and said.get("outcome") in ("failed", "lost"):
                return str(said["host"])
        return None


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


#: Slurm's job states that end it at its time limit (the nodes' steps were stopped then).
SLURM_TIMED_OUT = ("TIMEOUT", "DEADLINE")


def slurm_round_hosts(report: Mapping[str, Any] | None,
                      deadline_passed: bool = False) -> list[dict[str, Any]]:
    """A Slurm round's hosts as ``round.json`` records them (the rows of an ssh round's
    ``flagperf_round_hosts``: ``host``, ``noderank``, ``rc``, ``timed_out``, ``stopped``,
    ``lost``, ``error``, ``wait_slices``), from the job's report (``flagperf_host.slurm_job``):
    one per node that started, its host Slurm's node name.

    A node stopped by SIGTERM (``scancel``, another node's failure) that had not ended by
    itself is ``stopped``, or ``timed_out`` where the job's time limit or the round's deadline
    ended it; a node that left no end record is ``lost`` (its slurmd or machine died); the start
    or end steps that failed on a node are its ``error``.
    """
    report = report or {}
    timed_out_job = str(report.get("state") or "") in SLURM_TIMED_OUT or deadline_passed
    rows = []
    for record in report.get("nodes") or []:
        node = dict(record.get("node") or {})
        outcome = node_outcome(node) if node else {"rc": None, "timed_out": False, "stopped": False}
        rc, stopped = outcome["rc"], outcome["stopped"]
        if record.get("stopped"):
            # SIGTERM came while the case ran: its exit was the signal's, whatever its code
            # (torchrun exits 1), not a failure of its own.
            rc, stopped = None, True
        timed_out = outcome["timed_out"] or (stopped and timed_out_job)
        errors = [] if record.get("stopped") else list(record.get("errors") or [])
        rows.append({"host": str(record.get("host") or f"noderank{record.get('noderank')}"),
                     "noderank": int(record.get("noderank", len(rows))),
                     "rc": rc, "timed_out": bool(timed_out), "stopped": stopped and not timed_out,
                     "lost": bool(record.get("lost")), "error": "; ".join(errors),
                     "wait_slices": None})
    return rows


def slurm_round_error(report: Mapping[str, Any] | None) -> str:
    """What went wrong with a Slurm round's job itself, "" when its nodes say it all: a job
    that was never submitted, or ended before any node started (the batch step failed)."""
    report = report or {}
    if not report.get("job_id"):
        return ""
    if report.get("finished") and report.get("started_ms") is not None and not report.get("nodes"):
        return (f"Slurm job {report['job_id']} ended ({report.get('state')}, exit "
                f"{report.get('exit_code')}) before any node started: see its slurm-"
                f"{report['job_id']}.out")
    return ""


def slurm_job_record(report: Mapping[str, Any] | None) -> dict[str, Any]:
    """What ``round.json`` keeps of a round's Slurm job: ``{job_id, name, state, reason,
    exit_code, partition, nodes (names, noderank order), queued_s, submitted_ms, started_ms,
    ended_ms}`` (``queued_s``: seconds from submission to the job's start, not counted in the
    round)."""
    report = report or {}
    nodes = sorted(report.get("nodes") or [], key=lambda r: int(r.get("noderank", 0)))
    return {"job_id": str(report.get("job_id") or ""), "name": report.get("name", ""),
            "state": report.get("state", ""), "reason": report.get("reason", ""),
            "exit_code": report.get("exit_code", ""), "partition": report.get("partition", ""),
            "nodes": [str(r.get("host") or "") for r in nodes],
            "queued_s": report.get("queued_s"), "submitted_ms": report.get("submitted_ms"),
            "started_ms": report.get("started_ms"), "ended_ms": report.get("ended_ms")}
