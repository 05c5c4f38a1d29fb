"""Monitor plugin of the ``nvidia`` vendor: every GPU of the host through NVML (nvidia-ml-py).

Interface (vendors/README.md): ``device_info() -> dict`` and ``sample() -> list[dict]``.
NVML units are converted: power mW -> W, memory bytes as is, SM clock MHz, GPU temperature C,
utilisation % of the last sample period (NVML's, 1/6 s to 1 s by product). A figure the device
does not support (``NVMLError_NotSupported`` and the like) is ``None``, never an error.

``pynvml`` is optional (``pip install 'flagperf-ansible[nvidia]'``); without it, or without a
driver, ``device_info`` raises ``RuntimeError`` and the monitor samples the host only.
"""

from __future__ import annotations

try:
    import pynvml
except ImportError:  # a CPU host: the plugin loads, device_info says why it cannot work
    pynvml = None

_handles: list | None = None


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _handles_or_raise() -> list:
    """NVML device handles, initialising NVML once.

    Raises:
        RuntimeError: pynvml is missing, NVML cannot initialise (no driver) or sees no GPU.
    """
    global _handles
    if _handles is not None:
        return _handles
    if pynvml is None:
        raise RuntimeError("nvidia-ml-py (pynvml) is not installed")
    try:
        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
    except pynvml.NVMLError as err:
        raise RuntimeError(f"NVML: {err}") from None
    if not handles:
        raise RuntimeError("NVML sees no GPU")
    _handles = handles
    return handles


def _optional(call, *args):
    """``call(*args)``, or None when the device cannot tell (not supported, no permission)."""
    try:
        return call(*args)
    except pynvml.NVMLError:
        return None


def device_info() -> dict:
    """``{vendor: "nvidia", driver, devices: [{index, name, memory_total_bytes, driver,
    power_limit_w}]}``.

    Raises:
        RuntimeError: no pynvml, no driver, or no GPU.
    """
    handles = _handles_or_raise()
    driver = _text(_optional(pynvml.nvmlSystemGetDriverVersion) or "unknown")
    devices = []
    for index, handle in enumerate(handles):
        memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
        limit = _optional(pynvml.nvmlDeviceGetEnforcedPowerLimit, handle)
        devices.append({"index": index, "name": _text(pynvml.nvmlDeviceGetName(handle)),
                        "memory_total_bytes": int(memory.total), "driver": driver,
                        "power_limit_w": limit / 1000.0 if limit is not None else None})
    return {"vendor": "nvidia", "driver": driver, "devices": devices}


def _pids(handle) -> list[int] | None:
    """The host pids of the compute processes on the device (None where NVML cannot list them)."""
    processes = _optional(pynvml.nvmlDeviceGetComputeRunningProcesses, handle)
    return None if processes is None else sorted({int(p.pid) for p in processes})


def sample() -> list[dict]:
    """One dict per GPU: ``index``, ``util_percent``, ``mem_used_bytes``, ``mem_total_bytes``,
    ``power_w``, ``temp_c``, ``clock_mhz`` (None where unsupported) and ``pids``, its compute
    processes (the monitor counts those that ran before the round: ``other_processes``).

    Raises:
        RuntimeError: as ``device_info``.
    """
    rows = []
    for index, handle in enumerate(_handles_or_raise()):
        util = _optional(pynvml.nvmlDeviceGetUtilizationRates, handle)
        memory = _optional(pynvml.nvmlDeviceGetMemoryInfo, handle)
        power = _optional(pynvml.nvmlDeviceGetPowerUsage, handle)
        rows.append({
            "index": index,
            "util_percent": float(util.gpu) if util is not None else None,
            "mem_used_bytes": int(memory.used) if memory is not None else None,
            "mem_total_bytes": int(memory.total) if memory is not None else None,
            "power_w": power / 1000.0 if power is not None else None,
            "temp_c": _optional(pynvml.nvmlDeviceGetTemperature, handle,
                                pynvml.NVML_TEMPERATURE_GPU),
            "clock_mhz": _optional(pynvml.nvmlDeviceGetClockInfo, handle, pynvml.NVML_CLOCK_SM),
            "pids": _pids(handle),
        })
    return rows
