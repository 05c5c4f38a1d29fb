"""The monitor daemon, run for real: start, idempotent start, stop, a monitor killed with
SIGKILL (reported as died in round.json), a crashed case, max-seconds, FlagPerf-style scripts."""

import csv
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import host_side
from driver import perflog
from flagperf_ansible.results.rounds import finalize_round

ROOT = Path(__file__).resolve().parents[1]
CPU_PLUGIN = str(ROOT / "vendors/cpu/monitor.py")


def monitor(action, out, *extra):
    """Run flagperf_host.sys_monitor as the monitor role does (flagperf.benchmark.piped_script:
    the runner and the host package's archive on the interpreter's standard input)."""
    return host_side.run_step("sys_monitor", action, "--output-dir", str(out), *extra, timeout=30)


def pid_of(out):
    """The monitor's pid from its pid file (``PID START_TIME``)."""
    return int((out / "sys_monitor.pid").read_text().split()[0])


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is not running: read its state.
    stat = Path(f"/proc/{pid}/stat")
    return not stat.exists() or stat.read_text().split()[2] != "Z"


def test_start_sample_stop(tmp_path):
    began_ms = int(time.time() * 1000)
    started = monitor("start", tmp_path, "--interval", "0.1")
    assert started.returncode == 0, started.stderr
    pid = pid_of(tmp_path)
    assert alive(pid)
    # Named, as ps -C and pgrep see it: a daemon forked from piped_script's runner (a round's
    # start steps) has the runner's command line.
    assert Path(f"/proc/{pid}/comm").read_text().strip() == "sys_monitor"

    again = monitor("start", tmp_path, "--interval", "0.1")
    assert "already running" in again.stdout
    assert pid_of(tmp_path) == pid

    time.sleep(0.6)
    stopped = monitor("stop", tmp_path)
    assert stopped.returncode == 0 and f"pid {pid}" in stopped.stdout
    assert not alive(pid)
    assert not (tmp_path / "sys_monitor.pid").exists()

    with open(tmp_path / "sys_monitor.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) >= 3
    stamps = [int(r["timestamp_ms"]) for r in rows]
    # Wall-clock milliseconds (PerfLog's clock), taken between the start and now.
    assert stamps == sorted(stamps) and began_ms <= stamps[0] <= stamps[-1] <= time.time() * 1000
    assert all(int(r["mem_used_bytes"]) > 0 for r in rows)   # FlagPerf's `free -g` read 0 here
    assert all(0.0 <= float(r["cpu_percent"]) <= 100.0 for r in rows)
    assert json.loads((tmp_path / "monitor.json").read_text())["status"] == "stopped"
    with open(tmp_path / "cpu_cores.csv", newline="") as handle:
        cores = list(csv.DictReader(handle))
    assert [int(r["timestamp_ms"]) for r in cores] == stamps   # streams share their ticks
    assert len(cores[0]) == 1 + os.cpu_count()


def test_stop_without_a_monitor_succeeds(tmp_path):
    done = monitor("stop", tmp_path)
    assert done.returncode == 0 and "not running" in done.stdout


def test_two_rounds_never_share_a_monitor(tmp_path):
    first, second = tmp_path / "run1/round1", tmp_path / "run2/round1"
    assert monitor("start", first).returncode == 0
    assert monitor("start", second).returncode == 0
    pids = {pid_of(d) for d in (first, second)}
    assert len(pids) == 2
    monitor("stop", first)
    assert alive(pid_of(second))
    monitor("stop", second)
    assert not any(alive(p) for p in pids)


def test_stale_pid_file_after_a_crash_is_replaced(tmp_path):
    assert monitor("start", tmp_path).returncode == 0
    pid = pid_of(tmp_path)
    os.kill(pid, signal.SIGKILL)                 # the monitor dies without cleaning up
    deadline = time.time() + 5
    while alive(pid) and time.time() < deadline:
        time.sleep(0.05)
    (tmp_path / "sys_monitor.pid").write_text(f"{pid}\n")
    assert "had died" in monitor("stop", tmp_path).stdout
    restarted = monitor("start", tmp_path)
    assert restarted.returncode == 0 and "started" in restarted.stdout
    monitor("stop", tmp_path)


def test_a_pid_file_naming_another_process_is_not_the_monitor(tmp_path):
    """A pid reused by another process (its start time differs from the recorded one) is
    neither reported as the running monitor nor signalled by stop."""
    other = subprocess.Popen(["sleep", "60"])
    real = None
    try:
        (tmp_path / "sys_monitor.pid").write_text(f"{other.pid} 1\n")
        started = monitor("start", tmp_path)
        assert started.returncode == 0 and "monitor started" in started.stdout
        real = pid_of(tmp_path)
        assert real != other.pid and alive(real)
        (tmp_path / "sys_monitor.pid").write_text(f"{other.pid} 1\n")
        stopped = monitor("stop", tmp_path)
        assert stopped.returncode == 0 and "had died" in stopped.stdout
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()
        if real:
            os.kill(real, signal.SIGTERM)


def test_monitor_ends_by_itself_after_max_seconds(tmp_path):
    assert monitor("start", tmp_path, "--interval", "0.1", "--max-seconds", "0.5").returncode == 0
    pid = pid_of(tmp_path)
    deadline = time.time() + 10
    while alive(pid) and time.time() < deadline:
        time.sleep(0.1)
    assert not alive(pid)
    assert not (tmp_path / "sys_monitor.pid").exists()


def kill_and_reap(pid):
    os.kill(pid, signal.SIGKILL)
    deadline = time.time() + 5
    while alive(pid) and time.time() < deadline:
        time.sleep(0.05)


def round_with_rank_log(run_dir):
    """A round's node dir and the rank 0 PerfLog (TRAIN_START logged now) to finish later."""
    node = run_dir / "c-pytorch-cpux1x1/round1/h1_noderank0"
    node.mkdir(parents=True)
    stream = io.StringIO()
    log = perflog.PerfLogger(rank=0, stream=stream)
    log.log(perflog.TRAIN_START)
    return node, stream, log


def finish_rank_log(node, stream, log, train_end=True):
    if train_end:
        log.log(perflog.TRAIN_END)
        log.log(perflog.FINISHED, {"num_trained_samples": 64, "converged": True})
    (node / "rank0.out.log").write_text(stream.getvalue())


def record(run_dir, rc=0):
    return {"run_dir": str(run_dir), "key": "c-pytorch-cpux1x1/round1",
            "case_id": "c-pytorch-cpux1x1", "round": 1, "metric": "acc1",
            "hosts": [{"host": "h1", "noderank": 0, "rc": rc, "timed_out": False}],
            "started_ms": int(time.time() * 1000) - 5000, "ended_ms": int(time.time() * 1000)}


def test_monitor_killed_mid_round_is_reported_as_died(tmp_path):
    node, stream, log = round_with_rank_log(tmp_path)
    assert monitor("start", node, "--interval", "0.1", "--vendor-plugin", CPU_PLUGIN).returncode == 0
    pid = pid_of(node)
    time.sleep(0.4)
    kill_and_reap(pid)                           # the monitor crashes; the round goes on
    time.sleep(0.2)
    finish_rank_log(node, stream, log)
    stopped = monitor("stop", node)
    assert stopped.returncode == 0 and "had died" in stopped.stdout
    assert not alive(pid) and not (node / "sys_monitor.pid").exists()
    info = json.loads((node / "monitor.json").read_text())
    assert info["status"] == "died" and str(pid) in info["detail"]

    document = finalize_round(record(tmp_path))
    assert document["monitor"]["status"] == "died"
    assert document["monitor"]["nodes"]["h1_noderank0"]["status"] == "died"
    assert json.loads((tmp_path / "c-pytorch-cpux1x1/round1/round.json").read_text())[
        "monitor"]["status"] == "died"


def test_crashed_case_still_gets_its_monitor_stopped_and_summarized(tmp_path):
    node, stream, log = round_with_rank_log(tmp_path)
    assert monitor("start", node, "--interval", "0.1", "--vendor-plugin", CPU_PLUGIN).returncode == 0
    pid = pid_of(node)
    time.sleep(0.5)
    finish_rank_log(node, stream, log, train_end=False)   # the case crashed after TRAIN_START
    stopped = monitor("stop", node)
    assert stopped.returncode == 0 and f"stopped (pid {pid})" in stopped.stdout
    assert not alive(pid)
    document = finalize_round(record(tmp_path, rc=1))
    assert document["status"] == "failed"
    summary = document["monitor"]
    assert summary["status"] == "ok" and summary["window"]["source"] == "round"
    node_summary = summary["nodes"]["h1_noderank0"]
    assert node_summary["samples"] >= 3 and node_summary["devices"]["vendor"] == "cpu"
    assert summary["overall"]["energy_per_sample_j"] is None


def test_expired_monitor_is_reported_as_died(tmp_path):
    node, stream, log = round_with_rank_log(tmp_path)
    assert monitor("start", node, "--interval", "0.1", "--max-seconds", "0.3").returncode == 0
    pid = pid_of(node)
    deadline = time.time() + 10
    while alive(pid) and time.time() < deadline:
        time.sleep(0.05)
    finish_rank_log(node, stream, log)
    assert "not running (expired)" in monitor("stop", node).stdout
    assert finalize_round(record(tmp_path))["monitor"]["status"] == "died"


def test_missing_plugin_leaves_host_sampling_on(tmp_path):
    assert monitor("start", tmp_path, "--interval", "0.1",
                   "--vendor-plugin", str(tmp_path / "nope.py")).returncode == 0
    time.sleep(0.3)
    monitor("stop", tmp_path)
    info = json.loads((tmp_path / "monitor.json").read_text())
    assert "no vendor plugin" in info["device_error"] and info["status"] == "stopped"
    assert not (tmp_path / "device_monitor.csv").exists()
    assert len((tmp_path / "sys_monitor.csv").read_text().splitlines()) >= 2


FLAGPERF_STYLE_SCRIPT = """
import argparse, time
parser = argparse.ArgumentParser()
parser.add_argument("-o", "--operation", required=True)
parser.add_argument("-l", "--log", default="./logs/")
args = parser.parse_args()
with open(args.log + "/fake_monitor.ops", "a") as handle:
    handle.write(args.operation + "\\n")
"""


def test_flagperf_style_vendor_script_plugs_in_unchanged(tmp_path):
    script = tmp_path / "fake_monitor.py"
    script.write_text(FLAGPERF_STYLE_SCRIPT)
    out = tmp_path / "node"
    assert monitor("start", out, "--vendor-script", str(script)).returncode == 0
    assert monitor("stop", out, "--vendor-script", str(script)).returncode == 0
    assert (out / "fake_monitor.ops").read_text().split() == ["start", "stop"]
    info = json.loads((out / "monitor.json").read_text())
    assert info["vendor_script"]["start"] == "ok" and info["vendor_script_stop"]["stop"] == "ok"


def test_work_that_ran_before_the_round_is_counted_as_other_processes(tmp_path):
    """A CPU-bound process that ran before the monitor started is other work: its CPU time per
    second is ``other_cpu_cores``, and a plugin's device listing it counts it in
    ``other_processes``; the one started after the monitor (the round's case) is in neither."""
    loop = [sys.executable, "-c", "while True: pass"]
    before = subprocess.Popen(loop)
    after = None
    try:
        time.sleep(0.3)
        plugin = tmp_path / "plugin.py"
        plugin.write_text(
            "import json, pathlib\n"
            "PIDS = pathlib.Path(__file__).with_name('pids.json')\n"
            "def device_info():\n"
            "    return {'vendor': 'test', 'devices': [{'index': 0, 'name': 'probe'}]}\n"
            "def sample():\n"
            "    return [{'index': 0, 'pids': json.loads(PIDS.read_text())}]\n")
        (tmp_path / "pids.json").write_text(json.dumps([before.pid]))
        out = tmp_path / "node"
        started = monitor("start", out, "--interval", "0.2", "--vendor-plugin", str(plugin))
        assert started.returncode == 0, started.stderr
        after = subprocess.Popen(loop)
        (tmp_path / "pids.json").write_text(json.dumps([before.pid, after.pid]))
        used = psutil_cpu(before)
        began = time.monotonic()
        time.sleep(2.5)
        rate = (psutil_cpu(before) - used) / (time.monotonic() - began)
        assert monitor("stop", out).returncode == 0
    finally:
        for process in (before, after):
            if process is not None:
                process.kill()
                process.wait()
    with open(out / "sys_monitor.csv", newline="") as handle:
        other = [float(r["other_cpu_cores"]) for r in list(csv.DictReader(handle))[2:-1]]
    mean = sum(other) / len(other)
    assert mean >= 0.8 * rate, (mean, rate)                     # the earlier loop counts
    # The later one is not among them (a number could not tell it from this machine's other
    # work): of the two pids on the device, one ran before the monitor.
    with open(out / "device_monitor.csv", newline="") as handle:
        counts = [r["other_processes"] for r in csv.DictReader(handle)]
    assert set(counts) == {"1"} and len(counts) >= 10, counts


def psutil_cpu(process) -> float:
    """CPU seconds (user and system) of a running child process."""
    import psutil

    times = psutil.Process(process.pid).cpu_times()
    return times.user + times.system
