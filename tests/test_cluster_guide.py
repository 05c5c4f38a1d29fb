"""The README's "Set up a real cluster, step by step", followed as written on two loopback sshd
hosts, ending in a passed 2-host all-reduce round and a passed 2-host efficientnet round through
the wrapper.

tests/loopback_cluster.py stands in for the two fresh Debian hosts (sshd on 127.0.0.2 and .3,
the ssh user in the docker group). The guide's blocks run in order in one bash script: the
`# controller` blocks in the checkout with a fresh home folder, the `# each host, as root` blocks
once per host on this machine (which is both hosts). The only changes to the text are the ones
a reader makes (the four variables, the copied public key's path) and what loopback hosts
need (listed in ``SUBSTITUTIONS`` and ``HOST_LINES``; each must match the README, so an edit
of the guide that breaks this test cannot slip by).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from test_cluster import check_two_host_round


BEGIN, END = "<!-- guide:begin -->", "<!-- guide:end -->"


def guide_blocks(readme: str) -> list[tuple[str, str]]:
    """``[(where, code)]`` of the guide's shell blocks, ``where`` "controller" or "host"."""
    section = readme.split(BEGIN, 1)[1].split(END, 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, re.DOTALL)
    where = []
    for block in blocks:
        assert block.startswith(("# controller", "# each host, as root")), block[:60]
        where.append(("host" if block.startswith("# each host") else "controller", block))
    return where


def substitute(text: str, old: str, new: str) -> str:
    assert old in text, f"the guide no longer has {old!r}"
    return text.replace(old, new)


def test_the_cluster_guide_as_written(cluster, project, tmp_path, venv_env):
    import loopback_cluster

    blocks = guide_blocks((project / "README.md").read_text())
    addresses = " ".join(cluster.hosts.values())
    # The controller's home: short, as ssh's ControlPath socket under ~/.ansible/cp must be.
    home = Path(tempfile.mkdtemp(prefix="guide-", dir="/tmp"))
    results = tmp_path / "results"
    substitutions = [
        # What a reader edits.
        ('NODES="10.1.0.11 10.1.0.12"', f'NODES="{addresses}"'),
        ("PORT=22 ", f"PORT={loopback_cluster.PORT} "),
        ("FLAGPERF_USER=bench ", f"FLAGPERF_USER={loopback_cluster.USER} "),
        ("INV=inventories/mine ", f"INV={tmp_path / 'inventory'} "),
        # The public key copied to the host by hand: here the host is this machine.
        ("PUBKEY=/root/flagperf_ed25519.pub", "PUBKEY=$HOME/.ssh/flagperf_ed25519.pub"),
        # Each loopback host has its own host key file, not /etc/ssh's.
        ("/etc/ssh/ssh_host_ed25519_key.pub", '"$HOST_KEY"'),
        # CI installs the packages (.ci/run); apt-get is left out.
        ("apt-get install -y", ": apt-get install -y"),
        # Loopback sshd have no sftp subsystem; this machine's cores are shared by both hosts.
        ("        ansible_python_interpreter: /usr/bin/python3\n",
         "        ansible_python_interpreter: /usr/bin/python3\n"
         "        ansible_ssh_transfer_method: piped\n"),
        ("flagperf_ssh_strict_host_keys: true\n",
         "flagperf_ssh_strict_host_keys: true\n"
         f"flagperf_results_dir: {results}\n"
         "flagperf_env: {GLOO_SOCKET_IFNAME: lo, OMP_NUM_THREADS: 1}\n"
         "flagperf_pip_ca_bundle: /etc/ssl/certs/ca-certificates.crt\n"
         "flagperf_master_port: 29612\n"),
    ]
    script = ["set -euo pipefail", 'sudo() { "$@"; }    # the test runs as root']
    text = "\n".join(f"#@{where}\n{code}" for where, code in blocks)
    for old, new in substitutions:
        text = substitute(text, old, new)
    names = list(cluster.hosts)
    for index, chunk in enumerate(text.split("#@")[1:], start=1):
        where, code = chunk.split("\n", 1)
        script.append(f'echo "::step {index} {where} start $SECONDS"')
        if where == "host":
            for name in names:
                key = cluster.state / f"{name}_host_ed25519.pub"
                script.append(f'( HOST_KEY={key}\n{code}\n)')
        else:
            script.append(code)
    script.append('echo "::step end $SECONDS"')
    (tmp_path / "guide.sh").write_text("\n".join(script) + "\n")

    env = {**venv_env, "HOME": str(home)}
    env.pop("SSH_AUTH_SOCK", None)
    try:
        done = subprocess.run(["bash", str(tmp_path / "guide.sh")], cwd=project, env=env,
                              capture_output=True, text=True, timeout=3000)
        known = home / ".ssh/flagperf_known_hosts"
        pinned = known.read_text().splitlines() if known.is_file() else []
    finally:
        shutil.rmtree(home, ignore_errors=True)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]

    marks = re.findall(r"^::step (\S+)(?: (\S+) start)? (\d+)$", done.stdout, re.MULTILINE)
    times = [int(seconds) for _, _, seconds in marks]
    print("\nguide steps (s):", ", ".join(
        f"{step} {where}: {later - now}"
        for (step, where, _), now, later in zip(marks, times, times[1:])))
    # The pinned file holds exactly the hosts' own keys, one line each.
    assert len(pinned) == len(names)
    for name in names:
        key = (cluster.state / f"{name}_host_ed25519.pub").read_text().split()[1]
        assert any(line.split()[2] == key for line in pinned)
    check_two_host_round(results)
    # The hosts' link: an all-reduce over both (world size 2, so busbw = algbw x 2(2-1)/2),
    # set against the datasheet's entry across nodes (which the cpu vendor does not state).
    (run_dir,) = [p for p in results.iterdir() if p.name.startswith("run")]
    ring = json.loads((run_dir / "interconnect-all_reduce-pytorch-base-cpux2x1/round1/round.json")
                      .read_text())
    assert ring["status"] == "passed", ring["reason"]
    assert ring["finished"]["world_size"] == 2 and set(ring["ranks"]) == {"0", "1"}
    assert ring["finished"]["busbw"] > 0
    for row in ring["finished"]["sweep"]:
        assert row["busbw"] == pytest.approx(row["algbw"])
    assert ring["datasheet"]["busbw"]["entry"] == "network_bandwidth"
