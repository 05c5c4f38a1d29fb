#!/usr/bin/env python3
"""Measure what a round through Slurm costs beyond a bare ``srun`` of the same case, in one run.

    python bench/slurm_overhead.py [--repeat 3] [--duration 2]

Needs what the Slurm tests need (root, ``sshd``, Debian's slurmctld, slurmd, slurm-client and
munge; see ``tests/slurm_cluster.py`` and ``tests/loopback_cluster.py``). It starts the test
Slurm cluster (two nodes, ``slurm1`` and ``slurm2``) and one loopback sshd host as the login node,
then runs the diagnostic case ``sleep:pytorch:cpu:2:1`` (``launcher: python``, ``--duration``
seconds of "training", one process per node) ``--repeat`` times each way, alternately:

* ``bare``: ``srun --nodes=2 --ntasks-per-node=1`` of the case's own command line as the
  login node's user (each node's rank from ``SLURM_NODEID``, the master the job's first node),
  wall time from srun's start to its exit: what Slurm itself costs;
* ``flagperf``: the round as the wrapper runs it, ``ansible-playbook playbooks/rounds.yml -e
  flagperf_select=<round>`` after ``preflight.yml`` and ``prepare.yml`` once, wall time of that
  process (the job's definition and submission over ssh, the wait's slices, every node's
  description, monitor, case and end, the fetch of both node folders, round.json), and
  ``in-job``: round.json's ``wall_time`` (the job's start to its end) with ``queued`` (its
  ``slurm.queued_s``).

It prints each figure's median and the overhead ``flagperf - bare``, and the case's own time
(FINISHED ``e2e_time``) for both. Figures only: nothing is asserted. The cluster, the sshd host
and the ssh connections it opened are stopped at the end. The cores are shared with the
controller and with whatever else runs on the machine (its load average is printed).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "src"))

import loopback_cluster  # noqa: E402
import slurm_cluster  # noqa: E402
from flagperf_ansible.config.launchers import case_path, case_script  # noqa: E402

CASE = "sleep-pytorch-cpux2x1"


def timed(argv: list[str], env: dict[str, str], cwd: Path = ROOT) -> tuple[float, str]:
    """Run ``argv``; (wall seconds, stdout). Raises on a non-zero exit."""
    begin = time.monotonic()
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    wall = time.monotonic() - begin
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:3])} exited {done.returncode}:\n"
                           f"{done.stdout[-3000:]}\n{done.stderr[-2000:]}")
    return wall, done.stdout


def bare_srun(root: Path, round_: dict, slurm, folder: Path, port: int) -> tuple[float, float]:
    """One bare srun of the planned ``round_``'s case on both nodes as the ssh user, the code as
    prepare shipped it to ``root``, its output under ``folder`` (the user's); (wall s, e2e_time
    s). The case's command and ``PYTHONPATH`` are the launcher's (``config.launchers``)."""
    user = loopback_cluster.USER
    out = folder / f"bare-{time.monotonic_ns()}"
    out.mkdir(parents=True)
    (out / "config.yaml").write_text(json.dumps(round_["config"]))
    for path in (folder, out, out / "config.yaml"):
        shutil.chown(path, user)
    command = " ".join(case_script(round_, str(root)))
    # The python launcher's environment (flagperf_ansible.config.launchers.Node.rank_env).
    script = ('export RANK=$SLURM_NODEID LOCAL_RANK=0 WORLD_SIZE=2 PYTHONUNBUFFERED=1 '
              f'PYTHONPATH={":".join(case_path(round_, str(root)))} MASTER_PORT={port} '
              'MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -1); '
              f'mkdir -p {out}/n$SLURM_NODEID && exec /usr/bin/python3 {command} '
              f'--config {out}/config.yaml --output_dir {out}/n$SLURM_NODEID --data_dir /tmp')
    env = {**slurm.env, "HOME": str(Path("~" + user).expanduser())}
    wall, _ = timed(["runuser", "-u", user, "--", "srun", "--nodes=2", "--ntasks-per-node=1",
                     f"--partition={slurm_cluster.PARTITION}", "sh", "-c", script], env, cwd=out)
    e2e = 0.0
    for log in out.glob("n*/rank*.out.log"):
        for line in log.read_text().splitlines():
            if '"FINISHED"' in line:
                e2e = max(e2e, json.loads(line.split("[PerfLog] ", 1)[1])["value"]["e2e_time"])
    return wall, e2e


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--duration", type=float, default=2.0)
    args = parser.parse_args()
    missing = slurm_cluster.problems() + loopback_cluster.problems()
    if missing:
        print("cannot run: " + "; ".join(missing), file=sys.stderr)
        return 2
    state = Path(tempfile.mkdtemp(prefix="slurm-bench-"))
    project = state / "project"
    from checkout_copy import copy_checkout

    copy_checkout(project)
    standard = yaml.safe_load((project / "benchmarks/sleep/pytorch/config/standard.yaml")
                              .read_text())["params"]
    if args.duration != standard["duration"]:   # an override equal to the standard is refused
        config_dir = project / "vendors/cpu/sleep-pytorch/config"
        config_dir.mkdir(parents=True, exist_ok=True)
        (config_dir / "cpux2x1.yaml").write_text(json.dumps({"duration": args.duration}))
    slurm = slurm_cluster.start()
    login = None
    port = 29621
    home = Path("~" + loopback_cluster.USER).expanduser() / "slurm-bench"
    try:
        login = loopback_cluster.start(state / "login", 1, settings={
            "flagperf_backend": "slurm", "flagperf_slurm_partition": slurm_cluster.PARTITION,
            "flagperf_container_runtime": "none", "flagperf_master_port": port,
            "flagperf_wait_slice": 2, "flagperf_clear_caches": False,
            "flagperf_root": str(home / "flagperf"), "flagperf_workdir": str(home / "work"),
            "flagperf_results_dir": str(state / "results"),
            "flagperf_cases": [f"sleep:pytorch:cpu:2:1:{args.repeat}"]},
            sshd_options=[f"SetEnv=SLURM_CONF={slurm.conf}"])
        env = {**os.environ, "ANSIBLE_CONFIG": str(project / "ansible.cfg"), "ANSIBLE_FORCE_COLOR": "0",
               "FLAGPERF_PROJECT_DIR": str(project),
               "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
        run_id = time.strftime("run%Y%m%d%H%M%S")
        base = ["ansible-playbook", "-i", str(login.inventory), "-e", f"flagperf_run_id={run_id}"]
        for playbook in ("playbooks/preflight.yml", "playbooks/prepare.yml"):
            timed([base[0], playbook, *base[1:]], env, cwd=project)
        run_dir = state / "results" / run_id
        plan = json.loads((run_dir / "plan.json").read_text())
        round_ = plan["rounds"][0]
        bare, ours, in_job, queued, e2e_bare, e2e_ours = [], [], [], [], [], []
        for number in range(1, args.repeat + 1):
            wall, e2e = bare_srun(home / "flagperf", round_, slurm, home / "bare", port)
            bare.append(wall)
            e2e_bare.append(e2e)
            wall, _ = timed([base[0], "playbooks/rounds.yml", *base[1:], "-e",
                             f"flagperf_select={CASE}/round{number}"], env, cwd=project)
            document = json.loads((run_dir / CASE / f"round{number}" / "round.json").read_text())
            if document["status"] != "passed":
                raise RuntimeError(f"round {number}: {document['status']} {document['reason']}")
            ours.append(wall)
            in_job.append(document["wall_time"])
            queued.append(document["slurm"]["queued_s"])
            e2e_ours.append(document["finished"]["e2e_time"])
        median = statistics.median
        print(f"slurm round overhead: {CASE}, {args.duration:g} s case, 2 nodes, "
              f"median of {args.repeat}; load average {os.getloadavg()[0]:.2f} on "
              f"{os.cpu_count()} cores")
        print(f"  bare srun:             {median(bare):7.2f} s   (case e2e {median(e2e_bare):.2f} s)")
        print(f"  flagperf round:        {median(ours):7.2f} s   (case e2e {median(e2e_ours):.2f} s; "
              f"in job {median(in_job):.2f} s, queued {median(queued):.2f} s)")
        print(f"  overhead (flagperf - bare): {median(ours) - median(bare):7.2f} s per round "
              f"(in job - bare: {median(in_job) - median(bare):.2f} s)")
    finally:
        if login is not None:
            login.stop()
        slurm.stop()
        shutil.rmtree(state, ignore_errors=True)
        shutil.rmtree(home / "bare", ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
