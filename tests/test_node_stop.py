"""flagperf_host.node_job ends a whole node, run for real with torchrun (the venv's): torchrun starts its
workers in sessions of their own, so killing its process group alone would orphan them (still
running with parent pid 1; on a GPU host they hold the device). ``stop`` and the timeout send
SIGTERM first (torchrun passes it on), then SIGKILL to every process that carries the node's
mark, FLAGPERF_NODE_DIR."""

import json
import os
import signal
import sys
import time
from pathlib import Path

import host_side

TORCHRUN = Path(sys.executable).parent / "torchrun"

# A rank: writes its pid (atomically), then sleeps. "term": it notes a SIGTERM and exits;
# "ignore": it ignores SIGTERM (only SIGKILL ends it).
WORKER = """\
import os, signal, sys, time
folder, mode = sys.argv[1], sys.argv[2]
rank = os.environ["LOCAL_RANK"]
def ended(*_):
    open(os.path.join(folder, rank + ".term"), "w").close()
    sys.exit(0)
signal.signal(signal.SIGTERM, signal.SIG_IGN if mode == "ignore" else ended)
with open(os.path.join(folder, "." + rank), "w") as handle:
    handle.write(str(os.getpid()))
os.replace(os.path.join(folder, "." + rank), os.path.join(folder, rank + ".pid"))
time.sleep(60)
"""


def node_job(*args: str) -> dict:
    done = host_side.run_step("node_job", *args)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def start_torchrun(tmp_path: Path, mode: str, timeout: float) -> tuple[Path, list[int]]:
    """The node's folder and its two workers' pids, once both run."""
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    out = tmp_path / "node"
    started = node_job("start", "--output-dir", str(out), "--timeout", str(timeout), "--",
                       str(TORCHRUN), "--standalone", "--nproc_per_node", "2",
                       str(script), str(tmp_path), mode)
    assert started["msg"] == "started"
    pid_files = [tmp_path / "0.pid", tmp_path / "1.pid"]
    deadline = time.monotonic() + 30
    while not all(f.exists() for f in pid_files):
        assert not (out / "launch.json").exists(), (out / "launcher.log").read_text()
        assert time.monotonic() < deadline, "torchrun's workers did not start in 30 s"
        time.sleep(0.05)
    workers = [int(f.read_text()) for f in pid_files]
    # What the test is about: the workers are not in torchrun's session (nor its group).
    launcher = int((out / "launch.pid").read_text().split()[1])
    assert all(os.getsid(w) == w != os.getsid(launcher) for w in workers)
    assert all(pid in marked(out) for pid in [launcher, *workers])
    return out, workers


def marked(out: Path) -> list[int]:
    """Live processes whose environment carries the node's mark (a zombie's environ is empty)."""
    mark = f"FLAGPERF_NODE_DIR={out.resolve()}".encode()
    found = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if mark in environ.read_bytes().split(b"\0"):
                found.append(int(environ.parent.name))
        except OSError:
            pass
    return found


def gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


def cleanup(out: Path) -> None:
    """Leave nothing running, whatever the test found: the node's processes and its supervisor."""
    pids = marked(out)
    try:
        supervisor = int((out / "launch.pid").read_text().split()[0])
        if Path(f"/proc/{supervisor}/comm").read_text().strip() == "node_job":
            pids.append(supervisor)
    except (OSError, ValueError, IndexError):
        pass
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def assert_node_ended(out: Path, workers: list[int]) -> None:
    assert marked(out) == []
    assert all(gone(w) for w in workers)


def test_stop_ends_torchrun_and_its_workers_gracefully(torchrun, tmp_path):
    out = tmp_path / "node"
    try:
        out, workers = start_torchrun(tmp_path, "term", 60)
        assert node_job("stop", "--output-dir", str(out)) == {"changed": True, "msg": "stopped"}
        assert_node_ended(out, workers)
        # SIGTERM reached the workers (through torchrun) before any SIGKILL.
        assert (tmp_path / "0.term").exists() and (tmp_path / "1.term").exists()
        status = json.loads((out / "launch.json").read_text())
        assert status["finished"] == 1 and status["rc"] != 0 and not status["timed_out"]
        assert node_job("stop", "--output-dir", str(out))["msg"] == "not running"
    finally:
        cleanup(out)


def test_the_timeout_ends_torchrun_and_its_workers(torchrun, tmp_path):
    out = tmp_path / "node"
    try:
        out, workers = start_torchrun(tmp_path, "term", 8)
        deadline = time.monotonic() + 30
        while not (out / "launch.json").exists():
            assert time.monotonic() < deadline, "no launch.json 30 s after the workers started"
            time.sleep(0.1)
        assert_node_ended(out, workers)
        assert (tmp_path / "0.term").exists() and (tmp_path / "1.term").exists()
        status = json.loads((out / "launch.json").read_text())
        assert status["rc"] is None and status["timed_out"] and status["msg"] == "Timeout exceeded"
    finally:
        cleanup(out)


def test_workers_that_ignore_sigterm_are_killed_after_the_grace(torchrun, tmp_path):
    out = tmp_path / "node"
    try:
        out, workers = start_torchrun(tmp_path, "ignore", 60)
        began = time.monotonic()
        stopped = node_job("stop", "--output-dir", str(out), "--grace", "1")
        assert stopped == {"changed": True, "msg": "stopped"}
        assert time.monotonic() - began >= 1            # it gave them the grace first
        assert_node_ended(out, workers)
        # torchrun itself waits up to 30 s for its workers: SIGKILL ended it too.
        assert json.loads((out / "launch.json").read_text())["rc"] == -signal.SIGKILL
    finally:
        cleanup(out)
