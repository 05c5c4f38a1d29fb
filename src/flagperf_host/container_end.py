"""End a node's container and keep its output: the container role's host side at a node's end
(run by ``flagperf.benchmark.piped_script``; the Docker SDK for Python,
which Ansible's Docker modules need on the host too).

    flagperf_host.container_end --name NAME --output-dir DIR

``DIR/container.log`` gets the container's own output (its stdout and stderr: the launcher's
lines, torchrun's; empty when it printed nothing):

* when the module run that started the container saw it exit (``DIR/job_result.json`` holds
  its result, with that output; ``docker_container``'s cleanup removed the container), from
  that result;
* else (the node was stopped: another node failed, the case timed out, the run was
  interrupted) from the engine, and the container is removed, killed first if it still runs;
* when the engine no longer has it because the module run has just removed it (the container
  ended as the node was being stopped), from the module's result once the supervisor recorded
  the run's end (``DIR/launch.json``), waiting up to ``RESULT_WAIT`` seconds for it.

No container.log when no container ran (the image or an option was refused: the module's
result says so, and the round's record has it). Prints one JSON line (``changed``, ``msg``)
and exits 0; 1 when the engine could not be reached or refused.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

# The supervised module run's result, and its end's record once that run has ended.
from flagperf_host.node_job import RESULT, STATUS

LOG = "container.log"
RESULT_WAIT = 5                # seconds for a module run that just removed its container to end


def ended_output(out: Path) -> str | None:
    """The container's output from the module's result when the module saw it exit, else None."""
    try:
        result = json.loads((out / RESULT).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None                 # no result yet: the module run still waited, or was killed
    container = result.get("container") if isinstance(result, dict) else None
    if isinstance(container, dict) and isinstance(container.get("Output"), str):
        return container["Output"]
    return None


def output_after_removal(out: Path) -> str | None:
    """The container's output from the module's result, once its run has ended (the
    supervisor's ``STATUS``), waiting up to ``RESULT_WAIT`` seconds; None if it kept none."""
    deadline = time.monotonic() + RESULT_WAIT
    while not (out / STATUS).exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    return ended_output(out)


def main() -> int:
    parser = argparse.ArgumentParser(prog="container_end", description=__doc__.splitlines()[0])
    parser.add_argument("--name", required=True)
    parser.add_argument("--output-dir", required=True)
    args = parser.parse_args()
    out = Path(args.output_dir)
    output = ended_output(out)
    if output is not None:
        (out / LOG).write_text(output, encoding="utf-8")
        print(json.dumps({"changed": False, "msg": "ended by itself: its output kept"}))
        return 0
    import docker                   # only here: a node that ended needs no engine
    from docker.errors import DockerException, NotFound

    try:
        container = docker.from_env().containers.get(args.name)
    except NotFound:
        # Ended and removed by its module run since ended_output looked: its result says.
        output = output_after_removal(out)
        if output is not None:
            (out / LOG).write_text(output, encoding="utf-8")
            print(json.dumps({"changed": False, "msg": "ended by itself: its output kept"}))
        else:
            print(json.dumps({"changed": False, "msg": "no such container"}))
        return 0
    except DockerException as err:
        print(json.dumps({"failed": True, "msg": f"Docker engine: {err}"}))
        return 1
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / LOG).write_bytes(container.logs(stdout=True, stderr=True))
        container.remove(force=True)
    except NotFound:
        pass                        # removed meanwhile (its module run's cleanup)
    except DockerException as err:
        print(json.dumps({"failed": True, "msg": f"could not remove {args.name}: {err}"}))
        return 1
    print(json.dumps({"changed": True, "msg": "stopped and removed, its log kept"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
