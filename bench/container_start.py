#!/usr/bin/env python3
"""Measure what starting one container costs the machine: the ``community.docker.docker_container``
module run that a docker round hands to a host (``flagperf_host.node_job start --input``), against the
Docker SDK for Python and the ``docker`` CLI, same image, same options.

    python bench/container_start.py [--repeat 10] [--image flagperf-base:bookworm]
                                    [--python /usr/bin/python3]

Needs a running Docker engine and the image (``tests/loopback_cluster.py`` makes
``flagperf-base:bookworm``). The module's payload is the one Ansible builds (``ansible
localhost -m community.docker.docker_container`` with ``ANSIBLE_KEEP_REMOTE_FILES``: the
AnsiballZ wrapper with its arguments inside), run by ``--python`` as a host runs it. The SDK
(``docker``, Debian's ``python3-docker``; left out where ``--python`` cannot import it), the
other kept library for the engine's API, is run by the same Python: create, start, wait, read
the log and remove, as the module does. Each starts a container that runs ``true`` with host
networking, waits for its exit and removes it (``detach: false, cleanup: true``; ``docker run
--rm``). They alternate, ``--repeat`` times each, after one of each unmeasured. Figures per
start (medians):

* ``wall``: the starter's wall time, start to exit;
* ``starter CPU``: CPU seconds of the starting process (the module's or the SDK's Python, or
  the CLI);
* ``engine CPU``: CPU seconds of ``dockerd`` and ``containerd`` over the start;
* ``machine CPU``: busy CPU seconds of the whole machine over the start (all cores: the
  starter, the engine, the container runtime and its shim, the kernel's work).

It prints figures and the ratios to the CLI only: nothing is asserted. The project starts
containers with ``community.docker`` (a kept library over shelling out); this shows what that
choice costs each host per round, and what the other library would.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

NAME = "flagperf-bench-container-start"

# The Docker SDK's start, as the module's: create, start, wait for the exit, read the log,
# remove. Arguments: the image and the container's name.
SDK_START = """\
import sys
import docker

container = docker.from_env().containers.create(sys.argv[1], ["true"], name=sys.argv[2],
                                                network_mode="host")
try:
    container.start()
    status = container.wait()["StatusCode"]
    container.logs()
finally:
    container.remove(force=True)
sys.exit(status)
"""


def module_payload(work: Path, image: str, python: str) -> Path:
    """The AnsiballZ payload of ``docker_container`` with this benchmark's arguments."""
    args = {"name": NAME, "image": image, "command": ["true"], "network_mode": "host",
            "detach": False, "cleanup": True, "state": "started"}
    env = dict(os.environ, ANSIBLE_KEEP_REMOTE_FILES="1", ANSIBLE_PIPELINING="0",
               ANSIBLE_REMOTE_TMP=str(work), ANSIBLE_LOCAL_TEMP=str(work / "local"))
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    done = subprocess.run(["ansible", "localhost", "-c", "local", "-e",
                           f"ansible_python_interpreter={python}",
                           "-m", "community.docker.docker_container", "-a", json.dumps(args)],
                          env=env, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"the module run failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    (payload,) = work.glob("ansible-tmp-*/AnsiballZ_docker_container.py")
    return payload


def engine_cpu() -> float:
    """CPU seconds of the running dockerd and containerd processes."""
    import psutil

    total = 0.0
    for process in psutil.process_iter(["name", "cpu_times"]):
        if process.info["name"] in ("dockerd", "containerd") and process.info["cpu_times"]:
            times = process.info["cpu_times"]
            total += times.user + times.system
    return total


def machine_cpu() -> float:
    """Busy CPU seconds of the whole machine since boot (user, nice, system, irq, softirq)."""
    import psutil

    times = psutil.cpu_times()
    return sum(getattr(times, name, 0.0) for name in ("user", "nice", "system", "irq", "softirq"))


def starter_cpu() -> float:
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return children.ru_utime + children.ru_stime


def measure(argv: list[str]) -> dict[str, float]:
    """Start one container with ``argv``; the figures of that start. Raises on a failure."""
    before = time.monotonic(), starter_cpu(), engine_cpu(), machine_cpu()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    after = time.monotonic(), starter_cpu(), engine_cpu(), machine_cpu()
    if done.returncode != 0:
        raise RuntimeError(f"{argv[0]} exited {done.returncode}: {done.stdout[-1000:]}"
                           f"{done.stderr[-1000:]}")
    return dict(zip(("wall", "starter", "engine", "machine"),
                    (b - a for a, b in zip(before, after))))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=10, help="measured starts of each")
    parser.add_argument("--image", default="flagperf-base:bookworm")
    parser.add_argument("--python", default="/usr/bin/python3",
                        help="the Python that runs the module, as on a host")
    args = parser.parse_args()
    if shutil.which("docker") is None:
        print("needs the docker CLI and a running engine", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="container-start-"))
    try:
        payload = module_payload(work, args.image, args.python)
        starters = {"module": [args.python, str(payload)],
                    "sdk": [args.python, "-c", SDK_START, args.image, NAME],
                    "cli": ["docker", "run", "--rm", "--name", NAME, "--network", "host",
                            args.image, "true"]}
        if subprocess.run([args.python, "-c", "import docker"], capture_output=True).returncode:
            print(f"{args.python} cannot import docker (python3-docker): no sdk row")
            del starters["sdk"]
        rows: dict[str, list[dict[str, float]]] = {name: [] for name in starters}
        for number in range(args.repeat + 1):
            for name, argv in starters.items():
                figures = measure(argv)
                if number:          # the first of each warms the caches
                    rows[name].append(figures)
    finally:
        subprocess.run(["docker", "rm", "-f", NAME], capture_output=True)
        shutil.rmtree(work, ignore_errors=True)

    print(f"host: {os.cpu_count()} logical CPUs, load {os.getloadavg()[0]:.2f}; "
          f"{args.repeat} starts each of {args.image} (true, host network), medians")
    medians = {name: {key: statistics.median(r[key] for r in found) for key in found[0]}
               for name, found in rows.items()}
    print(f"{'starter':<8} {'wall s':>7} {'starter CPU s':>14} {'engine CPU s':>13} "
          f"{'machine CPU s':>14}")
    for name, figures in medians.items():
        print(f"{name:<8} {figures['wall']:>7.2f} {figures['starter']:>14.2f} "
              f"{figures['engine']:>13.2f} {figures['machine']:>14.2f}")
    cli = medians["cli"]
    for name, figures in medians.items():
        if name != "cli":
            print(f"{name} / cli: wall {figures['wall'] / cli['wall']:.1f}x, machine CPU "
                  f"{figures['machine'] / cli['machine']:.1f}x; the {name} adds "
                  f"{figures['machine'] - cli['machine']:.2f} CPU s per container start")
    return 0


if __name__ == "__main__":
    sys.exit(main())
