"""The launch role's host side (src/flagperf_host/node_job.py), run for real: start a command
in the background, wait for it a slice at a time, kill it at the timeout; its reports, shaped as
flagperf.benchmark.piped_script returns them, read by the round's wait logic."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import yaml

import host_side
from flagperf_ansible.run.round_wait import node_failed, node_finished, node_outcome

def node_job(*args: str) -> dict:
    """Run flagperf_host.node_job as flagperf.benchmark.piped_script does (the runner, the host
    package's archive and the step on the interpreter's standard input, which ends before it
    runs); the result as that action registers it. A start returns although the case it left
    running still runs."""
    done = host_side.run_step("node_job", *args)
    return {"rc": done.returncode, "stdout": done.stdout, "stderr": done.stderr, "changed": True}


def start(out: Path, *argv: str, timeout: float = 60, config: dict | None = None) -> dict:
    extra = ["--config-json", json.dumps(config)] if config is not None else []
    return node_job("start", "--output-dir", str(out), "--timeout", str(timeout), *extra,
                    "--", *argv)


def wait(out: Path, seconds: float) -> dict:
    return node_job("wait", "--output-dir", str(out), "--seconds", str(seconds))


def test_start_writes_the_config_and_wait_reports_the_exit_code(tmp_path):
    out = tmp_path / "node"
    config = {"lr": 0.1, "train_batch_size": 32, "name": "x: y"}
    started = start(out, sys.executable, "-c", "import sys; print('hello'); sys.exit(3)",
                    config=config)
    assert json.loads(started["stdout"])["msg"] == "started"
    assert yaml.safe_load((out / "config.yaml").read_text()) == config

    poll = wait(out, 30)
    assert node_finished(poll) and node_failed(poll)
    outcome = node_outcome(poll)
    assert outcome["rc"] == 3 and not outcome["timed_out"] and not outcome["stopped"]
    assert "hello" in outcome["output"]
    assert "hello" in (out / "launcher.log").read_text()
    assert json.loads((out / "launch.json").read_text())["rc"] == 3


def test_wait_reports_a_running_case_after_its_slice(tmp_path):
    out = tmp_path / "node"
    start(out, "sleep", "30")
    began = time.monotonic()
    poll = wait(out, 0.5)
    assert time.monotonic() - began >= 0.5          # it waited on the host for the slice
    assert not node_finished(poll)
    done = wait(tmp_path / "node-b", 0)             # never started: the helper says so
    assert node_finished(done) and node_failed(done)
    assert node_outcome(poll)["stopped"]            # a round that ends now stops it
    # The supervisor is named (ps -C, pgrep): forked from piped_script's runner with a
    # round's other start steps, it has the runner's command line.
    supervisor = int((out / "launch.pid").read_text().split()[0])
    assert Path(f"/proc/{supervisor}/comm").read_text().strip() == "node_job"
    _kill_group(out)


def test_wait_tells_where_a_running_case_is_from_rank_0s_perflog(tmp_path):
    """A running case's progress: its last epoch and step, its last evaluation's metrics."""
    out = tmp_path / "node"
    lines = ['partial line cut by the tail"}',
             '[PerfLog] {"event": "EPOCH_BEGIN", "value": {"epoch": 2}, "metadata": {"time_ms": 5}}',
             '[PerfLog] {"event": "EVALUATE", "value": {"epoch": 2, "global_steps": 88, '
             '"acc1": 36.1}, "metadata": {"time_ms": 6}}',
             'some other output',
             '[PerfLog] {"event": "STEP_END", "value": {"epoch": 3, "global_steps": 100, '
             '"loss": 2.3}, "metadata": {"time_ms": 7}}']
    start(out, sys.executable, "-c",
          "import sys, time; open('rank0.out.log', 'w').write(sys.argv[1]); time.sleep(30)",
          "\n".join(lines) + "\n")
    deadline = time.monotonic() + 30
    while not (out / "rank0.out.log").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    poll = json.loads(wait(out, 0.2)["stdout"])
    assert poll["finished"] == 0
    assert poll["progress"] == {"event": "STEP_END", "epoch": 3, "global_steps": 100,
                                "metrics": {"acc1": 36.1}, "time_ms": 7}
    _kill_group(out)


def test_the_host_kills_the_whole_process_group_at_the_timeout(tmp_path):
    out = tmp_path / "node"
    start(out, "sh", "-c", "sleep 60 & sleep 60", timeout=1)
    child = int((out / "launch.pid").read_text().split()[1])
    members = [p for p in psutil.process_iter() if _pgid(p.pid) == child]
    assert len(members) >= 2                        # the shell and its background sleep
    poll = wait(out, 30)
    outcome = node_outcome(poll)
    assert outcome["timed_out"] and outcome["rc"] is None
    assert not [p for p in members if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def test_a_command_that_cannot_run_is_a_failed_node(tmp_path):
    out = tmp_path / "node"
    start(out, str(tmp_path / "no-such-launcher"))
    poll = wait(out, 30)
    assert node_failed(poll) and node_outcome(poll)["rc"] == 127


def test_an_interpreter_given_by_its_path_is_first_on_the_cases_path(tmp_path):
    """As in an activated environment: a launcher that starts its workers by name (msrun's
    `python`) finds the node's interpreter."""
    venv = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    out = tmp_path / "node"
    start(out, str(venv / "bin/python"), "-c",
          "import os, shutil; open('seen', 'w').write(shutil.which('python'))")
    assert node_finished(wait(out, 30))
    assert (out / "seen").read_text() == str(venv / "bin/python")


def test_a_supervisor_killed_without_a_word_ends_the_node(tmp_path):
    out = tmp_path / "node"
    start(out, "sleep", "30")
    _kill_group(out)
    poll = wait(out, 30)
    assert node_finished(poll) and node_failed(poll)
    assert node_outcome(poll)["rc"] is None


def test_stop_kills_the_case_group_and_the_supervisor_records_it(tmp_path):
    out = tmp_path / "node"
    start(out, "sh", "-c", "sleep 60 & sleep 60")
    child = int((out / "launch.pid").read_text().split()[1])
    members = [p for p in psutil.process_iter() if _pgid(p.pid) == child]
    assert len(members) >= 2                        # the shell and its background sleep
    stopped = node_job("stop", "--output-dir", str(out))
    assert stopped["rc"] == 0 and json.loads(stopped["stdout"]) == {"changed": True, "msg": "stopped"}
    assert not [p for p in members if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    # The supervisor saw its child end (SIGTERM first) and recorded it before stop returned.
    assert json.loads((out / "launch.json").read_text())["rc"] == -signal.SIGTERM
    again = node_job("stop", "--output-dir", str(out))
    assert json.loads(again["stdout"])["msg"] == "not running"


def test_stop_leaves_an_ended_case_and_a_folder_never_started_alone(tmp_path):
    out = tmp_path / "node"
    start(out, "true")
    assert node_finished(wait(out, 30))
    assert json.loads(node_job("stop", "--output-dir", str(out))["stdout"])["msg"] == "not running"
    never = node_job("stop", "--output-dir", str(tmp_path / "never"))
    assert never["rc"] == 0 and json.loads(never["stdout"])["msg"] == "not running"


def test_stop_kills_the_case_whose_supervisor_was_killed(tmp_path):
    out = tmp_path / "node"
    start(out, "sh", "-c", "sleep 60 & sleep 60")
    supervisor, child = (int(x) for x in (out / "launch.pid").read_text().split())
    members = [p for p in psutil.process_iter() if _pgid(p.pid) == child]
    os.kill(supervisor, signal.SIGKILL)
    stopped = node_job("stop", "--output-dir", str(out), "--grace", "0")
    assert json.loads(stopped["stdout"]) == {"changed": True, "msg": "stopped"}
    psutil.wait_procs(members, timeout=10)
    assert not [p for p in members if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def test_stop_leaves_a_group_that_is_not_the_cases_alone(tmp_path):
    """No supervisor, no record of the end, and the recorded group id now another's group."""
    out = tmp_path / "node"
    out.mkdir()
    other = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        (out / "launch.pid").write_text(f"{2 ** 22 + 1} {other.pid}\n")
        stopped = node_job("stop", "--output-dir", str(out))
        assert json.loads(stopped["stdout"]) == {"changed": False, "msg": "not running"}
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()


def test_start_hands_its_input_to_the_case_and_wait_reports_the_result(tmp_path):
    """--input: the case reads start's standard input (a program, as a module's payload is
    run by python3 -); --result: its standard output is the result wait reports, which stop
    removes (it may hold the module's arguments); its standard error goes to launcher.log."""
    out = tmp_path / "node"
    program = ("import json, sys\n"
               "print('a warning', file=sys.stderr)\n"
               "print(json.dumps({'changed': True, 'status': 2, 'invocation': {'module_args': {'env': {'TOKEN': 's'}}}}))\n")
    done = subprocess.run([*host_side.command("node_job", python=sys.executable), "start", "--output-dir", str(out),
                           "--timeout", "60", "--input", "--result", "--", sys.executable, "-"],
                          input=program, capture_output=True, text=True, timeout=60,
                          env=host_side.env(dict(os.environ)))
    assert done.returncode == 0 and json.loads(done.stdout)["msg"] == "started", done.stderr
    poll = wait(out, 30)
    status = json.loads(poll["stdout"])
    assert status["finished"] == 1 and status["rc"] == 0
    assert status["result"]["status"] == 2 and "a warning" in status["stdout"]
    # The module's exit status is 0; the container's (its result's status) is the node's.
    assert node_outcome(poll)["rc"] == 2 and node_failed(poll)
    assert "TOKEN" not in (out / "launcher.log").read_text()
    assert (out / "job_result.json").stat().st_mode & 0o077 == 0
    stopped = json.loads(node_job("stop", "--output-dir", str(out))["stdout"])
    assert stopped["msg"] == "not running" and not (out / "job_result.json").exists()
    # Without --input the case reads nothing, even when start was given some.
    again = subprocess.run([*host_side.command("node_job", python=sys.executable), "start", "--output-dir", str(out),
                            "--timeout", "60", "--", sys.executable, "-c",
                            "import sys; print(repr(sys.stdin.read()))"],
                           input=program, capture_output=True, text=True, timeout=60,
                           env=host_side.env(dict(os.environ)))
    assert again.returncode == 0
    assert json.loads(wait(out, 30)["stdout"])["stdout"].strip().endswith("a warning\n''")


def test_a_helper_that_printed_nothing_is_a_failed_node():
    poll = {"rc": 2, "stdout": "", "stderr": "flagperf_host.node_job: error: unrecognized arguments"}
    assert node_finished(poll) and node_failed(poll)
    assert "unrecognized" in node_outcome(poll)["output"]


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def _kill_group(out: Path) -> None:
    """Kill the supervisor and the case's process group (the supervisor without a word)."""
    supervisor, child = (int(x) for x in (out / "launch.pid").read_text().split())
    for kill in (lambda: os.kill(supervisor, signal.SIGKILL),
                 lambda: os.killpg(child, signal.SIGKILL)):
        try:
            kill()
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and psutil.pid_exists(supervisor) and \
            psutil.Process(supervisor).status() != psutil.STATUS_ZOMBIE:
        time.sleep(0.05)
