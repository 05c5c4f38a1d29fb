"""Round summaries of the hardware and system monitors (``src/flagperf_host/sys_monitor.py``).

A node dir holds the monitor's streams, each a CSV whose ``timestamp_ms`` is wall-clock epoch ms
(the clock of PerfLog ``time_ms``): ``sys_monitor.csv`` (host), ``cpu_cores.csv`` and
``device_monitor.csv`` (one row per device per sample), plus ``monitor.json`` (what was sampled,
and the lifecycle status the monitor and its ``stop`` wrote).

Figures are taken over the round's monitoring window: the case contract's ``window`` events
(its suite's by default: TRAIN_START..TRAIN_END for training, INFERENCE_START..INFERENCE_END for
inference, BENCHMARK_START..BENCHMARK_END for base), the earliest start and the latest end over
all ranks' PerfLog; where the round never reached its end event, over the samples it has
(``window.source: "round"``), and no energy per unit is given.

Energy (J) is the trapezoid integral of power samples over the window, power interpolated
linearly at its two ends; energy per unit of work divides by the contract's throughput count
(FINISHED of rank 0, all ranks; ``num_trained_samples`` by default)::

    E = sum_i (P_i + P_{i+1}) / 2 * (t_{i+1} - t_i)            t in s, P in W
    energy_per_<unit>_j = E_devices / (FINISHED[count] / scale)

``<unit>`` is the throughput unit in the singular (sample, sequence, image, token, query,
mel_frame, audio_sample, byte; ``tflop`` with scale 1e12 for FLOP counts), e.g.
``energy_per_image_j``; ``overall.energy_unit`` names it. ``E_devices`` sums every device of
every node; the host figure (``host_energy_per_<unit>_j``, RAPL or IPMI) is kept apart, since
for the ``cpu`` vendor both count the same packages. Either is ``None`` where a device or host lacks power samples that
cover the window.
"""

from __future__ import annotations

import csv
import json
import statistics
from pathlib import Path
from typing import Any, Iterable

from flagperf_ansible.results.layout import SYS_INFO

SYSTEM_FILE = "sys_monitor.csv"
DEVICE_FILE = "device_monitor.csv"
INFO_FILE = "monitor.json"
#: A stream that ends this long (or 5 intervals, if longer) before the monitor was stopped, or
#: the monitoring window ended, belonged to a monitor that stopped sampling: it is reported as died.
STALE_MS = 5000
#: A node is busy when its mean 1-minute load over the monitoring window exceeds its logical
#: cores by this ratio: the case's own threads fill the cores, more runnable tasks are someone
#: else's work competing with the measurement.
BUSY_LOAD_RATIO = 1.25
#: A node is busy, too, when processes that ran before the round (other work: the case starts
#: after its monitor) used more than this share of its logical cores over the window.
BUSY_OTHER_SHARE = 0.25

Row = dict[str, float | None]


def read_stream(path: Path) -> list[Row]:
    """Rows of a monitor CSV as floats (empty cells and unparsable ones are ``None``), sorted by
    ``timestamp_ms``; ``[]`` when the file is missing. A torn last line (a killed writer) is
    dropped."""
    if not path.is_file():
        return []
    rows: list[Row] = []
    with open(path, newline="", encoding="utf-8", errors="replace") as handle:
        for record in csv.DictReader(handle):
            row: Row = {}
            for key, text in record.items():
                try:
                    row[key] = float(text) if text not in (None, "") else None
                except ValueError:
                    row[key] = None
            if row.get("timestamp_ms") is not None:
                rows.append(row)
    return sorted(rows, key=lambda r: r["timestamp_ms"])


#: The window of a round whose contract names none (FlagPerf's folders: training).
DEFAULT_WINDOW = ("TRAIN_START", "TRAIN_END")
#: Throughput units (case_schema.THROUGHPUT_UNITS) as energy is given per one of them:
#: ``(name in the singular, units per named unit)``.
ENERGY_UNITS = {"samples": ("sample", 1.0), "sequences": ("sequence", 1.0),
                "tokens": ("token", 1.0), "images": ("image", 1.0),
                "mel_frames": ("mel_frame", 1.0), "audio_samples": ("audio_sample", 1.0),
                "queries": ("query", 1.0),
                "bytes": ("byte", 1.0), "flop": ("tflop", 1e12)}
DEFAULT_THROUGHPUT = {"unit": "samples", "count": "num_trained_samples"}


def event_window(events_by_rank: Iterable[list[dict[str, Any]]],
                 window: tuple[str, str] | list[str] = DEFAULT_WINDOW
                 ) -> tuple[int | None, int | None]:
    """``(start_ms, end_ms)``: the earliest ``window[0]`` and latest ``window[1]`` event
    ``time_ms`` of the ranks' PerfLog events (each item one rank's event list); ``None`` for
    a missing one."""
    start_event, end_event = window
    starts, ends = [], []
    for events in events_by_rank:
        for event in events:
            stamp = (event.get("metadata") or {}).get("time_ms")
            if not isinstance(stamp, (int, float)):
                continue
            if event.get("event") == start_event:
                starts.append(int(stamp))
            if event.get("event") == end_event:
                ends.append(int(stamp))
    return (min(starts) if starts else None, max(ends) if ends else None)


def _interpolate(points: list[tuple[float, float]], t: float) -> float:
    if t <= points[0][0]:
        return points[0][1]
    if t >= points[-1][0]:
        return points[-1][1]
    for (t0, p0), (t1, p1) in zip(points, points[1:]):
        if t0 <= t <= t1:
            return p0 if t1 == t0 else p0 + (p1 - p0) * (t - t0) / (t1 - t0)
    return points[-1][1]


def integrate_energy(points: list[tuple[float, float]], start_ms: float, end_ms: float,
                     tolerance_ms: float) -> float | None:
    """Energy in J over ``start_ms..end_ms`` from ``(time_ms, power_w)`` samples (trapezoid rule,
    power interpolated linearly at both ends).

    Returns ``None`` when there are no samples, the window is empty, or the samples start later
    or end earlier than the window by more than ``tolerance_ms``.
    """
    points = sorted(points)
    if not points or end_ms <= start_ms:
        return None
    if points[0][0] > start_ms + tolerance_ms or points[-1][0] < end_ms - tolerance_ms:
        return None
    inside = [(start_ms, _interpolate(points, start_ms))]
    inside += [p for p in points if start_ms < p[0] < end_ms]
    inside.append((end_ms, _interpolate(points, end_ms)))
    return sum((p0 + p1) / 2.0 * (t1 - t0) / 1000.0
               for (t0, p0), (t1, p1) in zip(inside, inside[1:]))


def _in_window(rows: list[Row], start: float, end: float, interval_ms: float) -> list[Row]:
    """Rows within the window; for a window shorter than the interval, the nearest rows."""
    chosen = [r for r in rows if start <= r["timestamp_ms"] <= end]
    if not chosen:
        chosen = [r for r in rows if start - interval_ms <= r["timestamp_ms"] <= end + interval_ms]
    return chosen


def _values(rows: list[Row], key: str) -> list[float]:
    return [r[key] for r in rows if r.get(key) is not None]


def _mean(values: list[float]) -> float | None:
    return round(statistics.fmean(values), 3) if values else None


def _max(values: list[float]) -> float | None:
    return max(values) if values else None


def _bytes(values: list[float]) -> int | None:
    return int(max(values)) if values else None


def _status(info: dict[str, Any], rows: list[Row], interval_ms: float,
            reference_end: float | None) -> tuple[str, str]:
    """``(status, detail)`` of one node's monitor: ok, died, not stopped or missing."""
    state = info.get("status")
    if not info and not rows:
        return "missing", "no monitor files"
    if state == "died":
        return "died", info.get("detail") or "the monitor died"
    if state == "expired":
        return "died", f"ended by its max-seconds limit ({info.get('max_seconds')} s) before stop"
    if not rows:
        return "died", "no samples"
    if reference_end is not None:
        gap = reference_end - rows[-1]["timestamp_ms"]
        if gap > max(STALE_MS, 5 * interval_ms):
            return "died", f"samples end {gap / 1000:.1f} s before the round did"
    if state == "running":
        return "not stopped", "monitor.json still says running: stop never ran"
    return "ok", info.get("detail", "")


def summarize_node(node_dir: Path, start_ms: float | None, end_ms: float | None,
                   round_end_ms: float | None = None) -> dict[str, Any]:
    """Monitor summary of one node dir over ``start_ms..end_ms`` (None: all samples).

    Returns a dict: ``status`` (ok|died|not stopped|missing), ``detail``, ``samples``,
    ``first_ms``, ``last_ms``, ``covers_train`` (samples span the monitoring window to within
    one interval; named before suites, it means the window of any suite),
    ``system`` (cpu % mean/max, peak memory bytes, load mean/max, the mean CPU cores used by
    processes that ran before the round), ``busy`` (``busy_host``: why the node counts as busy,
    or ``""``), ``host_power`` (source, mean W, energy J, or ``"not available"``) and
    ``devices`` (per device and together: utilisation % mean/max, peak memory bytes, mean power
    W, energy J, max temperature C, mean clock MHz; per device the most processes that ran
    before the round seen on it at once).
    """
    info: dict[str, Any] = {}
    if (node_dir / INFO_FILE).is_file():
        try:
            info = json.loads((node_dir / INFO_FILE).read_text())
        except ValueError:
            info = {}
    system = read_stream(node_dir / SYSTEM_FILE)
    devices = read_stream(node_dir / DEVICE_FILE)
    interval_ms = float(info.get("interval_s") or 1.0) * 1000.0
    reference_end = info.get("stopped_ms") or end_ms or round_end_ms
    status, detail = _status(info, system, interval_ms, reference_end)
    summary: dict[str, Any] = {"status": status, "detail": detail,
                               "interval_s": interval_ms / 1000.0, "samples": len(system),
                               "first_ms": int(system[0]["timestamp_ms"]) if system else None,
                               "last_ms": int(system[-1]["timestamp_ms"]) if system else None}
    if not system:
        return summary
    start = start_ms if start_ms is not None else system[0]["timestamp_ms"]
    end = end_ms if end_ms is not None else system[-1]["timestamp_ms"]
    slack = interval_ms + 250  # a sample lands within one interval of any instant
    summary["covers_train"] = bool(system[0]["timestamp_ms"] <= start + slack
                                   and system[-1]["timestamp_ms"] >= end - slack)
    window = _in_window(system, start, end, interval_ms)
    summary["system"] = {
        "cpu_percent_mean": _mean(_values(window, "cpu_percent")),
        "cpu_percent_max": _max(_values(window, "cpu_percent")),
        "mem_used_peak_bytes": _bytes(_values(window, "mem_used_bytes")),
        "mem_total_bytes": _bytes(_values(window, "mem_total_bytes")),
        "load1_mean": _mean(_values(window, "load1")),
        "load1_max": _max(_values(window, "load1")),
        "net_recv_Bps_mean": _mean(_values(window, "net_recv_Bps")),
        "net_sent_Bps_mean": _mean(_values(window, "net_sent_Bps")),
        "other_cpu_cores_mean": _mean(_values(window, "other_cpu_cores")),
    }
    source = info.get("host_power_source", "not available")
    power = [(r["timestamp_ms"], r["host_power_w"]) for r in system
             if r.get("host_power_w") is not None]
    if power:
        spacing = max((b[0] - a[0] for a, b in zip(power, power[1:])), default=interval_ms)
        summary["host_power"] = {
            "source": source,
            "power_w_mean": _mean(_values(window, "host_power_w")),
            "energy_j": integrate_energy(power, start, end, max(2 * spacing, 2 * interval_ms)),
        }
    else:
        summary["host_power"] = "not available"
    summary["devices"] = _summarize_devices(info, devices, start, end, interval_ms)
    per_device = summary["devices"].get("per_device", []) \
        if isinstance(summary["devices"], dict) else []
    others = _max(_values(per_device, "other_processes_max"))
    summary["busy"] = busy_host(summary["system"]["load1_mean"], _logical_cores(node_dir),
                                summary["system"]["other_cpu_cores_mean"],
                                int(others) if others is not None else None)
    return summary


def _summarize_devices(info: dict[str, Any], rows: list[Row], start: float, end: float,
                       interval_ms: float) -> dict[str, Any] | str:
    if not rows:
        error = info.get("device_error")
        return {"status": "not available", "error": error} if error else "not available"
    names = {d.get("index"): d.get("name")
             for d in (info.get("device_info") or {}).get("devices", [])}
    per_device = []
    for index in sorted({int(r["index"]) for r in rows if r.get("index") is not None}):
        own = [r for r in rows if r.get("index") == index]
        window = _in_window(own, start, end, interval_ms)
        power = [(r["timestamp_ms"], r["power_w"]) for r in own if r.get("power_w") is not None]
        per_device.append({
            "index": index, "name": names.get(index),
            "util_percent_mean": _mean(_values(window, "util_percent")),
            "util_percent_max": _max(_values(window, "util_percent")),
            "mem_used_peak_bytes": _bytes(_values(window, "mem_used_bytes")),
            "mem_total_bytes": _bytes(_values(window, "mem_total_bytes")),
            "power_w_mean": _mean(_values(window, "power_w")),
            "energy_j": integrate_energy(power, start, end, 2 * interval_ms),
            "temp_c_max": _max(_values(window, "temp_c")),
            "clock_mhz_mean": _mean(_values(window, "clock_mhz")),
            "other_processes_max": _max(_values(window, "other_processes")),
        })
    window_rows = _in_window(rows, start, end, interval_ms)
    powers = [d["power_w_mean"] for d in per_device]
    energies = [d["energy_j"] for d in per_device]
    return {
        "vendor": (info.get("device_info") or {}).get("vendor"),
        "count": len(per_device),
        "util_percent_mean": _mean(_values(window_rows, "util_percent")),
        "util_percent_max": _max(_values(window_rows, "util_percent")),
        "mem_used_peak_bytes": _bytes([d["mem_used_peak_bytes"] for d in per_device
                                     if d["mem_used_peak_bytes"] is not None]),
        "power_w_mean": round(sum(powers), 3) if None not in powers else None,
        "energy_j": sum(energies) if None not in energies else None,
        "per_device": per_device,
    }


_STATUS_ORDER = ("died", "missing", "not stopped", "ok")


def _logical_cores(node_dir: Path) -> int | None:
    try:
        cores = json.loads((node_dir / SYS_INFO).read_text())["cpu"]["logical_cores"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return cores if isinstance(cores, int) and cores > 0 else None


def busy_host(load1_mean: float | None, cores: int | None, other_cores: float | None = None,
              other_device_processes: int | None = None) -> str:
    """Why a node's figures were measured beside other work, ``""`` when they were not:
    ``"load 4.6 on 2 cores"`` (the window's mean load above ``BUSY_LOAD_RATIO`` x the cores),
    ``"other processes used 0.8 of 2 cores"`` (``other_cores``, the window's mean CPU seconds
    per second of the processes that ran before the round, above ``BUSY_OTHER_SHARE`` of the
    cores), ``"1 other process on its devices"`` (``other_device_processes``, the most seen at
    once), joined by ", "."""
    plural = "s" if cores and cores > 1 else ""
    reasons = []
    if load1_mean is not None and cores and load1_mean > BUSY_LOAD_RATIO * cores:
        reasons.append(f"load {load1_mean:.3g} on {cores} core{plural}")
    if other_cores is not None and cores and other_cores > BUSY_OTHER_SHARE * cores:
        reasons.append(f"other processes used {other_cores:.2g} of {cores} core{plural}")
    if other_device_processes:
        reasons.append(f"{other_device_processes} other process"
                       f"{'es' if other_device_processes > 1 else ''} on its devices")
    return ", ".join(reasons)


def summarize_round(round_dir: Path, node_dirs: list[str],
                    events_by_rank: list[list[dict[str, Any]]],
                    finished: dict[str, Any] | None,
                    round_end_ms: float | None = None,
                    window: tuple[str, str] | list[str] | None = None,
                    throughput: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ``monitor`` section of round.json.

    Args:
        round_dir: ``<run_dir>/<case_id>/round<k>``.
        node_dirs: names of its ``<host>_noderank<i>`` folders, in noderank order.
        events_by_rank: each rank's PerfLog events (for the monitoring window).
        finished: rank 0's FINISHED values (the unit count), or None.
        round_end_ms: when the round ended (the staleness reference without a stop time).
        window: the contract's ``[start_event, end_event]`` (default TRAIN_START, TRAIN_END).
        throughput: the contract's ``throughput``: ``unit`` (e.g. ``images``) and ``count``
            (the FINISHED key counting those units; default samples, ``num_trained_samples``).

    Returns:
        ``{status, window: {start_ms, end_ms, source, events}, nodes: {dir: node summary},
        overall}``; ``status`` is the worst node status (died > missing > not stopped > ok) and
        ``overall`` combines the nodes: utilisation mean/max over every device, peak device
        memory, mean power and energy summed over devices (and apart, over hosts), the unit
        count under its FINISHED key, ``energy_unit`` and J per that unit
        (``energy_per_<unit>_j``, ``host_energy_per_<unit>_j``), and ``busy_hosts``: the
        nodes measured beside other work (``busy_host``).
    """
    events = tuple(window or DEFAULT_WINDOW)
    throughput = {**DEFAULT_THROUGHPUT, **(throughput or {})}
    unit, scale = ENERGY_UNITS.get(str(throughput["unit"]), (str(throughput["unit"]), 1.0))
    count_key = str(throughput["count"])
    start, end = event_window(events_by_rank, events)
    source = "perflog" if start is not None and end is not None else "round"
    nodes = {name: summarize_node(round_dir / name, start, end if source == "perflog" else None,
                                  round_end_ms)
             for name in node_dirs}
    statuses = [n["status"] for n in nodes.values()] or ["missing"]
    status = min(statuses, key=_STATUS_ORDER.index)
    device_sets = [n["devices"] for n in nodes.values() if isinstance(n.get("devices"), dict)
                   and "per_device" in n["devices"]]
    devices = [d for s in device_sets for d in s["per_device"]]
    hosts = [n.get("host_power") for n in nodes.values()]
    count = (finished or {}).get(count_key)
    per_unit = (source == "perflog" and isinstance(count, (int, float))
                and not isinstance(count, bool) and count > 0)
    units = count / scale if per_unit else None

    def total(values: list[float | None]) -> float | None:
        return round(sum(values), 3) if values and None not in values else None

    device_energy = total([s["energy_j"] for s in device_sets]) if device_sets else None
    host_energy = (total([h["energy_j"] for h in hosts]) if hosts and
                   all(isinstance(h, dict) for h in hosts) else None)
    util_means = [d["util_percent_mean"] for d in devices if d["util_percent_mean"] is not None]
    overall = {
        "devices": len(devices),
        "device_util_percent_mean": _mean(util_means),
        "device_util_percent_max": _max([d["util_percent_max"] for d in devices
                                         if d["util_percent_max"] is not None]),
        "device_mem_used_peak_bytes": _bytes([d["mem_used_peak_bytes"] for d in devices
                                            if d["mem_used_peak_bytes"] is not None]),
        "device_power_w_mean": total([s["power_w_mean"] for s in device_sets])
        if device_sets else None,
        "device_energy_j": device_energy,
        "energy_unit": unit,
        f"energy_per_{unit}_j": device_energy / units
        if units and device_energy is not None else None,
        "host_power": "available" if any(isinstance(h, dict) for h in hosts)
        else "not available",
        "host_energy_j": host_energy,
        f"host_energy_per_{unit}_j": host_energy / units
        if units and host_energy is not None else None,
        "cpu_percent_mean": _mean([n["system"]["cpu_percent_mean"] for n in nodes.values()
                                   if n.get("system", {}).get("cpu_percent_mean") is not None]),
        "cpu_percent_max": _max([n["system"]["cpu_percent_max"] for n in nodes.values()
                                 if n.get("system", {}).get("cpu_percent_max") is not None]),
        "mem_used_peak_bytes": _bytes([n["system"]["mem_used_peak_bytes"] for n in nodes.values()
                                     if n.get("system", {}).get("mem_used_peak_bytes")
                                     is not None]),
        count_key: count,
        # Nodes measured beside other work: "<node>: load 4.6 on 2 cores".
        "busy_hosts": [f"{name}: {n['busy']}" for name, n in nodes.items() if n.get("busy")],
    }
    return {"status": status,
            "window": {"start_ms": start, "end_ms": end, "source": source,
                       "events": list(events)},
            "nodes": nodes, "overall": overall}
