"""Rounds through Slurm on a real cluster on this machine (tests/slurm_cluster.py: munged,
slurmctld and two slurmd, ``slurm1`` and ``slurm2``, started once per session and stopped by
their pids), submitted from a loopback sshd host (the login node; its sessions name the cluster
with ``SLURM_CONF``) as the non-root ssh user, whose home holds flagperf_root and
flagperf_workdir, shared with the nodes as a site's file system is:

* a two-node interconnect all-reduce base round and a two-node resnet50 round (its cpu profile
  cut to 10 updates: these rounds prove the distribution, not learning), runtime none, in one
  run (the nodes' Python: an environment with the cpu vendor's PyTorch that the ssh user
  can run, ``node_python``);
* a two-node resnet50 round in the cpu vendor's image (runtime docker: ``docker run --init``
  with the job's label);
* SIGINT to the wrapper mid-round (runtime docker): the job cancelled, nothing left on either
  node (``ps``, ``docker ps``);
* a node's slurmd killed mid-round: the round failed, naming that node;
* a round whose job waits in the queue behind another job: shown as waiting, its queue time
  recorded and not counted in the round.

Each run leaves ``squeue`` without a job of ours. Every round's results have the layout of an
ssh round: ``<case_id>/round<k>/<node>_noderank<i>/`` with the same files.
"""

from __future__ import annotations

import json
import os
import pwd
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml

import loopback_cluster
import slurm_cluster


ROOT = Path(__file__).resolve().parents[1]
#: The files of an ssh round's node folder, runtime none (tests/test_cluster.py's round adds
#: container.log with runtime docker).
NODE_FILES = {"config.yaml", "launch.json", "launcher.log", "monitor.json", "sys_info.json",
              "sys_monitor.csv", "cpu_cores.csv", "sys_monitor.log"}
NODES = ("slurm1_noderank0", "slurm2_noderank1")
#: resnet50's cpu profile cut to 10 updates of one epoch, with a target any evaluated model meets:
#: these rounds prove the distribution through Slurm, not learning (tests/test_local_run.py
#: trains the profile to its target).
RESNET50_PROFILE = "benchmarks/resnet50/pytorch/config/cpu.yaml"
SHORT_RESNET50 = {"epochs": 1, "max_steps": 10, "target_acc1": 1.0}
SLEEP = {"model": "sleep", "framework": "pytorch", "hardware": "cpu", "nnodes": 2,
         "nproc_per_node": 1, "repeat": 1, "timeout": 120}


@pytest.fixture(scope="session")
def slurm(slurm_machine):
    """The Slurm cluster, once per session."""
    cluster = slurm_cluster.start_for_test()
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def node_python() -> str:
    """A Python with the cpu vendor's PyTorch that the ssh user can run: this test's own where
    it can (its folder readable by all, as a checkout's .venv usually is), else the framework
    environment of vendors/cpu/docker_image/pytorch, made once per machine by /usr/bin/python3
    (flagperf_host.framework_env) under /var/tmp/flagperf-ci/envs."""
    from flagperf_ansible.run.launch import framework_env_name

    probe = subprocess.run(["runuser", "-u", loopback_cluster.USER, "--", sys.executable, "-c",
                            "import torch, psutil"], capture_output=True, cwd="/")
    if probe.returncode == 0:
        return sys.executable
    path = loopback_cluster.SHARED / "envs" / framework_env_name(ROOT, "cpu", "pytorch", [])
    made = subprocess.run(
        ["/usr/bin/python3", "-m", "flagperf_host.framework_env", "--path", str(path),
         "--requirements", str(ROOT / "vendors/cpu/docker_image/pytorch/requirements.txt")],
        capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert made.returncode == 0, made.stderr[-3000:]
    subprocess.run(["chmod", "-R", "a+rX", str(loopback_cluster.SHARED)], check=True)
    return json.loads(made.stdout)["python"]


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """The checkout's runnable parts, with resnet50's short profile and a diagnostic case that
    hangs on two nodes until stopped, under torchrun (a real launcher: its agent and workers
    are what Slurm's signals and a node's end reach)."""
    from checkout_copy import copy_checkout, shorten_profiles

    project = copy_checkout(tmp_path_factory.mktemp("slurm-project") / "project")
    shorten_profiles(project, {RESNET50_PROFILE: SHORT_RESNET50})
    case_yml = project / "benchmarks/sleep/pytorch/case.yml"
    case_yml.write_text(case_yml.read_text().replace("launcher: python", "launcher: torchrun"))
    folder = project / "vendors/cpu/sleep-pytorch/config"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "cpux2x1.yaml").write_text(yaml.safe_dump({"hang": True}))
    return project


class Login:
    """The submit host (one loopback sshd host) and runs of site.yml or the wrapper through it."""

    def __init__(self, host, tmp_path: Path, project: Path):
        self.host = host
        self.folder = tmp_path
        self.project = project
        self.env = {**os.environ, "ANSIBLE_CONFIG": str(project / "ansible.cfg"),
                    "FLAGPERF_PROJECT_DIR": str(project),
                    "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
        home = Path(pwd.getpwnam(loopback_cluster.USER).pw_dir) / f"slurm-{slurm_cluster.PORT}"
        self.workdir = home / "work"
        self.settings = {"flagperf_root": str(home / "flagperf"), "flagperf_workdir": str(self.workdir)}

    def inventory(self, name: str, settings: dict) -> Path:
        """A copy of the host's inventory with ``settings`` in its group_vars, its results in
        ``<name>/results``."""
        import shutil

        target = self.folder / name / "inventory"
        shutil.copytree(self.host.inventory, target)
        group_vars = target / "group_vars" / "all.yml"
        merged = {**yaml.safe_load(group_vars.read_text()), **self.settings,
                  "flagperf_results_dir": str(self.folder / name / "results"), **settings}
        group_vars.write_text(yaml.safe_dump(merged, sort_keys=False))
        return target

    def wrapper(self, inventory: Path, *extra: str, background: bool = False):
        argv = [sys.executable, "-m", "flagperf_ansible", "run", "-i", str(inventory), *extra]
        if background:
            return subprocess.Popen(argv, cwd=self.project, env=self.env, text=True,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        return subprocess.run(argv, cwd=self.project, env=self.env, capture_output=True, text=True,
                              timeout=1800)

    def run_dir(self, name: str) -> Path:
        """The one run of test ``name``."""
        (found,) = [p for p in (self.folder / name / "results").iterdir() if p.name.startswith("run")]
        return found


@pytest.fixture(scope="module")
def login(slurm, project, tmp_path_factory):
    """The login node: one sshd host whose sessions name the cluster (sshd's SetEnv), with
    settings for rounds through Slurm (partition bench, a master port of its own)."""
    host = loopback_cluster.start_for_test(
        tmp_path_factory.mktemp("login"), 1,
        settings={"flagperf_backend": "slurm", "flagperf_slurm_partition": slurm_cluster.PARTITION,
                  "flagperf_master_port": 29620, "flagperf_wait_slice": 2},
        sshd_options=[f"SetEnv=SLURM_CONF={slurm.conf}"])
    yield Login(host, tmp_path_factory.mktemp("slurm-runs"), project)
    host.stop()


def ours(slurm) -> list[str]:
    """The ssh user's jobs that Slurm still holds."""
    return slurm.jobs(loopback_cluster.USER)


def left_on_nodes(run_id: str) -> tuple[list[str], list[str]]:
    """Containers (``docker ps``) and processes (``ps``) of the run on the nodes (this machine)."""
    names = subprocess.run(["docker", "ps", "-a", "--filter", f"name=flagperf-{run_id}", "--format",
                            "{{.Names}}"], capture_output=True, text=True, check=True).stdout.split()
    listed = subprocess.run(["ps", "-eo", "pid,user:20,args"], capture_output=True, text=True,
                            check=True).stdout.splitlines()
    processes = [line for line in listed if run_id in line and "ps -eo" not in line]
    return names, processes


def cases(run_id: str) -> list[int]:
    """The diagnostic case's processes of the run: its script as the interpreter's first
    argument (``-u`` aside, as torchrun starts its workers), not the launcher and supervisors,
    whose command lines name it too."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        argv = [a for a in (process.info["cmdline"] or [""])[1:] if a != "-u"]
        if argv and argv[0].endswith("run_sleep.py") and any(run_id in a for a in argv):
            found.append(process.pid)
    return found


def nothing_left(slurm, run_id: str, seconds: float = 60) -> None:
    """No job of ours in squeue, no container or process of the run on either node."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and (ours(slurm) or any(left_on_nodes(run_id))):
        time.sleep(0.5)
    assert ours(slurm) == []
    assert left_on_nodes(run_id) == ([], [])


def check_layout(round_dir: Path, extra: set[str] = frozenset()) -> dict:
    """An ssh round's layout: one folder per node with its files; round.json names the job."""
    document = json.loads((round_dir / "round.json").read_text())
    assert sorted(p.name for p in round_dir.iterdir() if p.is_dir()) == list(NODES)
    for rank, node in enumerate(NODES):
        files = {p.name for p in (round_dir / node).iterdir()}
        assert NODE_FILES | extra | {f"rank{rank}.out.log"} <= files, (node, files)
        assert not {".flagperf_slurm", "job.json", "job_result.json"} & files
        assert len((round_dir / node / "sys_monitor.csv").read_text().splitlines()) > 2
        info = json.loads((round_dir / node / "sys_info.json").read_text())
        assert info["hostname"] == node.split("_")[0]       # the node described itself
    job = document["slurm"]
    assert job["nodes"] == ["slurm1", "slurm2"] and job["partition"] == slurm_cluster.PARTITION
    assert job["job_id"].isdigit() and job["queued_s"] >= 0
    assert (round_dir / f"slurm-{job['job_id']}.out").is_file()
    assert [n["dir"] for n in document["nodes"]] == list(NODES)
    return document


def test_a_base_round_and_resnet50_through_slurm_runtime_none(slurm, login, node_python):
    """Two cases in one run through the wrapper: the hosts' link (all-reduce across both nodes)
    and resnet50's short profile trained across both (gloo, half the batch per node), each passing with an ssh
    round's layout, the job's id, nodes and partition in round.json and summary.json."""
    data = loopback_cluster.SHARED / "data" / "digits"
    inventory = login.inventory("none", {
        "flagperf_container_runtime": "none", "flagperf_python": node_python,
        "flagperf_env": {"GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": 1},
        "flagperf_cases": [
            {"model": "interconnect-all_reduce", "framework": "pytorch", "suite": "base",
             "hardware": "cpu", "nnodes": 2, "nproc_per_node": 1, "repeat": 1, "timeout": 600},
            {"model": "resnet50", "framework": "pytorch", "hardware": "cpu", "nnodes": 2,
             "nproc_per_node": 1, "repeat": 1, "data_dir": str(data), "timeout": 1200}]})
    begun = time.monotonic()
    done = login.wrapper(inventory)
    print(f"\nruntime none, two rounds through the wrapper: {time.monotonic() - begun:.1f} s")
    assert done.returncode == 0, done.stdout[-5000:]
    run_dir = login.run_dir("none")
    ring = check_layout(run_dir / "interconnect-all_reduce-pytorch-base-cpux2x1/round1")
    assert ring["status"] == "passed", ring["reason"]
    assert ring["finished"]["world_size"] == 2 and ring["finished"]["busbw"] > 0
    trained = check_layout(run_dir / "resnet50-pytorch-cpux2x1/round1")
    assert trained["status"] == "passed", trained["reason"]
    assert trained["finished"]["converged"] is True and trained["finished"]["world_size"] == 2
    assert set(trained["ranks"]) == {"0", "1"}
    # The round's time is the job's, from its start.
    assert trained["started_ms"] == trained["slurm"]["started_ms"]
    summary = json.loads((run_dir / "summary.json").read_text())
    rounds = {c["case_id"]: c["rounds"][0] for c in summary["cases"]}
    assert rounds["resnet50-pytorch-cpux2x1"]["slurm"]["job_id"] == trained["slurm"]["job_id"]
    assert rounds["resnet50-pytorch-cpux2x1"]["slurm"]["nodes"] == ["slurm1", "slurm2"]
    nothing_left(slurm, run_dir.name)


def test_resnet50_through_slurm_in_the_cpu_vendors_container(slurm, login):
    """resnet50 across both nodes, each in the cpu vendor's image: ``docker run --init`` with the
    job's label in each node's step (the image built on the login node's engine, which the
    nodes share here), the container's own output kept in container.log, no container left."""
    data = loopback_cluster.SHARED / "data" / "digits"
    inventory = login.inventory("docker", {
        "flagperf_container_runtime": "docker",
        "flagperf_env": {"GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": 1},
        "flagperf_cases": [{"model": "resnet50", "framework": "pytorch", "hardware": "cpu",
                            "nnodes": 2, "nproc_per_node": 1, "repeat": 1, "data_dir": str(data),
                            "timeout": 1200}]})
    begun = time.monotonic()
    done = login.wrapper(inventory)
    print(f"\nruntime docker, one round through the wrapper: {time.monotonic() - begun:.1f} s")
    assert done.returncode == 0, done.stdout[-5000:]
    run_dir = login.run_dir("docker")
    trained = check_layout(run_dir / "resnet50-pytorch-cpux2x1/round1", extra={"container.log"})
    assert trained["status"] == "passed", trained["reason"]
    assert trained["finished"]["converged"] is True and trained["finished"]["world_size"] == 2
    labelled = subprocess.run(["docker", "ps", "-a", "--filter",
                               f"label=flagperf.slurm_job={trained['slurm']['job_id']}", "--format",
                               "{{.Names}}"], capture_output=True, text=True, check=True).stdout
    assert labelled == ""
    nothing_left(slurm, run_dir.name)


def test_sigint_to_the_wrapper_mid_round_cancels_the_job_and_leaves_nothing(slurm, login):
    """Ctrl-C to the wrapper while both nodes' containers run: the callback's clean-up cancels the
    job (every node's step stops its container and monitor and keeps their files), the round is
    interrupted, and neither node keeps a process or container of the run."""
    inventory = login.inventory("sigint", {"flagperf_container_runtime": "docker",
                                           "flagperf_cases": [SLEEP]})
    running = login.wrapper(inventory, background=True)
    try:
        deadline = time.monotonic() + 600
        while True:
            assert running.poll() is None and time.monotonic() < deadline, running.communicate()[0][-4000:]
            started = list((login.folder / "sigint" / "results").glob("run*/*/round1/round_start.json"))
            if started and len(left_on_nodes(started[0].parents[2].name)[0]) == 2:
                break
            time.sleep(0.5)
        run_id = started[0].parents[2].name
        time.sleep(2)                                   # the monitors take a few samples
        running.send_signal(signal.SIGINT)
        output = running.communicate(timeout=300)[0]
    finally:
        if running.poll() is None:
            running.kill()
    assert running.returncode == 130, output[-4000:]
    round_dir = login.run_dir("sigint") / "sleep-pytorch-cpux2x1/round1"
    document = json.loads((round_dir / "round.json").read_text())
    assert document["status"] == "interrupted", document["reason"]
    assert document["slurm"]["state"] == "CANCELLED", document["slurm"]
    for node in NODES:                                  # what the nodes wrote was kept
        assert {"container.log", "sys_monitor.csv", "monitor.json"} <= {
            p.name for p in (round_dir / node).iterdir()}
        assert json.loads((round_dir / node / "monitor.json").read_text())["status"] == "stopped"
    nothing_left(slurm, run_id)


def test_a_job_queued_then_a_nodes_slurmd_killed(slurm, login, node_python):
    """One round, two faults. Its job first waits in the queue (slurm2 drained): shown as waiting,
    its queue time recorded and not counted in the round. Then slurm2's slurmd is killed
    mid-round: the round fails naming slurm2 once Slurm holds the node down. slurmd back, the
    node's leftover steps end, and nothing of the run is left."""
    import threading

    inventory = login.inventory("faults", {
        "flagperf_container_runtime": "none", "flagperf_python": node_python,
        "flagperf_env": {"GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": 1},
        "flagperf_cases": [SLEEP]})
    # Its output line by line, as it is written (a pipe would hold it in ansible's buffer).
    env = {**login.env, "PYTHONUNBUFFERED": "1"}
    slurm.command("scontrol", "update", "nodename=slurm2", "state=drain", "reason=flagperf-test")
    running = subprocess.Popen(["ansible-playbook", "site.yml", "-i", str(inventory)], cwd=login.project,
                               env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(running.stdout), daemon=True).start()

    def until(done, what: str, seconds: float = 600) -> None:
        deadline = time.monotonic() + seconds
        while not done():
            assert running.poll() is None and time.monotonic() < deadline, \
                f"{what}: " + "".join(lines)[-3000:]
            time.sleep(0.5)

    try:
        until(lambda: any("waiting in the queue" in line for line in lines), "shown waiting")
        time.sleep(5)
        assert slurm.command("squeue", "-h", "-u", loopback_cluster.USER, "-o", "%T").split() == ["PENDING"]
        slurm.command("scontrol", "update", "nodename=slurm2", "state=resume")
        run_id = next((login.folder / "faults" / "results").glob("run*")).name
        until(lambda: len(cases(run_id)) == 2, "both nodes' cases running", 300)
        slurm.kill_slurmd("slurm2")
        running.wait(timeout=300)
    finally:
        if running.poll() is None:
            running.kill()
        slurm.command("scontrol", "update", "nodename=slurm2", "state=resume", check=False)
    output = "".join(lines)
    assert "waiting in the queue (" in output
    document = json.loads((login.run_dir("faults") / "sleep-pytorch-cpux2x1/round1/round.json").read_text())
    assert document["status"] == "failed"
    assert document["reason"] == "host lost during the round: slurm2", document["reason"]
    assert document["failed_hosts"] == ["slurm2"]
    job = document["slurm"]
    assert job["state"] == "NODE_FAIL" and job["queued_s"] >= 5, job
    # The round's time starts with the job, not with the wait in the queue.
    assert document["started_ms"] == job["started_ms"] >= job["submitted_ms"] + 5000
    slurm.start_slurmd("slurm2")
    slurm.wait_idle()
    nothing_left(slurm, run_id)
