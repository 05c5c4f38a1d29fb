"""A node's container as one command line, for rounds run as Slurm jobs (backend slurm), where no
Ansible module runs on the nodes: ``docker run``, pyxis's ``srun --container-image`` or
``apptainer exec``, around the node's launcher argv (``launchers.launch_argv`` with the paths as
the container sees them).

Every runtime mounts the same three folders as the container role does over ssh: the checkout
read-only at ``/workspace/flagperf``, the node's folder at ``/workspace/output`` (the working
folder) and the case's data read-only at ``/workspace/data``. The case's environment is passed
by name only (``docker run -e NAME``; pyxis and Apptainer pass the caller's environment on), its
values staying in the environment of the process that runs the command (node_job's), not on a
command line that ``ps`` shows.

* ``docker``: ``--init`` (an init process in the container passes SIGTERM on and reaps),
  ``--label flagperf.slurm_job=<job id>`` (containerd, not the job, owns the container: it
  outlives ``scancel``; the node's end step, and a site's Epilog, remove the job's containers by
  this label), not ``--rm`` (the end step keeps its log first), the vendor's options
  (``vendor.yml: container``: network, ipc, shm, devices, ``--gpus`` from its
  ``device_requests``, privileged only where it says so) and the ssh user's uid:gid;
* ``pyxis`` (NVIDIA's Slurm plugin with enroot): a job step of its own on this node,
  ``srun --overlap --nodes=1 --ntasks=1 --nodelist=<node> --container-image=IMAGE
  --container-mounts=... --container-workdir=/workspace/output --no-container-mount-home``;
  it runs as the job's user and stays in the job (``scancel`` ends it);
* ``apptainer``: ``apptainer exec --no-home --bind ... --pwd /workspace/output [--nv] IMAGE``
  (``--nv``, NVIDIA's devices and driver, where the vendor requests devices); it stays in the
  job's processes.

Neither pyxis nor Apptainer is in Debian 12: their command lines are built and tested here, not
run.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: The label a job's Docker containers carry, with the job's id as its value.
JOB_LABEL = "flagperf.slurm_job"
#: Where the container sees the checkout, the node's folder and the data.
ROOT, OUTPUT, DATA = "/workspace/flagperf", "/workspace/output", "/workspace/data"
RUNTIMES = ("docker", "pyxis", "apptainer")


def mounts(root: str, output_dir: str, data_dir: str) -> list[tuple[str, str, bool]]:
    """``(host path, container path, read-only)`` of a node's three folders (no data folder
    where the case reads none)."""
    found = [(root, ROOT, True), (output_dir, OUTPUT, False)]
    if data_dir:
        found.append((data_dir, DATA, True))
    return found


def gpus(device_requests: list[Mapping[str, Any]]) -> str:
    """``docker run --gpus``'s value for community.docker's ``device_requests``: ``all`` for
    ``count: -1``, the count, or ``device=<ids>``; "" for none."""
    for request in device_requests:
        if request.get("device_ids"):
            return "device=" + ",".join(str(i) for i in request["device_ids"])
        count = request.get("count")
        if count is not None:
            return "all" if int(count) < 0 else str(int(count))
    return ""


def container_argv(runtime: str, image: str, name: str, job_token: str, node_token: str,
                   root: str, output_dir: str, data_dir: str, env_names: list[str],
                   options: Mapping[str, Any], user: str, argv: list[str]) -> list[str]:
    """The command line that runs ``argv`` (the node's launcher, with the container's paths) in
    the node's container.

    Args:
        runtime: ``docker``, ``pyxis`` or ``apptainer``.
        image: docker's ``name:tag``; pyxis's enroot URI or squashfs file; apptainer's ``.sif``
            file or URI.
        name: the container's name (docker).
        job_token: the job's id as the command line holds it (replaced on the node).
        node_token: this node's name as the command line holds it (pyxis's ``--nodelist``).
        root, output_dir, data_dir: the checkout, the node's folder and the data on the node
            ("" for no data).
        env_names: the variables of the case's environment (docker passes each by name).
        options: the vendor's container options (``vendor.yml: container``).
        user: ``uid:gid`` the docker container runs as ("" for the image's user).
        argv: the launcher's command line.

    Raises:
        ValueError: an unknown runtime.
    """
    volumes = mounts(root, output_dir, data_dir)
    if runtime == "docker":
        line = ["docker", "run", "--init", "--name", name, "--label", f"{JOB_LABEL}={job_token}",
                "--workdir", OUTPUT, "--network", str(options.get("network_mode") or "host")]
        if user:
            line += ["--user", user]
        for source, target, read_only in volumes:
            line += ["--volume", f"{source}:{target}:{'ro' if read_only else 'rw'}"]
        if options.get("ipc_mode"):
            line += ["--ipc", str(options["ipc_mode"])]
        if options.get("shm_size"):
            line += ["--shm-size", str(options["shm_size"])]
        if options.get("privileged") is True:
            line.append("--privileged")
        for device in options.get("devices") or ():
            line += ["--device", str(device)]
        requested = gpus(options.get("device_requests") or [])
        if requested:
            line += ["--gpus", requested]
        for variable in env_names:
            line += ["--env", variable]
        return line + [image, *argv]
    if runtime == "pyxis":
        return ["srun", "--overlap", "--nodes=1", "--ntasks=1", f"--nodelist={node_token}",
                f"--container-image={image}",
                "--container-mounts=" + ",".join(
                    f"{source}:{target}" + (":ro" if read_only else "")
                    for source, target, read_only in volumes),
                f"--container-workdir={OUTPUT}", "--no-container-mount-home", *argv]
    if runtime == "apptainer":
        line = ["apptainer", "exec", "--no-home", "--bind", ",".join(
            f"{source}:{target}" + (":ro" if read_only else "") for source, target, read_only in volumes),
            "--pwd", OUTPUT]
        if options.get("device_requests"):
            line.append("--nv")
        return line + [image, *argv]
    raise ValueError(f"unknown container runtime {runtime!r}: known are {', '.join(RUNTIMES)}")
