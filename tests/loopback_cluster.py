"""A real test cluster on one machine: sshd hosts on loopback addresses, a Docker engine, a
locally made base image, a non-root ssh user. Needs root (to start sshd and add the user).

    python tests/loopback_cluster.py up STATE_DIR [--hosts N]   # prints the inventory path

Hosts ``node1..N`` listen on ``127.0.0.2..N+1`` port 2222 (``FLAGPERF_LOOPBACK_PREFIX`` and
``FLAGPERF_LOOPBACK_PORT`` move them) with their own host keys; Ansible
reaches them over real SSH with a generated key as user ``flagperf-ci`` (in group ``docker``, no
sudo). The base image ``flagperf-base:bookworm`` is debootstrapped once and cached under
``/var/cache/flagperf`` (no registry is reachable).
"""

from __future__ import annotations

import argparse
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

USER = "flagperf-ci"
# Two clusters on one machine (parallel work trees) need their own addresses and port.
PREFIX = os.environ.get("FLAGPERF_LOOPBACK_PREFIX", "127.0.0.")
PORT = int(os.environ.get("FLAGPERF_LOOPBACK_PORT", "2222"))
BASE_IMAGE = "flagperf-base:bookworm"
CACHE = Path("/var/cache/flagperf")
SHARED = Path("/var/tmp/flagperf-ci")


def run(*argv: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(argv, check=True, capture_output=True, text=True, **kwargs)


def problems() -> list[str]:
    """What this machine lacks for the cluster (empty when it can run)."""
    found = []
    if os.geteuid() != 0:
        found.append("not root")
    if not Path("/usr/sbin/sshd").exists():
        found.append("no /usr/sbin/sshd (openssh-server)")
    if shutil.which("docker") is None or subprocess.run(
            ["docker", "info"], capture_output=True).returncode != 0:
        found.append("no running Docker engine")
    return found


def ensure_user() -> pwd.struct_passwd:
    try:
        pwd.getpwnam(USER)
    except KeyError:
        run("useradd", "--create-home", "--shell", "/bin/bash", "--groups", "docker", USER)
    # '*': no password login, but not a locked account (sshd without PAM refuses locked ones).
    run("usermod", "--password", "*", USER)
    return pwd.getpwnam(USER)


def ensure_base_image() -> None:
    """``flagperf-base:bookworm`` (flagperf_ansible.run.base_image: Debian bookworm minbase with
    python3, venv, pip and CA certificates), its debootstrap kept under ``/var/cache/flagperf``."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from flagperf_ansible.run import base_image

    base_image.make(BASE_IMAGE, "bookworm", rootfs=CACHE / "rootfs-bookworm")


def wait_port(address: str, port: int, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            sock.settimeout(0.5)
            if sock.connect_ex((address, port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"sshd on {address}:{port} did not start")


@dataclass
class Cluster:
    state: Path
    hosts: dict[str, str]                 # name -> address
    inventory: Path
    processes: list[subprocess.Popen] = field(default_factory=list)
    argv: dict[str, list[str]] = field(default_factory=dict)   # host -> its sshd command

    def kill_host(self, name: str) -> None:
        """The host goes away: its sshd and every session under it (ssh connections, the
        processes they started) are killed, as if the machine had died."""
        import psutil

        index = list(self.hosts).index(name)
        listener = psutil.Process(self.processes[index].pid)
        doomed = [listener, *listener.children(recursive=True)]
        for process in doomed:
            try:
                process.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(doomed, timeout=5)

    def restart_host(self, name: str) -> None:
        """Start a host's sshd again (after ``kill_host``)."""
        index = list(self.hosts).index(name)
        self.processes[index] = subprocess.Popen(
            self.argv[name], stdout=subprocess.DEVNULL,
            stderr=open(self.state / f"{name}_sshd.log", "a"))
        wait_port(self.hosts[name], PORT)

    def sessions(self) -> list:
        """The per-connection sshd processes (children of the listeners), as psutil processes."""
        import psutil

        found = []
        for process in self.processes:
            try:
                found += psutil.Process(process.pid).children(recursive=True)
            except psutil.NoSuchProcess:
                pass
        return found

    def stop(self) -> None:
        """Stop the listeners and their sessions: a connection kept open by ssh's
        ControlPersist outlives its listener otherwise."""
        import psutil

        sessions = self.sessions()
        for process in self.processes:
            process.terminate()
        for process in self.processes:
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
        for session in sessions:
            try:
                session.terminate()
            except psutil.NoSuchProcess:
                pass
        _, alive = psutil.wait_procs(sessions, timeout=5)
        for session in alive:
            session.kill()


def start_for_test(state: Path, count: int = 2, settings: dict | None = None,
                   sshd_options: list[str] | None = None) -> Cluster:
    """``start`` for a test fixture: the test is skipped where the cluster cannot run, and
    fails under CI (``$CI``), which must provide it."""
    from unavailable import unavailable

    missing = problems()
    if missing:
        unavailable("no test cluster here: " + "; ".join(missing))
    return start(state, count, settings, sshd_options)


def start(state: Path, count: int = 2, settings: dict | None = None,
          sshd_options: list[str] | None = None) -> Cluster:
    """Start ``count`` sshd hosts and write an inventory for them under ``state``;
    ``sshd_options`` are more ``-o`` options of every sshd (``SetEnv=SLURM_CONF=...``)."""
    state.mkdir(parents=True, exist_ok=True)
    user = ensure_user()
    ensure_base_image()

    client_key = state / "client_ed25519"
    if not client_key.exists():
        run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "flagperf-ci-controller",
            "-f", str(client_key))
    ssh_dir = Path(user.pw_dir) / ".ssh"
    ssh_dir.mkdir(mode=0o700, exist_ok=True)
    authorized = ssh_dir / "authorized_keys"
    public = (state / "client_ed25519.pub").read_text()
    if public not in (authorized.read_text() if authorized.exists() else ""):
        with open(authorized, "a") as handle:
            handle.write(public)
    for path in (ssh_dir, authorized):
        os.chown(path, user.pw_uid, user.pw_gid)
    authorized.chmod(0o600)
    Path("/run/sshd").mkdir(exist_ok=True)

    hosts = {f"node{i + 1}": f"{PREFIX}{i + 2}" for i in range(count)}
    processes = []
    argvs = {}
    for name, address in hosts.items():
        host_key = state / f"{name}_host_ed25519"
        if not host_key.exists():
            run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(host_key))
        argvs[name] = ["/usr/sbin/sshd", "-D", "-e", "-f", "/dev/null",
                       "-o", f"ListenAddress={address}:{PORT}", "-o", f"HostKey={host_key}",
                       "-o", "PidFile=none", "-o", "PasswordAuthentication=no",
                       "-o", "KbdInteractiveAuthentication=no", "-o", "UsePAM=no",
                       "-o", "PermitRootLogin=no", "-o", f"AllowUsers={USER}",
                       "-o", "AuthorizedKeysFile=.ssh/authorized_keys", "-o", "MaxStartups=100"]
        for option in sshd_options or ():
            argvs[name] += ["-o", option]
        processes.append(subprocess.Popen(argvs[name], stdout=subprocess.DEVNULL,
                                          stderr=open(state / f"{name}_sshd.log", "a")))
    cluster = Cluster(state=state, hosts=hosts, inventory=state / "inventory",
                      processes=processes, argv=argvs)
    try:
        for address in hosts.values():
            wait_port(address, PORT)
    except RuntimeError:
        cluster.stop()
        raise

    data = SHARED / "data" / "digits"
    if not ((data / "val" / ".complete").exists() and (data / "BiT-R14x1-random.npz").exists()):
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
        from flagperf_ansible.datasets.imagenet import generate as prepare_digits

        prepare_digits(data)
    run("chmod", "-R", "a+rX", str(SHARED))

    home = Path(user.pw_dir)
    known_hosts = state / "known_hosts"
    known_hosts.touch()
    inventory = cluster.inventory
    (inventory / "group_vars").mkdir(parents=True, exist_ok=True)
    (inventory / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": {"flagperf_hosts": {
        "hosts": {name: {"ansible_host": address, "ansible_port": PORT}
                  for name, address in hosts.items()},
        "vars": {
            "ansible_user": USER,
            "ansible_ssh_private_key_file": str(client_key),
            "ansible_ssh_common_args": f"-o UserKnownHostsFile={known_hosts}",
            "ansible_python_interpreter": "/usr/bin/python3",
            # These sshd have no sftp subsystem (and scp rides on sftp): file transfers go
            # straight over the ssh session instead of failing twice first.
            "ansible_ssh_transfer_method": "piped",
        }}}}}, sort_keys=False))
    group_vars = {
        "flagperf_vendor": "cpu",
        "flagperf_container_runtime": "docker",
        "flagperf_root": f"{home}/flagperf",
        "flagperf_workdir": f"{home}/work",
        "flagperf_python": "/usr/bin/python3",
        "flagperf_known_hosts_file": str(known_hosts),
        "flagperf_ssh_public_key": public.strip(),
        # The image's pip fetches torch itself (vendors/cpu/docker_image/pytorch/Dockerfile).
        "flagperf_image_wheels": [],
        "flagperf_pip_ca_bundle": "/etc/ssl/certs/ca-certificates.crt",
        # All hosts share this machine's cores: one compute thread per host process.
        "flagperf_env": {"GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": 1},
        "flagperf_master_port": 29611,
        "flagperf_cases": [{"model": "resnet50", "framework": "pytorch", "hardware": "cpu",
                            "nnodes": 2, "nproc_per_node": 1, "repeat": 1,
                            "data_dir": str(data), "timeout": 1200}],
        **(settings or {}),
    }
    (inventory / "group_vars" / "all.yml").write_text(yaml.safe_dump(group_vars, sort_keys=False))
    return cluster


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["up"])
    parser.add_argument("state", type=Path)
    parser.add_argument("--hosts", type=int, default=2)
    args = parser.parse_args()
    missing = problems()
    if missing:
        print("cannot start the cluster: " + "; ".join(missing), file=sys.stderr)
        return 2
    cluster = start(args.state.resolve(), args.hosts)
    print(cluster.inventory)
    print("sshd running; Ctrl-C stops them", file=sys.stderr)
    serve(lambda: all(p.poll() is None for p in cluster.processes), cluster.stop)
    return 0


def serve(alive, stop) -> None:
    """Wait while ``alive()`` holds, until Ctrl-C or SIGTERM, then ``stop()`` (a test
    cluster's command line)."""
    # SIGTERM stops it as Ctrl-C does; SIGINT set too, as it comes in ignored when the command
    # was started with & from a script.
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.default_int_handler)
    try:
        while alive():
            time.sleep(1)
    except KeyboardInterrupt:
        pass
    finally:
        stop()


if __name__ == "__main__":
    sys.exit(main())
