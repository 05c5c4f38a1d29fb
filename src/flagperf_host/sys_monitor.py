"""Hardware and system monitor for one host and one round: time-aligned CSV samples.

    flagperf_host.sys_monitor start --output-dir DIR [--interval 1.0] [--max-seconds S]
                                    [--vendor-plugin PATH] [--vendor-script PATH] [--host-power auto]
    flagperf_host.sys_monitor stop  --output-dir DIR [--grace 5] [--vendor-script PATH]

``start`` detaches a daemon that writes ``DIR/sys_monitor.pid`` and, every ``--interval`` seconds,
one row per stream, all rows of a tick carrying the same ``timestamp_ms`` (wall clock, epoch ms,
the clock of PerfLog ``time_ms``):

* ``sys_monitor.csv``: ``cpu_percent`` (all cores, % of total capacity), ``load1``,
  ``mem_used_bytes``, ``mem_total_bytes``, ``mem_percent``, ``disk_read_Bps``,
  ``disk_write_Bps``, ``net_recv_Bps``, ``net_sent_Bps`` (bytes/s since the previous sample, all
  disks and NICs), ``host_power_w`` (empty where unknown), ``other_cpu_cores`` (CPU seconds per
  second used by the processes that already ran when the monitor started: other work beside the
  round, as the round's case starts after its monitor);
* ``cpu_cores.csv``: ``cpu0`` .. ``cpuN-1``, % busy per logical core;
* ``device_monitor.csv`` (with ``--vendor-plugin``): one row per device: ``index``,
  ``util_percent``, ``mem_used_bytes``, ``mem_total_bytes``, ``power_w``, ``temp_c``,
  ``clock_mhz`` (empty where unknown), ``other_processes`` (how many of the processes on the
  device, where the plugin lists them, already ran when the monitor started).

Host power comes from RAPL energy counters (``/sys/class/powercap/*-rapl:N/energy_uj``, CPU
packages) or ``ipmitool dcmi power reading`` (whole host, read at most every 5 s, without blocking
the sampling); otherwise ``monitor.json`` says ``"host_power_source": "not available"``.

A vendor plugin is a Python file with ``device_info() -> dict`` and ``sample() -> list[dict]``
(``vendors/README.md``); a FlagPerf-style ``<vendor>_monitor.py`` is run unchanged with
``-o start|stop -l DIR``. ``monitor.json`` holds what was sampled and the lifecycle: ``status``
``running``, then ``stopped`` (by ``stop``), ``expired`` (``--max-seconds`` reached), or ``died``
(the process was gone at ``stop``, or it failed). ``start`` is idempotent; ``stop`` always leaves
no monitor behind and exits 0; the pid file lives in the run's and round's own folder.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from flagperf_host.power import host_power_reader
from flagperf_host.process import alive, detach, now_ms, read_pid_file, wait_until, write_json, write_pid_file
from flagperf_host.sampling import CORES_FILE, CSV_FILE, DEVICE_FILE, Sampler
from flagperf_host.vendor_plugin import load_plugin

PROG = "sys_monitor"

PID_FILE = "sys_monitor.pid"
INFO_FILE = "monitor.json"
LOG_FILE = "sys_monitor.log"


def read_info(output_dir: Path) -> dict[str, Any]:
    """``monitor.json`` of ``output_dir`` ({} when absent or unreadable)."""
    try:
        return json.loads((output_dir / INFO_FILE).read_text())
    except (OSError, ValueError):
        return {}


def write_info(output_dir: Path, info: dict[str, Any]) -> None:
    """Write ``monitor.json`` atomically (a reader never sees half of it)."""
    write_json(output_dir / INFO_FILE, info, indent=2)


def run_vendor_script(script: str, operation: str, output_dir: Path) -> dict[str, Any]:
    """Run a FlagPerf-style ``<vendor>_monitor.py -o OPERATION -l DIR``; its result as a dict."""
    try:
        done = subprocess.run([sys.executable, script, "-o", operation, "-l", str(output_dir)],
                              cwd=output_dir, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as err:
        return {"script": script, operation: "failed", "error": str(err)}
    result = {"script": script, operation: "ok" if done.returncode == 0 else "failed",
              "rc": done.returncode}
    if done.returncode != 0:
        result["error"] = (done.stderr or done.stdout).strip()[-500:]
    return result


def run_daemon(output_dir: Path, args: argparse.Namespace) -> str:
    """Sample until SIGTERM/SIGINT (``stopped``) or ``max_seconds`` (``expired``)."""
    stop = False

    def on_term(_signum, _frame):
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    source, power = host_power_reader(args.host_power)
    info: dict[str, Any] = {
        "status": "running", "pid": os.getpid(), "started_ms": now_ms(),
        "interval_s": args.interval, "max_seconds": args.max_seconds,
        "host_power_source": source, "streams": [CSV_FILE, CORES_FILE],
        "vendor_plugin": args.vendor_plugin or None, "device_info": None, "device_error": None,
    }
    plugin = None
    if args.vendor_plugin:
        try:
            plugin = load_plugin(args.vendor_plugin)
            info["device_info"] = plugin.device_info()
            info["streams"].append(DEVICE_FILE)
        except Exception as err:  # no library, no driver, no device: sample the host anyway
            plugin = None
            info["device_error"] = f"{type(err).__name__}: {err}"
            print(f"{PROG}: devices not available: {info['device_error']}", flush=True)
    # Before the vendor's own script starts: it is the monitor's, not other work.
    sampler = Sampler(output_dir, plugin, power, exclude={getattr(args, "caller", os.getpid())})
    if args.vendor_script and Path(args.vendor_script).is_file():
        info["vendor_script"] = run_vendor_script(args.vendor_script, "start", output_dir)
    # A first sample right away (after a short priming of the CPU counters), before the info
    # file that start waits for: whatever is launched after start returns is covered.
    time.sleep(min(args.interval, 0.1))
    sampler.tick()
    write_info(output_dir, info)
    status = "stopped"
    next_at = time.monotonic()
    end_at = next_at + args.max_seconds
    try:
        while not stop:
            next_at += args.interval
            now = time.monotonic()
            if next_at < now - args.interval:
                next_at = now  # woke far too late (host suspended): skip, do not burst
            if next_at > end_at:
                status = "expired"
                break
            if next_at > now:
                time.sleep(next_at - now)
            if stop:
                break
            sampler.tick()
        if stop:
            # A last sample at the stop: what ran until then is covered to its end.
            sampler.tick()
    except Exception as err:
        status = "died"
        info["detail"] = f"{type(err).__name__}: {err}"
        raise
    finally:
        sampler.close()
        info.update(status=status, ended_ms=now_ms(), device_errors=sampler.device_errors)
        if sampler.last_error:
            info["device_last_error"] = sampler.last_error
        write_info(output_dir, info)
    return status


def start(output_dir: Path, args: argparse.Namespace) -> int:
    output_dir.mkdir(parents=True, exist_ok=True)
    pid_path = output_dir / PID_FILE
    pid, started = read_pid_file(pid_path)
    if alive(pid, started):
        print(f"monitor already running (pid {pid})")
        return 0
    try:
        import psutil  # noqa: F401
    except ImportError:
        print(f"{PROG}: psutil is not installed for this Python", file=sys.stderr)
        return 2
    pid_path.unlink(missing_ok=True)
    # This process goes on to start the round's case (one exchange): not other work.
    args.caller = os.getpid()
    detach("sys_monitor", lambda: daemon(output_dir, args), log=output_dir / LOG_FILE)

    def up() -> bool:
        pid, started = read_pid_file(pid_path)
        return alive(pid, started) and read_info(output_dir).get("pid") == pid

    if wait_until(up, 30, poll=0.05):
        print(f"monitor started (pid {read_pid_file(pid_path)[0]})")
        return 0
    print(f"{PROG}: the monitor did not start (see {LOG_FILE})", file=sys.stderr)
    return 1


def daemon(output_dir: Path, args: argparse.Namespace) -> int:
    """The detached monitor: its pid file while it samples (``run_daemon``)."""
    pid_path = output_dir / PID_FILE
    write_pid_file(pid_path)
    try:
        run_daemon(output_dir, args)
    finally:
        if read_pid_file(pid_path)[0] == os.getpid():
            pid_path.unlink(missing_ok=True)
    return 0


def stop(output_dir: Path, args: argparse.Namespace) -> int:
    """Stop the monitor of ``output_dir``; record in monitor.json whether it had died."""
    pid_path = output_dir / PID_FILE
    pid, started = read_pid_file(pid_path)
    info = read_info(output_dir)
    if alive(pid, started):
        os.kill(pid, signal.SIGTERM)
        wait_until(lambda: not alive(pid, started), args.grace, poll=0.05)
        info = read_info(output_dir)
        if alive(pid, started):
            os.kill(pid, signal.SIGKILL)
            info.update(status="stopped", detail=f"killed after {args.grace} s grace")
        message = f"monitor stopped (pid {pid})"
    elif pid is not None or info.get("status") == "running":
        # A pid file (or a running status) without its process: it died and nobody saw it.
        pid = pid or info.get("pid")
        info.update(status="died", detail=f"pid {pid} was not running at stop")
        message = f"monitor had died (pid {pid})"
    elif info:
        message = f"monitor not running ({info.get('status')})"
    else:
        message = "monitor not running"
    pid_path.unlink(missing_ok=True)
    if args.vendor_script and Path(args.vendor_script).is_file() and output_dir.is_dir():
        info["vendor_script_stop"] = run_vendor_script(args.vendor_script, "stop", output_dir)
    if info:
        info["stopped_ms"] = now_ms()
        write_info(output_dir, info)
    print(message)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("start", "stop"))
    parser.add_argument("--output-dir", required=True, type=Path)
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between samples")
    parser.add_argument("--max-seconds", type=float, default=86400.0,
                        help="stop by itself after this long")
    parser.add_argument("--grace", type=float, default=5.0, help="seconds before SIGKILL")
    parser.add_argument("--vendor-plugin", default="",
                        help="vendor plugin file (device_info, sample); '' for none")
    parser.add_argument("--vendor-script", default="",
                        help="FlagPerf-style <vendor>_monitor.py run with -o start|stop -l DIR; "
                             "ignored when the file does not exist")
    parser.add_argument("--host-power", choices=("auto", "rapl", "ipmi", "none"), default="auto")
    args = parser.parse_args()
    if args.interval <= 0:
        parser.error("--interval must be positive")
    if args.action == "start":
        return start(args.output_dir, args)
    return stop(args.output_dir, args)


if __name__ == "__main__":
    sys.exit(main())
