#!/usr/bin/env python3
"""System monitor for one host and one round: samples CPU and memory with psutil into a CSV.

    sys_monitor.py start --output-dir DIR [--interval 1.0] [--max-seconds S]
                                          # detach, write DIR/sys_monitor.pid
    sys_monitor.py stop  --output-dir DIR [--grace 5]        # stop it, remove the pid file

CSV ``DIR/sys_monitor.csv``: ``timestamp_ms`` (wall clock, epoch ms, as PerfLog ``time_ms``),
``cpu_percent`` (all cores, % of total capacity), ``mem_used_bytes``, ``mem_total_bytes``,
``mem_percent``. The pid file lives in the round's own folder, so two runs never collide.
``start`` is idempotent (a live monitor for DIR is kept); ``stop`` always leaves none behind.
``--max-seconds`` bounds its life, so a monitor whose run was killed before ``stop`` still ends.
"""

from __future__ import annotations

import argparse
import csv
import os
import signal
import sys
import time
from pathlib import Path

PID_FILE = "sys_monitor.pid"
CSV_FILE = "sys_monitor.csv"
FIELDS = ("timestamp_ms", "cpu_percent", "mem_used_bytes", "mem_total_bytes", "mem_percent")


def _alive(pid: int) -> bool:
    """Whether ``pid`` is a running monitor: not gone, not a zombie, not a reused pid."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False
    proc = Path(f"/proc/{pid}")
    if not proc.is_dir():
        return True  # no procfs: trust the signal check
    try:
        state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        cmdline = (proc / "cmdline").read_bytes()
    except OSError:
        return False
    return state != "Z" and b"sys_monitor" in cmdline


def _read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def sample_loop(output_dir: Path, interval: float, max_seconds: float) -> None:
    import psutil

    stop = False

    def on_term(_signum, _frame):
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    psutil.cpu_percent(None)  # first call only primes the counters
    path = output_dir / CSV_FILE
    new = not path.exists()
    with open(path, "a", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        if new:
            writer.writerow(FIELDS)
        next_at = time.monotonic()
        end_at = next_at + max_seconds
        while not stop and time.monotonic() < end_at:
            next_at += interval
            delay = next_at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            if stop:
                break
            memory = psutil.virtual_memory()
            writer.writerow((int(time.time() * 1000), psutil.cpu_percent(None),
                             memory.total - memory.available, memory.total, memory.percent))
            handle.flush()


def start(output_dir: Path, interval: float, max_seconds: float) -> int:
    output_dir.mkdir(parents=True, exist_ok=True)
    pid_path = output_dir / PID_FILE
    pid = _read_pid(pid_path)
    if pid and _alive(pid):
        print(f"monitor already running (pid {pid})")
        return 0
    try:
        import psutil  # noqa: F401
    except ImportError:
        print("sys_monitor: psutil is not installed for this Python", file=sys.stderr)
        return 2
    if os.fork():  # parent: wait for the daemon to write its pid file
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            pid = _read_pid(pid_path)
            if pid and _alive(pid):
                print(f"monitor started (pid {pid})")
                return 0
            time.sleep(0.05)
        print("sys_monitor: the monitor did not start", file=sys.stderr)
        return 1
    os.setsid()
    if os.fork():
        os._exit(0)
    devnull = os.open(os.devnull, os.O_RDWR)
    log = os.open(output_dir / "sys_monitor.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(devnull, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    tmp = pid_path.with_suffix(".tmp")
    tmp.write_text(f"{os.getpid()}\n")
    os.replace(tmp, pid_path)
    try:
        sample_loop(output_dir, interval, max_seconds)
    finally:
        if _read_pid(pid_path) == os.getpid():
            pid_path.unlink(missing_ok=True)
    os._exit(0)


def stop(output_dir: Path, grace: float) -> int:
    pid_path = output_dir / PID_FILE
    pid = _read_pid(pid_path)
    if pid is None or not _alive(pid):
        pid_path.unlink(missing_ok=True)
        print("monitor not running")
        return 0
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if _alive(pid):
        os.kill(pid, signal.SIGKILL)
    pid_path.unlink(missing_ok=True)
    print(f"monitor stopped (pid {pid})")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("start", "stop"))
    parser.add_argument("--output-dir", required=True, type=Path)
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between samples")
    parser.add_argument("--max-seconds", type=float, default=86400.0,
                        help="stop by itself after this long")
    parser.add_argument("--grace", type=float, default=5.0, help="seconds before SIGKILL")
    args = parser.parse_args()
    if args.action == "start":
        return start(args.output_dir, args.interval, args.max_seconds)
    return stop(args.output_dir, args.grace)


if __name__ == "__main__":
    sys.exit(main())
