"""One node's part of a round run as a Slurm job (backend slurm): the job's task on each node,
which its batch step starts with ``srun`` (``slurm_job batch``).

    python3 JOB_DIR/.flagperf_slurm/flagperf_host.zip slurm_node --job-dir JOB_DIR

``JOB_DIR`` is the round's folder on the submit host, on a file system the nodes share.
``.flagperf_slurm/job.json`` there (``slurm_job submit``) holds, for each noderank, the steps an
ssh round runs on a host, as the controller rendered them from the roles' step definitions
(``{"module", "argv", "environment"}`` each, entry modules of this package):

* ``start``: the host's description (``sys_info``), the monitor's start (``sys_monitor``) and the
  case's (``node_job start``: its launcher, or ``docker run --init`` with the job's label,
  ``srun --container-image``, ``apptainer exec``);
* ``end``: the case's stop (``node_job stop``; runtime docker ``container_end`` first: the
  container's log kept, the container removed) and the monitor's stop.

This node is ``SLURM_NODEID``; the job's nodes are ``scontrol show hostnames
$SLURM_JOB_NODELIST`` in that order (noderank 0, the master, first), their addresses Slurm's
``NodeAddr`` (``sinfo``). The controller rendered the steps before the nodes were known: the
tokens ``@FLAGPERF_HOST_<i>@`` (node i's name), ``@FLAGPERF_ADDR_<i>@`` (its address) and
``@FLAGPERF_JOB_ID@`` in them are replaced with this job's (plain text replacement, nothing
evaluated).

The node: clears the page cache where it may (``clear_caches``; root only, else a note), runs
the start steps, waits for its case as an ssh round does (``node_job wait``, one slice at a
time), then, whatever happened, runs the end steps: the case ended, a start step failed, or
SIGTERM came (``scancel``, the job's time limit, or ``srun`` ending the step because another
node's case failed: ``--kill-on-bad-exit``). It writes ``.flagperf_slurm/node<i>.json``, first
``{"noderank", "host", "address", "dir", "started_ms"}``, then also ``"node"`` (``node_job
wait``'s last report: ``finished``, ``rc``, ``timed_out``, ``msg``), ``"stopped"`` (SIGTERM
came while its case ran: the case's exit, whatever its code, was the signal's), ``"cache"``,
``"errors"`` (start and end steps that failed) and ``"ended_ms"``.
It exits 0 when its case exited 0 or was stopped, else 1 (so that ``srun`` ends the other nodes).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from flagperf_host.node_job import wait as wait_node
from flagperf_host.process import now_ms, write_json

PROG = "slurm_node"
#: The job's own files under the round's folder (the submit step's, the nodes' records).
STATE_DIR = ".flagperf_slurm"
SPEC = "job.json"
ARCHIVE = "flagperf_host.zip"
#: Node i's name, its address (NodeAddr) and the job's id, in the steps the controller rendered.
HOST_TOKEN = "@FLAGPERF_HOST_{}@"
ADDR_TOKEN = "@FLAGPERF_ADDR_{}@"
JOB_TOKEN = "@FLAGPERF_JOB_ID@"
STEP_TIMEOUT = 120           # seconds a start or end step may take (each returns once started)


class Stopped(Exception):
    """SIGTERM came while the node waited for its case."""


def node_record(state: Path, noderank: int) -> Path:
    return state / f"node{noderank}.json"


def job_nodes(nodelist: str) -> tuple[list[str], dict[str, str]]:
    """The job's node names in order (``scontrol show hostnames``) and their addresses
    (``sinfo``'s NodeAddr by name; the name itself where Slurm gives none).

    Raises:
        OSError, subprocess.CalledProcessError: the Slurm commands failed.
    """
    names = subprocess.run(["scontrol", "show", "hostnames", nodelist], check=True,
                           capture_output=True, text=True, timeout=60).stdout.split()
    listed = subprocess.run(["sinfo", "-h", "-N", "-n", nodelist, "-o", "%N|%o"], check=True,
                            capture_output=True, text=True, timeout=60).stdout
    addresses = dict(line.split("|", 1) for line in listed.split() if "|" in line)
    return names, {name: addresses.get(name) or name for name in names}


def substitute(value, tokens: dict[str, str]):
    """``value`` (str, list or dict, nested) with every token replaced."""
    if isinstance(value, str):
        for token, actual in tokens.items():
            value = value.replace(token, actual)
        return value
    if isinstance(value, list):
        return [substitute(item, tokens) for item in value]
    if isinstance(value, dict):
        return {key: substitute(item, tokens) for key, item in value.items()}
    return value


def run_step(archive: Path, step: dict, log) -> str:
    """Run one step (an entry module of this package, from the job's archive) as the ssh
    round's ``piped_script`` would, each in its own interpreter; "" when it exited 0, else
    what went wrong."""
    name = step["module"].split(".", 1)[1]
    argv = [sys.executable, str(archive), name, *map(str, step.get("argv", []))]
    environment = {str(k): str(v) for k, v in (step.get("environment") or {}).items()}
    try:
        done = subprocess.run(argv, env={**os.environ, **environment},
                              stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=STEP_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"{step['module']}: {err}"
    log(f"{step['module']} {' '.join(argv[3:4])}: rc {done.returncode} "
        f"{done.stdout.strip()[-300:]}")
    if done.returncode != 0:
        return f"{step['module']} exited {done.returncode}: {(done.stderr or done.stdout).strip()[-500:]}"
    return ""


def clear_caches() -> str:
    """Drop the page cache, dentries and inodes (as the cache_clear role does over ssh):
    ``"dropped"``, or why not."""
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w", encoding="ascii") as handle:
            handle.write("3\n")
        return "dropped"
    except OSError as err:
        return f"page cache not dropped (needs root on the node): {err.strerror or err}"


def run_node(job_dir: Path, noderank: int, nodelist: str, job_id: str) -> int:
    state = job_dir / STATE_DIR
    try:
        spec = json.loads((state / SPEC).read_text(encoding="utf-8"))
        names, addresses = job_nodes(nodelist)
        tokens = {JOB_TOKEN: job_id}
        for index, name in enumerate(names):
            tokens[HOST_TOKEN.format(index)] = name
            tokens[ADDR_TOKEN.format(index)] = addresses[name]
        node = substitute(spec["nodes"][noderank], tokens)
    except (OSError, ValueError, KeyError, IndexError, subprocess.SubprocessError) as err:
        # Nothing started: the node says why, and fails (srun ends the others).
        write_json(node_record(state, noderank), {
            "noderank": noderank, "host": os.environ.get("SLURMD_NODENAME", ""), "stopped": False,
            "node": {"finished": 1, "rc": None, "msg": "the node's steps did not start"},
            "errors": [f"{PROG}: {type(err).__name__}: {err}"], "ended_ms": now_ms()})
        print(f"{PROG}: {type(err).__name__}: {err}", file=sys.stderr, flush=True)
        return 1
    archive = state / ARCHIVE
    host = names[noderank]
    record = {"noderank": noderank, "host": host, "address": addresses[host],
              "dir": node["dir"], "started_ms": now_ms()}
    write_json(node_record(state, noderank), record)

    def log(line: str) -> None:
        print(f"{PROG} {host}: {line}", flush=True)

    stopping = {"now": False, "stopped": False}
    report: dict = {"finished": 0}

    def on_term(_signum, _frame):
        # Slurm signals the whole step at once: the case's launcher (torchrun exits 1 on
        # SIGTERM) as well as this process. Its exit is the signal's unless it had ended first.
        if not report.get("finished"):
            stopping["stopped"] = True
        if stopping["now"]:
            stopping["now"] = False
            raise Stopped()

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    errors: list[str] = []
    out = job_dir / node["dir"]
    try:
        stopping["now"] = True
        if spec.get("clear_caches"):
            record["cache"] = clear_caches()
            log(record["cache"])
        for step in node["start"]:
            if stopping["stopped"]:
                break
            error = run_step(archive, step, log)
            if error:
                errors.append(error)
                break
        while not errors and not stopping["stopped"]:
            report = wait_node(argparse.Namespace(output_dir=str(out),
                                                  seconds=float(spec.get("wait_slice", 10))))
            if report.get("finished"):
                break
    except Stopped:
        pass
    except Exception as err:        # noqa: BLE001 - recorded: the node still ends and reports
        errors.append(f"{PROG}: {type(err).__name__}: {err}")
    finally:
        stopping["now"] = False
    # Whatever happened: stop what still runs, keep what it wrote.
    for step in node["end"]:
        error = run_step(archive, step, log)
        if error:
            errors.append(error)
    if not report.get("finished"):
        report = wait_node(argparse.Namespace(output_dir=str(out), seconds=0))
    report.pop("stdout", None)
    report.pop("result", None)
    record.update(node=report, stopped=stopping["stopped"], errors=errors, ended_ms=now_ms())
    write_json(node_record(state, noderank), record)
    rc = report.get("rc")
    failed = (errors and not stopping["stopped"]) or report.get("timed_out") or (
        report.get("finished") and rc != 0 and not stopping["stopped"])
    log(f"ended: rc {rc}, {'stopped' if stopping['stopped'] else 'finished'}"
        + (f", errors: {errors}" if errors else ""))
    return 1 if failed else 0


def main() -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument("--job-dir", required=True, type=Path)
    args = parser.parse_args()
    try:
        noderank = int(os.environ["SLURM_NODEID"])
        nodelist = os.environ["SLURM_JOB_NODELIST"]
        job_id = os.environ["SLURM_JOB_ID"]
    except (KeyError, ValueError):
        parser.error("not in a Slurm job step (SLURM_NODEID, SLURM_JOB_NODELIST, SLURM_JOB_ID)")
    return run_node(args.job_dir, noderank, nodelist, job_id)


if __name__ == "__main__":
    sys.exit(main())
