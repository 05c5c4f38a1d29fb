"""Pinned host keys stay pinned (roles/ssh_trust through playbooks/preflight.yml), on real sshd
hosts on loopback (tests/loopback_cluster.py): a key that differs from the pinned one stops the
run before any connection, naming the host and both fingerprints; only an unknown host is
added, once; with flagperf_ssh_strict_host_keys an unknown host is refused."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest


# Addresses and port of our own: other test runs on this machine use the default ones.
PREFIX = "127.0.5."
PORT = 2235
TRUST_TASK = "Trust the key of a host the controller does not know yet"


@pytest.fixture(scope="module")
def keys_cluster(loopback_machine, tmp_path_factory):
    """Two loopback sshd hosts (node1, node2) on 127.0.5.2-3 port 2235."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("FLAGPERF_LOOPBACK_PREFIX", PREFIX)
        patch.setenv("FLAGPERF_LOOPBACK_PORT", str(PORT))
        import loopback_cluster

        # The module reads the environment once, on first import (maybe by another test module).
        patch.setattr(loopback_cluster, "PREFIX", PREFIX)
        patch.setattr(loopback_cluster, "PORT", PORT)
        running = loopback_cluster.start_for_test(tmp_path_factory.mktemp("keys_cluster"),
                                                  count=2)
        try:
            yield running
        finally:
            running.stop()


def known_name(cluster, host: str) -> str:
    return f"[{cluster.hosts[host]}]:{PORT}"


def host_key(cluster, host: str) -> str:
    """The host's public key as 'type base64'."""
    return " ".join((cluster.state / f"{host}_host_ed25519.pub").read_text().split()[:2])


def fingerprint(key_line: str) -> str:
    """'SHA256:...' of a public key or known_hosts line, as ``ssh-keygen -lf`` prints it."""
    done = subprocess.run(["ssh-keygen", "-l", "-f", "-"], input=key_line + "\n",
                          capture_output=True, text=True, check=True)
    return done.stdout.split()[1]


def logins(cluster) -> dict[str, int]:
    """Authenticated ssh sessions each host's sshd has accepted so far."""
    return {host: (cluster.state / f"{host}_sshd.log").read_text().count("Accepted publickey")
            for host in cluster.hosts}


def preflight(cluster, project, venv_env, tmp_path: Path, known_hosts: Path,
              **settings) -> subprocess.CompletedProcess:
    """playbooks/preflight.yml on the cluster, trusting ``known_hosts`` alone (for Ansible's ssh
    too), with a fresh ssh control folder: no connection opened earlier is reused."""
    extra = {"flagperf_known_hosts_file": str(known_hosts),
             "ansible_ssh_common_args": f"-o UserKnownHostsFile={known_hosts}",
             "flagperf_results_dir": str(tmp_path / "results"), **settings}
    (tmp_path / "cp").mkdir(exist_ok=True)
    return subprocess.run(
        ["ansible-playbook", "playbooks/preflight.yml", "-i", str(cluster.inventory),
         "-e", json.dumps(extra)],
        cwd=project, capture_output=True, text=True, timeout=600,
        env={**venv_env, "ANSIBLE_SSH_CONTROL_PATH_DIR": str(tmp_path / "cp"),
             "ANSIBLE_NOCOLOR": "1"})


def task_results(output: str, task: str) -> dict[str, str]:
    """host -> status ('ok', 'changed', 'skipping', 'fatal', ...) of one task in the default
    callback's output."""
    found = {}
    for block in re.split(r"\n(?=TASK \[|PLAY )", output):
        if block.startswith("TASK [") and f" : {task}]" in block.splitlines()[0]:
            for status, host in re.findall(r"^(\w+): \[(\w+)", block, re.MULTILINE):
                found[host] = status
    return found


def test_a_key_that_differs_from_the_pinned_one_stops_the_run(keys_cluster, project, venv_env,
                                                                tmp_path):
    cluster = keys_cluster
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "other")],
                   check=True)
    other = " ".join((tmp_path / "other.pub").read_text().split()[:2])
    known_hosts = tmp_path / "known_hosts"
    pinned = (f"{known_name(cluster, 'node1')} {other}\n"
              f"{known_name(cluster, 'node2')} {host_key(cluster, 'node2')}\n")
    known_hosts.write_text(pinned)
    before = logins(cluster)

    done = preflight(cluster, project, venv_env, tmp_path, known_hosts)

    output = done.stdout + done.stderr
    assert done.returncode != 0, output[-4000:]
    assert "node1: HOST KEY MISMATCH for " + known_name(cluster, "node1") in output, output[-4000:]
    assert f"pins {fingerprint(other)} (ED25519)" in output
    assert f"presents {fingerprint(host_key(cluster, 'node1'))} (ED25519)" in output
    assert "node2: HOST KEY MISMATCH" not in output
    assert known_hosts.read_text() == pinned
    # Stopped before Ansible's first ssh exchange with any host.
    assert logins(cluster) == before


def test_an_unknown_host_is_added_once(keys_cluster, project, venv_env, tmp_path):
    cluster = keys_cluster
    known_hosts = tmp_path / "known_hosts"
    # node2 pinned, hashed (ssh-keygen -F finds it all the same); node1 unknown.
    known_hosts.write_text(f"{known_name(cluster, 'node2')} {host_key(cluster, 'node2')}\n")
    subprocess.run(["ssh-keygen", "-H", "-f", str(known_hosts)], capture_output=True, check=True)
    hashed = known_hosts.read_text()
    assert cluster.hosts["node2"] not in hashed

    first = preflight(cluster, project, venv_env, tmp_path, known_hosts)
    assert first.returncode == 0, (first.stdout + first.stderr)[-4000:]
    assert task_results(first.stdout, TRUST_TASK) == {"node1": "changed", "node2": "skipping"}
    second = preflight(cluster, project, venv_env, tmp_path, known_hosts)
    assert second.returncode == 0, (second.stdout + second.stderr)[-4000:]
    assert task_results(second.stdout, TRUST_TASK) == {"node1": "skipping", "node2": "skipping"}

    lines = known_hosts.read_text().splitlines()
    assert lines[0] == hashed.strip()
    node1 = [line for line in lines[1:] if line.split()[1:3] == host_key(cluster, "node1").split()]
    assert len(lines) == 2 and len(node1) == 1, lines


def test_strict_setting_refuses_an_unknown_host(keys_cluster, project, venv_env, tmp_path):
    cluster = keys_cluster
    known_hosts = tmp_path / "known_hosts"
    pinned = f"{known_name(cluster, 'node2')} {host_key(cluster, 'node2')}\n"
    known_hosts.write_text(pinned)
    before = logins(cluster)

    done = preflight(cluster, project, venv_env, tmp_path, known_hosts,
                     flagperf_ssh_strict_host_keys=True)

    output = done.stdout + done.stderr
    assert done.returncode != 0, output[-4000:]
    assert f"node1: no key pinned for {known_name(cluster, 'node1')}" in output, output[-4000:]
    assert f"ssh-keyscan -t ed25519 -p {PORT} {cluster.hosts['node1']} >> {known_hosts}" in output
    assert fingerprint(host_key(cluster, "node1")) in output
    assert "node2: no key pinned" not in output
    assert known_hosts.read_text() == pinned
    assert logins(cluster) == before
