#!/usr/bin/env python3
"""Wait on the host for an Ansible async job to end, one slice at a time: the container role's
host side (standard library only, piped to the host's Python with each task by
``flagperf.benchmark.piped_script``).

    async_wait.py --results-file FILE --seconds S [--remove]

FILE is the ``results_file`` of a task started with ``async`` and ``poll: 0`` (here the
container's ``community.docker.docker_container`` run, which returns when the container
exits); Ansible's async wrapper replaces it atomically with the job's result when the job ends,
or with ``{"failed": 1, "msg": "Timeout exceeded", ...}`` when it kills the job at its limit.
Waits up to S seconds (no traffic with the controller meanwhile) and prints one JSON line, what
``ansible.builtin.async_status`` prints for the job (its reading of the same file): the job's
result with ``finished`` true once it ended, ``{"started": true, "finished": false}`` while it
runs, a failed and finished document when the file does not exist. One exchange per slice and
no module run, where async_status costs a module run per check. With ``--remove``, a job that
ended has its results file removed once read (async_status's ``mode: cleanup``; the async
wrapper leaves it in ``~/.ansible_async`` for good otherwise). Exits 0; errors in the
arguments exit 2 (argparse).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

# The name in messages: the script reaches the host on standard input (sys.argv[0] is "-").
PROG = "async_wait.py"


def job_status(path: str) -> dict | None:
    """async_status's reading of the results file; None while the job runs."""
    jid = os.path.basename(path)
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.loads(handle.read())
    except FileNotFoundError:
        return {"failed": True, "started": True, "finished": True, "ansible_job_id": jid,
                "msg": "could not find job"}
    except (OSError, ValueError):
        return None     # not written yet
    if not isinstance(data, dict) or "started" in data:
        return None     # the wrapper's "started" document: still running
    data["finished"] = True
    data["ansible_job_id"] = jid
    return data


def main() -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument("--results-file", required=True)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--remove", action="store_true",
                        help="remove the results file of a job that ended")
    args = parser.parse_args()
    path = os.path.expanduser(args.results_file)
    deadline = time.monotonic() + max(args.seconds, 0)
    while True:
        document = job_status(path)
        if document is not None:
            if args.remove:
                try:
                    os.remove(path)
                except FileNotFoundError:
                    pass
            break
        if time.monotonic() >= deadline:
            document = {"started": True, "finished": False, "results_file": args.results_file}
            break
        time.sleep(0.2)
    print(json.dumps(document))
    return 0


if __name__ == "__main__":
    sys.exit(main())
