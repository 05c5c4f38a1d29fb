"""The system monitor script, run for real: start, idempotent start, stop, crashed owner."""

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "roles/monitor/files/sys_monitor.py"


def monitor(action, out, *extra):
    return subprocess.run([sys.executable, str(SCRIPT), action, "--output-dir", str(out), *extra],
                          capture_output=True, text=True, timeout=30)


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is not running: read its state.
    stat = Path(f"/proc/{pid}/stat")
    return not stat.exists() or stat.read_text().split()[2] != "Z"


def test_start_sample_stop(tmp_path):
    started = monitor("start", tmp_path, "--interval", "0.1")
    assert started.returncode == 0, started.stderr
    pid = int((tmp_path / "sys_monitor.pid").read_text())
    assert alive(pid)

    again = monitor("start", tmp_path, "--interval", "0.1")
    assert "already running" in again.stdout
    assert int((tmp_path / "sys_monitor.pid").read_text()) == pid

    time.sleep(0.6)
    stopped = monitor("stop", tmp_path)
    assert stopped.returncode == 0 and f"pid {pid}" in stopped.stdout
    assert not alive(pid)
    assert not (tmp_path / "sys_monitor.pid").exists()

    with open(tmp_path / "sys_monitor.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) >= 3
    stamps = [int(r["timestamp_ms"]) for r in rows]
    assert stamps == sorted(stamps) and abs(stamps[-1] / 1000 - time.time()) < 5
    assert all(int(r["mem_used_bytes"]) > 0 for r in rows)   # FlagPerf's `free -g` read 0 here
    assert all(0.0 <= float(r["cpu_percent"]) <= 100.0 for r in rows)


def test_stop_without_a_monitor_succeeds(tmp_path):
    done = monitor("stop", tmp_path)
    assert done.returncode == 0 and "not running" in done.stdout


def test_two_rounds_never_share_a_monitor(tmp_path):
    first, second = tmp_path / "run1/round1", tmp_path / "run2/round1"
    assert monitor("start", first).returncode == 0
    assert monitor("start", second).returncode == 0
    pids = {int((d / "sys_monitor.pid").read_text()) for d in (first, second)}
    assert len(pids) == 2
    monitor("stop", first)
    assert alive(int((second / "sys_monitor.pid").read_text()))
    monitor("stop", second)
    assert not any(alive(p) for p in pids)


def test_stale_pid_file_after_a_crash_is_replaced(tmp_path):
    assert monitor("start", tmp_path).returncode == 0
    pid = int((tmp_path / "sys_monitor.pid").read_text())
    os.kill(pid, signal.SIGKILL)                 # the monitor dies without cleaning up
    deadline = time.time() + 5
    while alive(pid) and time.time() < deadline:
        time.sleep(0.05)
    (tmp_path / "sys_monitor.pid").write_text(f"{pid}\n")
    assert "not running" in monitor("stop", tmp_path).stdout
    restarted = monitor("start", tmp_path)
    assert restarted.returncode == 0 and "started" in restarted.stdout
    monitor("stop", tmp_path)


def test_monitor_ends_by_itself_after_max_seconds(tmp_path):
    assert monitor("start", tmp_path, "--interval", "0.1", "--max-seconds", "0.5").returncode == 0
    pid = int((tmp_path / "sys_monitor.pid").read_text())
    deadline = time.time() + 10
    while alive(pid) and time.time() < deadline:
        time.sleep(0.1)
    assert not alive(pid)
    assert not (tmp_path / "sys_monitor.pid").exists()
