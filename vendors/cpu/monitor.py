"""Monitor plugin of the ``cpu`` vendor: the host's CPUs as one device, through psutil.

Interface (vendors/README.md): ``device_info() -> dict`` and ``sample() -> list[dict]``.
The device is every CPU package together: utilisation is the busy share of all logical cores
(%), memory is host RAM (bytes), power the RAPL package counters where readable (W, usually root
only), temperature the hottest package sensor (C), clock the mean current frequency (MHz).
"""

from __future__ import annotations

import os
import platform
import re
import time
from pathlib import Path

import psutil

POWERCAP = Path("/sys/class/powercap")

_last_times = None           # cpu_times() at the previous sample (our own, not psutil's global)
_last_energy = None          # (monotonic s, [energy_uj per package])
_rapl = None                 # [(energy_uj path, wrap)] once probed
_has_temps = None


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _rapl_files() -> list[tuple[Path, int]]:
    global _rapl
    if _rapl is None:
        _rapl = []
        for zone in sorted(POWERCAP.glob("*-rapl:*")):
            if re.fullmatch(r"[a-z]+-rapl:\d+", zone.name):
                try:
                    int((zone / "energy_uj").read_text())
                    _rapl.append((zone / "energy_uj",
                                  int((zone / "max_energy_range_uj").read_text())))
                except (OSError, ValueError):
                    continue
    return _rapl


def _power_w() -> float | None:
    """Package power since the previous call (W); None on the first call or without RAPL."""
    global _last_energy
    files = _rapl_files()
    if not files:
        return None
    try:
        now, values = time.monotonic(), [int(p.read_text()) for p, _ in files]
    except (OSError, ValueError):
        return None
    power = None
    if _last_energy is not None and now > _last_energy[0]:
        joules = sum(((new - old) % wrap if wrap else new - old) / 1e6
                     for (_, wrap), old, new in zip(files, _last_energy[1], values))
        power = joules / (now - _last_energy[0])
    _last_energy = (now, values)
    return power


def _temp_c() -> float | None:
    global _has_temps
    if _has_temps is False or not hasattr(psutil, "sensors_temperatures"):
        return None
    sensors = psutil.sensors_temperatures()
    readings = [t.current for name in ("coretemp", "k10temp", "zenpower", "cpu_thermal")
                for t in sensors.get(name, [])]
    _has_temps = bool(readings)
    return max(readings) if readings else None


def device_info() -> dict:
    """``{vendor: "cpu", devices: [{index: 0, name, memory_total_bytes, driver, cores}]}``."""
    global _last_times
    times = psutil.cpu_times()  # primes utilisation: the first sample covers one interval
    _last_times = (sum(times), times.idle + getattr(times, "iowait", 0.0))
    return {"vendor": "cpu", "devices": [{
        "index": 0, "name": _cpu_name(), "memory_total_bytes": psutil.virtual_memory().total,
        "driver": f"linux {platform.release()}", "cores": os.cpu_count()}]}


def sample() -> list[dict]:
    """One dict for the host CPUs: utilisation since the previous call (or ``device_info``;
    since boot when neither ran before)."""
    global _last_times
    times = psutil.cpu_times()
    total = sum(times)
    idle = times.idle + getattr(times, "iowait", 0.0)
    if _last_times is not None:
        old_total, old_idle = _last_times
        span = total - old_total
        util = 100.0 * (1.0 - (idle - old_idle) / span) if span > 0 else 0.0
    else:
        util = 100.0 * (1.0 - idle / total) if total > 0 else 0.0
    _last_times = (total, idle)
    memory = psutil.virtual_memory()
    freq = psutil.cpu_freq()
    return [{"index": 0, "util_percent": round(max(0.0, min(util, 100.0)), 2),
             "mem_used_bytes": memory.total - memory.available,
             "mem_total_bytes": memory.total, "power_w": _power_w(), "temp_c": _temp_c(),
             "clock_mhz": round(freq.current, 1) if freq else None}]
