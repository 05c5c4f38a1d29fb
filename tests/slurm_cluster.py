"""A real Slurm cluster on one machine: munged, one slurmctld and two slurmd (Debian 12's
``slurmctld``, ``slurmd``, ``slurm-client`` and ``munge``, 22.05), each node a slurmd under
``unshare --uts`` with its own host name, address and port. Needs root (slurmd runs the jobs as
their users; munged runs as ``munge``).

    python tests/slurm_cluster.py up [--nodes 2]    # prints the slurm.conf path; Ctrl-C stops

Nodes ``slurm1..N`` have the addresses ``127.0.3.2..N+1`` (``FLAGPERF_SLURM_PREFIX``) and the
ports after slurmctld's 6917 (``FLAGPERF_SLURM_PORT``), in the partition ``bench``. Everything
the cluster writes is under ``/var/tmp/flagperf-slurm-<port>`` (its own munge key and socket,
``slurm.conf``, state, spool and logs), which a client names with ``SLURM_CONF``: nothing under
``/etc`` is touched, and two clusters on one machine stay apart. As DESIGN.md records: no
accounting (``sacct`` fails; ``scontrol show job`` forgets a job after ``MinJobAge``), jobs are
tracked in cgroups (``proctrack/cgroup``), and an ``Epilog`` removes the Docker containers
labelled with the job's id, which outlive ``scancel`` otherwise. ``SlurmdTimeout`` is 10 s, so a
node whose slurmd died is down within about that long.
"""

from __future__ import annotations

import argparse
import os
import pwd
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import loopback_cluster

PREFIX = os.environ.get("FLAGPERF_SLURM_PREFIX", "127.0.3.")
PORT = int(os.environ.get("FLAGPERF_SLURM_PORT", "6917"))
PARTITION = "bench"
#: The label a job's containers carry (flagperf_ansible.config.containers.JOB_LABEL).
JOB_LABEL = "flagperf.slurm_job"
COMMANDS = ("munged", "slurmctld", "slurmd", "sbatch", "srun", "squeue", "scancel", "scontrol",
            "unshare")

EPILOG = f"""#!/bin/sh
# Containers a job started outlive it (containerd owns them): remove this job's.
docker ps -aq --filter "label={JOB_LABEL}=$SLURM_JOB_ID" | xargs -r docker rm -f >/dev/null 2>&1
exit 0
"""


def problems() -> list[str]:
    """What this machine lacks for the cluster (empty when it can run)."""
    found = []
    if os.geteuid() != 0:
        found.append("not root")
    missing = [c for c in COMMANDS if shutil.which(c) is None
               and not Path("/usr/sbin", c).exists()]
    if missing:
        found.append(f"no {', '.join(missing)} (apt-get install slurmctld slurmd slurm-client "
                     "munge)")
    return found


def wait_port(address: str, port: int, seconds: float = 15.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            sock.settimeout(0.5)
            if sock.connect_ex((address, port)) == 0:
                return True
        time.sleep(0.1)
    return False


@dataclass
class SlurmCluster:
    state: Path
    nodes: dict[str, str]                          # node name -> address
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)   # daemon -> process
    argv: dict[str, list[str]] = field(default_factory=dict)

    @property
    def conf(self) -> Path:
        return self.state / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        """The environment a Slurm client command needs (``SLURM_CONF``)."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def command(self, *argv: str, check: bool = True) -> str:
        """A Slurm client command's standard output."""
        done = subprocess.run(argv, capture_output=True, text=True, env=self.env, timeout=60)
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip()}")
        return done.stdout

    def node_states(self) -> dict[str, str]:
        """Each node's state as sinfo shows it (``idle``, ``alloc``, ``down*``, ...)."""
        listed = self.command("sinfo", "-h", "-N", "-o", "%N %t", check=False)
        return dict(line.split() for line in listed.splitlines() if len(line.split()) == 2)

    def wait_idle(self, seconds: float = 60.0) -> None:
        """Until every node is idle (after a start, or after a node came back)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            states = self.node_states()
            if set(states) == set(self.nodes) and set(states.values()) == {"idle"}:
                return
            time.sleep(0.3)
        raise RuntimeError(f"Slurm nodes not idle: {self.node_states()}")

    def jobs(self, user: str | None = None) -> list[str]:
        """The ids of the jobs slurmctld holds (any state but completed), of ``user`` if given."""
        argv = ["squeue", "-h", "-o", "%i"] + (["-u", user] if user else [])
        return self.command(*argv, check=False).split()

    def slurmd_pid(self, node: str) -> int:
        return self.processes[f"slurmd-{node}"].pid

    def kill_slurmd(self, node: str) -> None:
        """SIGKILL to a node's slurmd alone (its job steps' slurmstepd go on, as on a real node
        whose daemon crashed)."""
        process = self.processes[f"slurmd-{node}"]
        process.kill()
        process.wait(timeout=10)

    def start_slurmd(self, node: str) -> None:
        """Start a node's slurmd (again, after ``kill_slurmd``)."""
        self._spawn(f"slurmd-{node}", self.argv[f"slurmd-{node}"])

    def _spawn(self, name: str, argv: list[str], user: str | None = None) -> None:
        log = open(self.state / f"{name}.out", "ab")
        self.argv[name] = argv
        self.processes[name] = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                                stderr=subprocess.STDOUT, user=user,
                                                env=self.env)
        log.close()

    def stop(self) -> None:
        """Cancel every job, then stop the daemons by their pids: the slurmd first (their job
        steps' slurmstepd end with the jobs), slurmctld, munged."""
        if "slurmctld" in self.processes and self.processes["slurmctld"].poll() is None:
            ids = self.jobs()
            if ids:
                self.command("scancel", *ids, check=False)
                deadline = time.monotonic() + 40
                while self.jobs() and time.monotonic() < deadline:
                    time.sleep(0.5)
        order = sorted(self.processes, key=lambda n: (not n.startswith("slurmd"), n == "munged"))
        for name in order:
            process = self.processes[name]
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(timeout=5)
        # A step daemon whose slurmd was killed outlives it: ours carry this cluster's SLURM_CONF.
        for pid in self.step_daemons():
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass

    def step_daemons(self) -> list[int]:
        """The pids of this cluster's running slurmstepd processes."""
        mark = f"SLURM_CONF={self.conf}".encode()
        found = []
        for entry in Path("/proc").iterdir():
            try:
                if (entry.name.isdigit() and (entry / "comm").read_text().strip() == "slurmstepd"
                        and mark in (entry / "environ").read_bytes().split(b"\0")):
                    found.append(int(entry.name))
            except OSError:
                continue
        return found


def write_config(state: Path, nodes: dict[str, str]) -> None:
    """slurm.conf, cgroup.conf and the Epilog under ``state``."""
    ports = {name: PORT + index + 1 for index, name in enumerate(nodes)}
    lines = [
        "ClusterName=flagperf",
        f"SlurmctldHost={socket.gethostname()}({PREFIX}1)",
        f"SlurmctldPort={PORT}",
        "AuthType=auth/munge",
        f"AuthInfo=socket={state}/munge/munge.socket",
        "CredType=cred/munge",
        "SlurmUser=root",
        "SlurmdUser=root",
        f"StateSaveLocation={state}/ctld",
        f"SlurmdSpoolDir={state}/spool/%n",
        f"SlurmctldPidFile={state}/slurmctld.pid",
        f"SlurmdPidFile={state}/slurmd-%n.pid",
        f"SlurmctldLogFile={state}/slurmctld.log",
        f"SlurmdLogFile={state}/slurmd-%n.log",
        "ProctrackType=proctrack/cgroup",
        "TaskPlugin=task/none",
        "AccountingStorageType=accounting_storage/none",
        "JobCompType=jobcomp/none",
        "JobAcctGatherType=jobacct_gather/none",
        "MpiDefault=none",
        "SchedulerType=sched/backfill",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "ReturnToService=2",
        "SlurmdTimeout=10",
        "KillWait=30",
        "MinJobAge=300",
        "PropagateResourceLimitsExcept=ALL",
        f"Epilog={state}/epilog.sh",
    ]
    for name, address in nodes.items():
        lines.append(f"NodeName={name} NodeHostname={name} NodeAddr={address} Port={ports[name]} "
                     f"CPUs={os.cpu_count() or 1} State=UNKNOWN")
    lines.append(f"PartitionName={PARTITION} Nodes={','.join(nodes)} Default=YES "
                 "MaxTime=INFINITE State=UP")
    (state / "slurm.conf").write_text("\n".join(lines) + "\n")
    (state / "cgroup.conf").write_text("CgroupPlugin=cgroup/v1\nCgroupMountpoint=/sys/fs/cgroup\n")
    epilog = state / "epilog.sh"
    epilog.write_text(EPILOG)
    epilog.chmod(0o755)


def start_for_test(count: int = 2) -> SlurmCluster:
    """``start`` for a test fixture: skipped where the cluster cannot run, a failure under CI
    (``$CI``), which must provide it."""
    from unavailable import unavailable

    missing = problems()
    if missing:
        unavailable("no Slurm cluster here: " + "; ".join(missing))
    return start(count)


def start(count: int = 2) -> SlurmCluster:
    """Start munged, slurmctld and ``count`` slurmd; return once every node is idle.

    Raises:
        RuntimeError: a daemon did not come up (its log is under the state folder).
    """
    state = Path(f"/var/tmp/flagperf-slurm-{PORT}")
    if state.exists():
        shutil.rmtree(state)            # an earlier cluster's state: jobs and nodes of its own
    state.mkdir(mode=0o755, parents=True)
    state.chmod(0o755)
    munge = pwd.getpwnam("munge")
    munge_dir = state / "munge"
    munge_dir.mkdir(mode=0o755)
    key = munge_dir / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    for path in (munge_dir, key):
        os.chown(path, munge.pw_uid, munge.pw_gid)
    for folder in ("ctld", "spool"):
        (state / folder).mkdir()
    nodes = {f"slurm{i + 1}": f"{PREFIX}{i + 2}" for i in range(count)}
    write_config(state, nodes)
    cluster = SlurmCluster(state=state, nodes=nodes)
    try:
        cluster._spawn("munged", ["munged", "-F", f"--socket={munge_dir}/munge.socket",
                                  f"--key-file={key}", f"--pid-file={munge_dir}/munged.pid",
                                  f"--log-file={munge_dir}/munged.log",
                                  f"--seed-file={munge_dir}/munged.seed"], user="munge")
        deadline = time.monotonic() + 10
        while not (munge_dir / "munge.socket").exists():
            if time.monotonic() > deadline or cluster.processes["munged"].poll() is not None:
                raise RuntimeError(f"munged did not start: see {munge_dir}/munged.log")
            time.sleep(0.05)
        cluster._spawn("slurmctld", ["slurmctld", "-D", "-i", "-f", str(cluster.conf)])
        if not wait_port(f"{PREFIX}1", PORT):
            raise RuntimeError(f"slurmctld did not start: see {state}/slurmctld.log")
        for name in nodes:
            (state / "spool" / name).mkdir()
            cluster._spawn(f"slurmd-{name}", [
                "unshare", "--uts", "sh", "-c", 'hostname "$0" && exec slurmd -D -N "$0" -f "$1"',
                name, str(cluster.conf)])
        cluster.wait_idle()
    except BaseException:
        cluster.stop()
        raise
    return cluster


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["up"])
    parser.add_argument("--nodes", type=int, default=2)
    args = parser.parse_args()
    missing = problems()
    if missing:
        print("cannot start the cluster: " + "; ".join(missing), file=sys.stderr)
        return 2
    cluster = start(args.nodes)
    print(cluster.conf)
    print("Slurm running; Ctrl-C stops it", file=sys.stderr)
    loopback_cluster.serve(lambda: cluster.processes["slurmctld"].poll() is None, cluster.stop)
    return 0


if __name__ == "__main__":
    sys.exit(main())
