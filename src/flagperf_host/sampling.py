"""The monitor's sampling: one row per stream and tick (system, per-core CPU, vendor devices),
and the CPU time of other work beside the round (``Bystanders``). Columns: ``sys_monitor``'s
docstring.
"""

from __future__ import annotations

import csv
import os
import time
from pathlib import Path
from typing import Any

from flagperf_host.process import now_ms

CSV_FILE = "sys_monitor.csv"
CORES_FILE = "cpu_cores.csv"
DEVICE_FILE = "device_monitor.csv"
FIELDS = ("timestamp_ms", "cpu_percent", "load1", "mem_used_bytes", "mem_total_bytes",
          "mem_percent", "disk_read_Bps", "disk_write_Bps", "net_recv_Bps", "net_sent_Bps",
          "host_power_w", "other_cpu_cores")
DEVICE_FIELDS = ("timestamp_ms", "index", "util_percent", "mem_used_bytes", "mem_total_bytes",
                 "power_w", "temp_c", "clock_mhz", "other_processes")


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
        stamp = now_ms()
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
