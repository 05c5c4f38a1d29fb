"""Faults on the loopback cluster (two sshd hosts, a real Docker engine), with the diagnostic
case: a host unreachable at start and lost mid-run, a container failing on one host, the uid:gid
the containers run as learned once (also when a run skips prepare), a hang past the timeout, a
monitor that dies, SIGINT and SIGTERM to the wrapper and to ansible-playbook (in a round, before
the first, between rounds), --retries and --resume. After each: no container, case process or
monitor left on any host."""

import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml

import loopback_cluster
from checkout_copy import copy_checkout

# Signals and timeouts on a machine that is not training the local run meanwhile.
pytestmark = pytest.mark.usefixtures("local_run_finished")


ROOT = Path(__file__).resolve().parents[1]


class Scene:
    """A copy of the checkout with the diagnostic case's parameters set for a fault, and the
    commands that run it on the cluster."""

    def __init__(self, cluster, tmp_path: Path, params: dict, runtime: str = "none",
                 nnodes: int = 2, timeout: int = 120, extra_cases: list | None = None,
                 launcher: str = "python"):
        self.cluster = cluster
        self.project = tmp_path / "project"
        self.results = tmp_path / "results"
        copy_checkout(self.project)
        self.set_params(params, nnodes)
        if launcher != "python":
            # The diagnostic case under a real launcher (torchrun: its workers in sessions of
            # their own), so that stopping a node is tried on the launcher's process tree.
            case_yml = self.project / "benchmarks/sleep/pytorch/case.yml"
            case_yml.write_text(case_yml.read_text().replace("launcher: python",
                                                             f"launcher: {launcher}"))
        cases = [{"model": "sleep", "framework": "pytorch", "hardware": "cpu", "nnodes": nnodes,
                  "nproc_per_node": 1, "repeat": 1, "timeout": timeout}] + (extra_cases or [])
        self.extra = {"flagperf_cases": cases, "flagperf_container_runtime": runtime,
                      "flagperf_clear_caches": False, "flagperf_wait_slice": 3,
                      "flagperf_results_dir": str(self.results)}
        self.env = dict(os.environ, FLAGPERF_PROJECT_DIR=str(self.project),
                        ANSIBLE_CONFIG=str(self.project / "ansible.cfg"),
                        PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")

    def set_params(self, params: dict, nnodes: int = 2) -> None:
        folder = self.project / "vendors/cpu/sleep-pytorch/config"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"cpux{nnodes}x1.yaml").write_text(yaml.safe_dump(params))

    def playbook(self, *extra: str, background: bool = False):
        argv = ["ansible-playbook", "site.yml", "-i", str(self.cluster.inventory),
                "-e", json.dumps(self.extra), *extra]
        if background:
            return subprocess.Popen(argv, cwd=self.project, env=self.env, text=True,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        return subprocess.run(argv, cwd=self.project, env=self.env, capture_output=True,
                              text=True, timeout=600)

    def wrapper(self, *extra: str, background: bool = False):
        inventory = self.write_inventory()
        argv = [sys.executable, "-m", "flagperf_ansible", "run", "-i", str(inventory), *extra]
        if background:
            return subprocess.Popen(argv, cwd=self.project, env=self.env, text=True,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        return subprocess.run(argv, cwd=self.project, env=self.env, capture_output=True,
                              text=True, timeout=600)

    def write_inventory(self) -> Path:
        """The cluster's inventory with this scene's settings in its group_vars."""
        target = self.project.parent / "inventory"
        if not target.exists():
            shutil.copytree(self.cluster.inventory, target)
            group_vars = target / "group_vars" / "all.yml"
            settings = yaml.safe_load(group_vars.read_text())
            settings.update(self.extra)
            group_vars.write_text(yaml.safe_dump(settings, sort_keys=False))
        return target

    def run_dir(self) -> Path:
        (found,) = [p for p in self.results.iterdir() if p.name.startswith("run")]
        return found

    def round(self, case_id: str = "sleep-pytorch-cpux2x1", number: int = 1) -> dict:
        return json.loads((self.run_dir() / case_id / f"round{number}" / "round.json").read_text())

    def interrupt_once_written(self, process, pattern: str, seconds: float = 300) -> str:
        """Ctrl-C (SIGINT) to ``process`` as soon as a file matching ``pattern`` (under the
        results folder) exists; its output once it ended (it is killed if it has not within
        ``seconds``)."""
        try:
            deadline = time.monotonic() + seconds
            while not list(self.results.glob(pattern)):
                assert process.poll() is None and time.monotonic() < deadline, \
                    process.communicate()[0][-3000:]
                time.sleep(0.05)
            process.send_signal(signal.SIGINT)
            return process.communicate(timeout=seconds)[0]
        finally:
            if process.poll() is None:
                process.kill()

    def wait_for_round_start(self, process, case_id="sleep-pytorch-cpux2x1", seconds=300):
        """Block until the round's case runs on both hosts, its monitors sampling."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            assert process.poll() is None, process.stdout.read()[-3000:]
            started = list(self.results.glob(f"run*/{case_id}/round1/round_start.json"))
            if started:
                run_id = started[0].parents[2].name
                if len(case_processes(run_id)) + len(containers(run_id)) >= 2:
                    time.sleep(2)   # let the monitors take a few samples
                    return
            time.sleep(0.5)
        process.kill()
        raise AssertionError("the round did not start: " + process.communicate()[0][-3000:])


def containers(run_id: str = "") -> list[str]:
    """Round containers (of one run) on the (shared) Docker engine."""
    return subprocess.run(["docker", "ps", "-a", "--filter", f"name=flagperf-{run_id}",
                           "--format", "{{.Names}}"], capture_output=True, text=True,
                          check=True).stdout.split()


def _processes(run_id: str, word: str) -> list[int]:
    """The cluster user's processes with ``word`` in their command line that name ``run_id``
    (in their output folder): the case's (runtime none) or the monitors."""
    return [p.pid for p in psutil.process_iter(["cmdline", "username"])
            if p.info["username"] == loopback_cluster.USER
            and any(word in a for a in p.info["cmdline"] or [])
            and any(run_id in a for a in p.info["cmdline"] or [])]


def case_processes(run_id: str) -> list[int]:
    return _processes(run_id, "run_sleep.py")


def monitors(run_id: str) -> list[int]:
    # The monitor's daemon names itself: its command line is that of the interpreter that
    # forked it (``python3 - start ...``, or piped_script's runner for a round's start steps,
    # which the case's supervisor shares).
    return [p.pid for p in psutil.process_iter(["name", "cmdline", "username"])
            if p.info["username"] == loopback_cluster.USER and p.info["name"] == "sys_monitor"
            and any(run_id in a for a in p.info["cmdline"] or [])]


def nothing_left(run_id: str) -> None:
    """No container, case process or monitor of the run on any host."""
    deadline = time.monotonic() + 10       # a killed process may take a moment to be reaped
    found = lambda: (containers(run_id), case_processes(run_id), monitors(run_id))  # noqa: E731
    while time.monotonic() < deadline and any(found()):
        time.sleep(0.5)
    assert found() == ([], [], [])


def test_unreachable_host_at_start_stops_in_preflight(cluster, tmp_path):
    scene = Scene(cluster, tmp_path, {"duration": 0.5})
    inventory = scene.write_inventory()
    hosts = yaml.safe_load((inventory / "hosts.yml").read_text())
    group = hosts["all"]["children"]["flagperf_hosts"]["hosts"]
    group["node2"]["ansible_host"] = f"{loopback_cluster.PREFIX}250"    # nothing listens there
    (inventory / "hosts.yml").write_text(yaml.safe_dump(hosts))
    done = subprocess.run(["ansible-playbook", "site.yml", "-i", str(inventory)],
                          cwd=scene.project, env=scene.env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode != 0
    assert "node2: unreachable: no ssh host key from" in done.stdout, done.stdout[-3000:]
    assert "TASK [Ship benchmarks/" not in done.stdout          # prepare never began
    assert not list(scene.results.glob("run*/*/round1"))


def test_host_lost_mid_run_fails_its_round_and_the_next_case_runs(cluster, tmp_path):
    one_host = {"model": "sleep", "framework": "pytorch", "hardware": "cpu", "nnodes": 1,
                "nproc_per_node": 1, "repeat": 1, "timeout": 60}
    scene = Scene(cluster, tmp_path, {"duration": 40.0}, extra_cases=[one_host])
    running = scene.playbook(background=True)
    try:
        scene.wait_for_round_start(running)
        cluster.kill_host("node2")
        # The detached case (an async job) and monitor left the sshd's process tree; a dead
        # machine takes them along.
        run_id = scene.run_dir().name
        for pid in case_processes(run_id) + monitors(run_id):
            try:
                if "node2_noderank1" in " ".join(psutil.Process(pid).cmdline()):
                    os.kill(pid, signal.SIGKILL)
            except (psutil.Error, ProcessLookupError):
                pass    # gone meanwhile (the case's supervisor with its case)
        output, _ = running.communicate(timeout=300)
    finally:
        if running.poll() is None:
            running.kill()
        cluster.restart_host("node2")
    lost = scene.round()
    assert lost["status"] == "failed" and "node2" in lost["reason"], lost["reason"]
    assert "node2" in lost["failed_hosts"]
    # node1 (40 s of "training") did not run to its end: the round stopped it.
    node1 = next(n for n in lost["nodes"] if n["host"] == "node1")
    assert node1["stopped"] is True and node1["rc"] is None
    assert scene.round("sleep-pytorch-cpux1x1")["status"] == "passed", output[-3000:]
    summary = json.loads((scene.run_dir() / "summary.json").read_text())
    assert [c["status"] for c in summary["cases"]] == ["failed", "passed"]
    nothing_left(scene.run_dir().name)


def test_container_failing_on_one_host_stops_the_others(cluster, tmp_path):
    # Rank 1 exits 3 at once; rank 0 then waits forever, as a rank in a collective would.
    # (A plain worker's own exit code: the retries test below.)
    scene = Scene(cluster, tmp_path, {"duration": 0.5, "exit_code": 3, "fault_rank": 1},
                  runtime="docker", timeout=300, launcher="torchrun")
    done = scene.playbook()
    assert done.returncode == 0, done.stdout[-3000:]
    document = scene.round()
    assert document["status"] == "failed"
    code = 1                            # torchrun exits 1 when a worker failed
    assert f"node2 (exit {code})" in document["reason"] and "stopped node1" in document["reason"]
    # Only the node that failed is to blame; the peer the round stopped is named apart.
    assert document["failed_hosts"] == ["node2"] and document["stopped_hosts"] == ["node1"]
    nodes = {n["host"]: n for n in document["nodes"]}
    # node1 would hang until the 300 s timeout (status timeout); the round stopped it instead.
    assert nodes["node2"]["rc"] == code and nodes["node1"]["stopped"] is True
    assert not any(n["timed_out"] for n in nodes.values())
    # What both nodes wrote is kept: the failed node's rank log, the stopped container's log.
    round_dir = scene.run_dir() / "sleep-pytorch-cpux2x1/round1"
    assert '"event": "FINISHED"' in (round_dir / "node2_noderank1/rank1.out.log").read_text()
    assert (round_dir / "node1_noderank0/container.log").is_file()
    nothing_left(scene.run_dir().name)


def cached_container_users(scene: Scene, host: str) -> dict:
    """What the fact cache keeps for ``host``: the uid:gid its containers run as, by connection."""
    name = "ansible_facts.__flagperf_container_users"
    done = subprocess.run(["ansible", host, "-i", str(scene.cluster.inventory),
                           "-m", "ansible.builtin.debug", "-o", "-a", f"var={name}"],
                          cwd=scene.project, env=scene.env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout.split("=>", 1)[1])[name]


def test_a_docker_round_runs_its_container_as_the_ssh_user_learned_once(cluster, tmp_path):
    """Prepare learns the uid:gid the containers run as in every run and keeps it in the fact
    cache, keyed by the connection (another inventory's host of the same name is not taken for
    it; a stale value of this one is replaced); a run of the rounds alone, the cache gone,
    learns it again."""
    scene = Scene(cluster, tmp_path, {"duration": 6.0}, runtime="docker")
    scene.env["ANSIBLE_CACHE_PLUGIN_CONNECTION"] = str(tmp_path / "facts")
    other = {"ssh:root@192.0.2.1:22": "0:0"}     # another inventory's node1
    # And a stale value of this connection (its user made again with another uid).
    stale = {f"ssh:{loopback_cluster.USER}@{cluster.hosts['node1']}:{loopback_cluster.PORT}":
             "4242:4242"}
    seeded = subprocess.run(["ansible", "node1", "-i", str(cluster.inventory),
                             "-m", "ansible.builtin.set_fact",
                             "-a", json.dumps({"__flagperf_container_users": other | stale,
                                               "cacheable": True})],
                            cwd=scene.project, env=scene.env, capture_output=True, text=True,
                            timeout=60)
    assert seeded.returncode == 0, seeded.stdout + seeded.stderr
    user = pwd.getpwnam(loopback_cluster.USER)
    ssh_user = f"{user.pw_uid}:{user.pw_gid}"
    done = scene.playbook("--skip-tags", "rounds")
    assert done.returncode == 0, done.stdout[-3000:]
    for host, address in cluster.hosts.items():
        key = f"ssh:{loopback_cluster.USER}@{address}:{loopback_cluster.PORT}"
        expected = {key: ssh_user} | (other if host == "node1" else {})
        assert cached_container_users(scene, host) == expected

    shutil.rmtree(tmp_path / "facts")
    scene.results = tmp_path / "rounds-alone"
    scene.extra["flagperf_results_dir"] = str(scene.results)
    process = scene.playbook("--tags", "rounds", background=True)
    scene.wait_for_round_start(process)
    run_id = scene.run_dir().name
    users = [subprocess.run(["docker", "inspect", "--format", "{{.Config.User}}", name],
                            capture_output=True, text=True, check=True).stdout.strip()
             for name in containers(run_id)]
    output = process.communicate(timeout=300)[0]
    assert process.returncode == 0, output[-3000:]
    assert users == [ssh_user, ssh_user]
    assert scene.round()["status"] == "passed", scene.round()["reason"]
    assert list(cached_container_users(scene, "node1").values()) == [ssh_user]
    nothing_left(scene.run_dir().name)


@pytest.mark.parametrize("runtime, launcher", [("none", "python"), ("docker", "torchrun")])
def test_hang_past_the_timeout_is_killed_and_marked_timeout(cluster, tmp_path, runtime, launcher):
    # docker: the module run that started the container is stopped at the timeout, the
    # container is not: the round's end removes it (nothing_left checks that no container is
    # left).
    scene = Scene(cluster, tmp_path, {"duration": 0.5, "hang": True}, runtime=runtime,
                  timeout=20 if launcher == "torchrun" else 8, launcher=launcher)
    done = scene.playbook()
    assert done.returncode == 0, done.stdout[-3000:]
    document = scene.round()
    assert document["status"] == "timeout", document["reason"]
    assert {n["host"] for n in document["nodes"] if n["timed_out"]} == {"node1", "node2"}
    nothing_left(scene.run_dir().name)


def test_a_monitor_that_dies_is_reported_and_the_round_still_counts(cluster, tmp_path):
    scene = Scene(cluster, tmp_path, {"duration": 12.0})
    running = scene.playbook(background=True)
    try:
        scene.wait_for_round_start(running)
        victim = monitors(scene.run_dir().name)[0]
        os.kill(victim, signal.SIGKILL)
        output, _ = running.communicate(timeout=300)
    finally:
        if running.poll() is None:
            running.kill()
    assert running.returncode == 0, output[-3000:]
    document = scene.round()
    assert document["status"] == "passed"
    states = {name: node["status"] for name, node in document["monitor"]["nodes"].items()}
    assert sorted(states.values()) == ["died", "ok"], states
    nothing_left(scene.run_dir().name)


# The wrapper takes SIGINT and SIGTERM with one handler; ansible-playbook takes them apart
# (its own SIGINT path, and the results callback's SIGTERM), so both are run there. Each
# runtime ends its nodes its own way (tasks/node_end.yml): both are run, and the docker ones
# under torchrun (its workers in sessions of their own).
@pytest.mark.parametrize("entry, signum, runtime", [("wrapper", signal.SIGINT, "docker"),
                                                    ("playbook", signal.SIGTERM, "none")],
                         ids=["wrapper-SIGINT", "playbook-SIGTERM-none"])
def test_interrupt_stops_everything_and_keeps_the_round(cluster, tmp_path, entry, signum, runtime):
    scene = Scene(cluster, tmp_path, {"duration": 0.5, "hang": True}, runtime=runtime,
                  timeout=600, launcher="torchrun" if runtime == "docker" else "python")
    running = (scene.wrapper(background=True) if entry == "wrapper"
               else scene.playbook(background=True))
    try:
        scene.wait_for_round_start(running)
        running.send_signal(signum)
        output, _ = running.communicate(timeout=300)
    finally:
        if running.poll() is None:
            running.kill()
    assert running.returncode == (130 if entry == "wrapper" else 99), output[-3000:]
    document = scene.round()
    assert document["status"] == "interrupted", output[-3000:]
    for node in ("node1_noderank0", "node2_noderank1"):
        folder = scene.run_dir() / "sleep-pytorch-cpux2x1/round1" / node
        assert (folder / "sys_monitor.csv").is_file(), output[-5000:]
    summary = json.loads((scene.run_dir() / "summary.json").read_text())
    assert summary["status"] == summary["cases"][0]["status"] == "interrupted"
    assert summary["cases"][0]["rounds"][0]["status"] == "interrupted"
    marked = json.loads((scene.run_dir() / "interrupted.json").read_text())
    assert marked["phase"].startswith("sleep-pytorch-cpux2x1"), marked
    nothing_left(scene.run_dir().name)


def test_an_interrupt_before_the_first_round_records_the_run_and_its_case_as_interrupted(
        cluster, tmp_path):
    """Ctrl-C once preflight wrote the plan (the end of preflight, or prepare), before any
    round: no round ran, none failed."""
    scene = Scene(cluster, tmp_path, {"duration": 0.5})
    running = scene.wrapper(background=True)
    output = scene.interrupt_once_written(running, "run*/plan.json")
    assert running.returncode == 130, output[-3000:]
    marked = json.loads((scene.run_dir() / "interrupted.json").read_text())
    assert marked["phase"] in ("preflight", "prepare"), marked
    assert not list(scene.run_dir().glob("*/round*/round_start.json"))
    summary = json.loads((scene.run_dir() / "summary.json").read_text())
    (case,) = summary["cases"]
    assert summary["status"] == case["status"] == "interrupted", output[-3000:]
    assert case["rounds"] == [] and case["missing_rounds"] == [1]
    nothing_left(scene.run_dir().name)


def test_an_interrupt_between_rounds_keeps_the_round_that_ran(cluster, tmp_path):
    """Ctrl-C to ansible-playbook as soon as round 1 of 2 is recorded (torchrun in docker): no
    round in flight to clean up, yet the run is marked and summarised; round 1 stays passed,
    round 2 is interrupted (if it had begun) or missing, the case and the run interrupted."""
    scene = Scene(cluster, tmp_path, {"duration": 0.5}, runtime="docker", launcher="torchrun")
    scene.extra["flagperf_cases"][0]["repeat"] = 2
    running = scene.playbook(background=True)
    output = scene.interrupt_once_written(running, "run*/sleep-pytorch-cpux2x1/round1/round.json")
    assert running.returncode == 99, output[-3000:]
    first = scene.round()
    assert first["status"] == "passed", (first["reason"], output[-3000:])
    marked = json.loads((scene.run_dir() / "interrupted.json").read_text())
    assert marked["phase"] in ("between rounds", "sleep-pytorch-cpux2x1/round2"), \
        (marked, output[-3000:])
    summary = json.loads((scene.run_dir() / "summary.json").read_text())
    (case,) = summary["cases"]
    assert summary["status"] == case["status"] == "interrupted", output[-3000:]
    assert case["rounds"][0]["status"] == "passed"
    assert case["missing_rounds"] == [2] or case["rounds"][1]["status"] == "interrupted", \
        (case, output[-3000:])
    assert (scene.run_dir() / "summary.html").is_file(), output[-3000:]
    nothing_left(scene.run_dir().name)


def test_retries_keep_the_failed_attempt_and_resume_runs_only_what_did_not_pass(cluster,
                                                                                  tmp_path):
    passing = {"model": "sleep", "framework": "pytorch", "hardware": "cpu", "nnodes": 1,
               "nproc_per_node": 1, "repeat": 1, "timeout": 60}
    scene = Scene(cluster, tmp_path, {"duration": 0.5, "exit_code": 4}, extra_cases=[passing])
    done = scene.wrapper("--retries", "1")
    assert done.returncode == 1, done.stdout[-3000:]
    run_dir = scene.run_dir()
    failing = scene.round()
    assert failing["status"] == "failed"
    assert [(a["attempt"], a["status"]) for a in failing["attempts"]] == [(1, "failed")]
    assert failing["attempts"][0]["failed_hosts"] == ["node1", "node2"]     # both exited 4
    assert (run_dir / "sleep-pytorch-cpux2x1/round1/attempts/1/round.json").is_file()
    passed_before = scene.round("sleep-pytorch-cpux1x1")
    assert passed_before["status"] == "passed"

    scene.set_params({"duration": 0.5})                       # the fault is fixed
    done = scene.wrapper("--resume", str(run_dir))
    assert done.returncode == 0, done.stdout[-3000:]
    assert "sleep-pytorch-cpux1x1/round1: passed already" in done.stdout
    resumed = scene.round()
    assert resumed["status"] == "passed"
    assert [a["attempt"] for a in resumed["attempts"]] == [1, 2]
    assert scene.round("sleep-pytorch-cpux1x1")["started_ms"] == passed_before["started_ms"]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "passed"
    assert [c["rounds_planned"] for c in summary["cases"]] == [1, 1]

    # summarize parses every round again from the raw artifacts alone.
    (run_dir / "sleep-pytorch-cpux2x1/round1/round.json").unlink()
    (run_dir / "summary.json").unlink()
    again = subprocess.run([sys.executable, "-m", "flagperf_ansible", "summarize", str(run_dir)],
                           cwd=scene.project, env=scene.env, capture_output=True, text=True)
    assert again.returncode == 0, again.stdout + again.stderr
    assert scene.round()["status"] == "passed"
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "passed"
    nothing_left(scene.run_dir().name)
