#!/usr/bin/env python3
"""Hardware and system monitor for one host and one round: time-aligned CSV samples.

    sys_monitor.py start --output-dir DIR [--interval 1.0] [--max-seconds S]
                         [--vendor-plugin PATH] [--vendor-script PATH] [--host-power auto]
    sys_monitor.py stop  --output-dir DIR [--grace 5] [--vendor-script PATH]

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
import csv
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

# The name in messages: the script reaches the host on standard input (sys.argv[0] is "-").
PROG = "sys_monitor.py"

PID_FILE = "sys_monitor.pid"
CSV_FILE = "sys_monitor.csv"
CORES_FILE = "cpu_cores.csv"
DEVICE_FILE = "device_monitor.csv"
INFO_FILE = "monitor.json"
LOG_FILE = "sys_monitor.log"
FIELDS = ("timestamp_ms", "cpu_percent", "load1", "mem_used_bytes", "mem_total_bytes",
          "mem_percent", "disk_read_Bps", "disk_write_Bps", "net_recv_Bps", "net_sent_Bps",
          "host_power_w", "other_cpu_cores")
DEVICE_FIELDS = ("timestamp_ms", "index", "util_percent", "mem_used_bytes", "mem_total_bytes",
                 "power_w", "temp_c", "clock_mhz", "other_processes")
POWERCAP = Path("/sys/class/powercap")
IPMI_PERIOD_S = 5.0  # BMC readings are averages over seconds: reading faster only costs


def _name_process(name: str) -> None:
    """This process's name as ps -C, pgrep and psutil's name() show it (Linux; at most 15
    bytes). A daemon forked from a script run with others in one interpreter keeps that
    interpreter's command line; its name tells what it is."""
    try:
        with open("/proc/self/comm", "w", encoding="ascii") as handle:
            handle.write(name[:15])
    except OSError:
        pass


def _now_ms() -> int:
    return int(time.time() * 1000)


def _stat_fields(pid: int) -> list[str] | None:
    """``/proc/<pid>/stat`` after the command name (state first, start time at index 19:
    field 22, clock ticks after boot; proc(5)); None when unreadable."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _alive(pid: int, started: str | None = None) -> bool:
    """Whether ``pid`` is a running monitor: not gone, not a zombie, and the process the pid
    file names, not a reused pid (same start time as recorded there, when it was)."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    if not Path(f"/proc/{pid}").is_dir():
        return True  # no procfs: trust the signal check
    fields = _stat_fields(pid)
    if fields is None or len(fields) < 20:
        return False
    return fields[0] != "Z" and (started is None or fields[19] == started)


def _read_pid(path: Path) -> tuple[int | None, str | None]:
    """The pid file's ``PID START_TIME`` (start time None when not recorded)."""
    try:
        words = path.read_text().split()
        return int(words[0]), (words[1] if len(words) > 1 else None)
    except (OSError, ValueError, IndexError):
        return None, None


def _write_pid(path: Path) -> None:
    """Record this process and its start time: a later pid of the same number is not it. (The
    command line cannot tell: the script reaches the host on standard input, ``python3 -``.)"""
    fields = _stat_fields(os.getpid())
    tmp = path.with_suffix(".tmp")
    tmp.write_text(f"{os.getpid()} {fields[19] if fields and len(fields) > 19 else ''}\n")
    os.replace(tmp, path)


def read_info(output_dir: Path) -> dict[str, Any]:
    """``monitor.json`` of ``output_dir`` ({} when absent or unreadable)."""
    try:
        return json.loads((output_dir / INFO_FILE).read_text())
    except (OSError, ValueError):
        return {}


def write_info(output_dir: Path, info: dict[str, Any]) -> None:
    """Write ``monitor.json`` atomically (a reader never sees half of it)."""
    tmp = output_dir / f".{INFO_FILE}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(info, indent=2, default=str) + "\n")
    os.replace(tmp, output_dir / INFO_FILE)


class RaplPower:
    """CPU package power (W) from RAPL energy counters; ``None`` until two readings exist."""

    def __init__(self, files: list[tuple[Path, int]]) -> None:
        self.files = files  # (energy_uj path, max_energy_range_uj)
        self.last: tuple[float, list[int]] | None = None

    @classmethod
    def probe(cls, root: Path = POWERCAP) -> "RaplPower | None":
        """Top-level RAPL zones (packages, not their sub-zones) whose counter is readable."""
        files = []
        for zone in sorted(root.glob("*-rapl:*")):
            if not re.fullmatch(r"[a-z]+-rapl:\d+", zone.name):
                continue
            try:
                int((zone / "energy_uj").read_text())
                files.append((zone / "energy_uj", int((zone / "max_energy_range_uj").read_text())))
            except (OSError, ValueError):
                continue  # root-only on most kernels since 2020
        return cls(files) if files else None

    def read(self) -> float | None:
        now = time.monotonic()
        values = [int(path.read_text()) for path, _ in self.files]
        power = None
        if self.last is not None and now > self.last[0]:
            joules = 0.0
            for (_, wrap), old, new in zip(self.files, self.last[1], values):
                joules += ((new - old) % wrap if wrap else new - old) / 1e6
            power = joules / (now - self.last[0])
        self.last = (now, values)
        return power


class IpmiPower:
    """Whole-host power (W) from ``ipmitool dcmi power reading``, read in the background."""

    PATTERN = re.compile(r"Instantaneous power reading:\s*([\d.]+)\s*Watts")

    def __init__(self, command: list[str]) -> None:
        self.command = command
        self.proc: subprocess.Popen | None = None
        self.next_at = 0.0

    @classmethod
    def parse(cls, text: str) -> float | None:
        """Watts from ipmitool's output, or None."""
        match = cls.PATTERN.search(text)
        return float(match.group(1)) if match else None

    @classmethod
    def probe(cls) -> "IpmiPower | None":
        tool = shutil.which("ipmitool")
        if not tool:
            return None
        command = [tool, "dcmi", "power", "reading"]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return cls(command) if done.returncode == 0 and cls.parse(done.stdout) else None

    def read(self) -> float | None:
        """The reading finished since the last call (else None); starts the next when due."""
        value = None
        if self.proc is not None and self.proc.poll() is not None:
            value = self.parse(self.proc.stdout.read() if self.proc.stdout else "")
            self.proc = None
        if self.proc is None and time.monotonic() >= self.next_at:
            self.next_at = time.monotonic() + IPMI_PERIOD_S
            self.proc = subprocess.Popen(self.command, stdout=subprocess.PIPE,
                                         stderr=subprocess.DEVNULL, text=True)
        return value


def host_power_reader(choice: str) -> tuple[str, Any]:
    """``(source, reader)`` for ``choice`` (auto|rapl|ipmi|none); source 'not available'
    and reader None when nothing can be read."""
    if choice in ("auto", "rapl"):
        rapl = RaplPower.probe()
        if rapl:
            return "rapl", rapl
    if choice in ("auto", "ipmi"):
        ipmi = IpmiPower.probe()
        if ipmi:
            return "ipmi", ipmi
    return "not available", None


def load_plugin(path: str):
    """The vendor plugin module at ``path`` (a file with ``device_info`` and ``sample``).

    Raises:
        RuntimeError: the file is missing or lacks the interface; whatever importing it raises.
    """
    spec = importlib.util.spec_from_file_location("flagperf_vendor_monitor", path)
    if spec is None or spec.loader is None or not Path(path).is_file():
        raise RuntimeError(f"no vendor plugin at {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for name in ("device_info", "sample"):
        if not callable(getattr(module, name, None)):
            raise RuntimeError(f"{path} has no {name}()")
    return module


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


def _fmt(value: Any) -> Any:
    return "" if value is None else (round(value, 3) if isinstance(value, float) else value)


class Bystanders:
    """The processes that ran before the round's case: user processes alive when this is made
    (kernel threads, this process and ``exclude`` left out), whose CPU time since then is other
    work beside the round. Processes started later are not counted (the case's among them, and
    other work's new children: the load tells of those)."""

    def __init__(self, psutil, exclude: set[int]) -> None:
        self.psutil = psutil
        self.procs: dict[int, Any] = {}
        self.times: dict[int, float] = {}
        skip = exclude | {os.getpid()}
        for proc in psutil.process_iter(["cmdline"]):
            if proc.pid in skip or not proc.info["cmdline"]:     # kernel threads have none
                continue
            used = self._used(proc)
            if used is not None:
                self.procs[proc.pid], self.times[proc.pid] = proc, used
        self.last = time.monotonic()

    def _used(self, proc) -> float | None:
        """CPU seconds of ``proc`` itself (a child's reach its parent only when it ends, its
        whole life's at once), None once it is gone."""
        try:
            times = proc.cpu_times()
        except (self.psutil.NoSuchProcess, self.psutil.AccessDenied, self.psutil.ZombieProcess):
            return None
        return times.user + times.system

    def cores(self) -> float:
        """CPU seconds per second they used since the last call (or since they were listed)."""
        now, used = time.monotonic(), 0.0
        for pid, proc in list(self.procs.items()):
            total = self._used(proc)
            if total is None or total < self.times[pid]:     # gone, or its pid taken again
                del self.procs[pid], self.times[pid]
                continue
            used += total - self.times[pid]
            self.times[pid] = total
        elapsed, self.last = max(now - self.last, 1e-6), now
        return used / elapsed


class Sampler:
    """One tick of every stream: system, per-core CPU, host power, vendor devices."""

    def __init__(self, output_dir: Path, plugin, power, exclude: set[int] = frozenset()) -> None:
        import psutil

        self.psutil = psutil
        self.plugin = plugin
        self.power = power
        self.bystanders = Bystanders(psutil, set(exclude))
        self.device_errors = 0
        self.last_error = ""
        psutil.cpu_percent(None, percpu=True)  # the first call only primes the counters
        self.last_io = (time.monotonic(), self._io())
        self.cores = psutil.cpu_count() or 1
        self.files = []
        self.system = self._open(output_dir / CSV_FILE, FIELDS)
        self.per_core = self._open(output_dir / CORES_FILE,
                                   ["timestamp_ms"] + [f"cpu{i}" for i in range(self.cores)])
        self.devices = self._open(output_dir / DEVICE_FILE, DEVICE_FIELDS) if plugin else None

    def _open(self, path: Path, header) -> Any:
        new = not path.exists()
        handle = open(path, "a", newline="", encoding="utf-8")
        self.files.append(handle)
        writer = csv.writer(handle)
        if new:
            writer.writerow(header)
        return writer

    def _io(self) -> tuple[int, int, int, int]:
        disk = self.psutil.disk_io_counters()
        net = self.psutil.net_io_counters()
        return (disk.read_bytes if disk else 0, disk.write_bytes if disk else 0,
                net.bytes_recv if net else 0, net.bytes_sent if net else 0)

    def tick(self) -> None:
        stamp = _now_ms()
        cores = self.psutil.cpu_percent(None, percpu=True)
        memory = self.psutil.virtual_memory()
        now, io = time.monotonic(), self._io()
        elapsed = max(now - self.last_io[0], 1e-6)
        rates = [max(new - old, 0) / elapsed for new, old in zip(io, self.last_io[1])]
        self.last_io = (now, io)
        power = None
        if self.power is not None:
            try:
                power = self.power.read()
            except (OSError, ValueError):
                power = None
        self.system.writerow([stamp, _fmt(sum(cores) / max(len(cores), 1)),
                              _fmt(os.getloadavg()[0]), memory.total - memory.available,
                              memory.total, memory.percent, *(_fmt(r) for r in rates),
                              _fmt(power), _fmt(self.bystanders.cores())])
        self.per_core.writerow([stamp, *cores[:self.cores]])
        if self.devices is not None:
            try:
                rows = self.plugin.sample()
            except Exception as err:  # a plugin's failure must not end host sampling
                self.device_errors += 1
                self.last_error = f"{type(err).__name__}: {err}"
                rows = []
            for row in rows:
                pids = row.get("pids")      # those still running this tick (cores() above)
                row = {**row, "other_processes": None if pids is None
                       else len(self.bystanders.procs.keys() & set(pids))}
                self.devices.writerow([stamp] + [_fmt(row.get(f)) for f in DEVICE_FIELDS[1:]])
        for handle in self.files:
            handle.flush()

    def close(self) -> None:
        for handle in self.files:
            handle.close()


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
        "status": "running", "pid": os.getpid(), "started_ms": _now_ms(),
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
            print(f"sys_monitor: devices not available: {info['device_error']}", flush=True)
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
        info.update(status=status, ended_ms=_now_ms(), device_errors=sampler.device_errors)
        if sampler.last_error:
            info["device_last_error"] = sampler.last_error
        write_info(output_dir, info)
    return status


def start(output_dir: Path, args: argparse.Namespace) -> int:
    output_dir.mkdir(parents=True, exist_ok=True)
    pid_path = output_dir / PID_FILE
    pid, started = _read_pid(pid_path)
    if pid and _alive(pid, started):
        print(f"monitor already running (pid {pid})")
        return 0
    try:
        import psutil  # noqa: F401
    except ImportError:
        print("sys_monitor: psutil is not installed for this Python", file=sys.stderr)
        return 2
    pid_path.unlink(missing_ok=True)
    # This process goes on to start the round's case (one exchange): not other work.
    args.caller = os.getpid()
    if os.fork():  # parent: wait for the daemon to write its pid file
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            pid, started = _read_pid(pid_path)
            if pid and _alive(pid, started) and read_info(output_dir).get("pid") == pid:
                print(f"monitor started (pid {pid})")
                return 0
            time.sleep(0.05)
        print("sys_monitor: the monitor did not start (see sys_monitor.log)", file=sys.stderr)
        return 1
    os.setsid()
    if os.fork():
        os._exit(0)
    _name_process("sys_monitor")
    devnull = os.open(os.devnull, os.O_RDWR)
    log = os.open(output_dir / LOG_FILE, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(devnull, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    _write_pid(pid_path)
    code = 0
    try:
        run_daemon(output_dir, args)
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        if _read_pid(pid_path)[0] == os.getpid():
            pid_path.unlink(missing_ok=True)
    os._exit(code)


def stop(output_dir: Path, args: argparse.Namespace) -> int:
    """Stop the monitor of ``output_dir``; record in monitor.json whether it had died."""
    pid_path = output_dir / PID_FILE
    pid, started = _read_pid(pid_path)
    info = read_info(output_dir)
    if pid is not None and _alive(pid, started):
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + args.grace
        while _alive(pid, started) and time.monotonic() < deadline:
            time.sleep(0.05)
        info = read_info(output_dir)
        if _alive(pid, started):
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
        info["stopped_ms"] = _now_ms()
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
