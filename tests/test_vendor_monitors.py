"""Vendor monitor plugins: the interface both keep, the cpu plugin on real psutil, the nvidia
plugin's real code on hand-written NVML values.

No GPU is available here: the nvidia plugin is exercised through a fake ``pynvml`` module object
injected into the plugin module, which answers with the hand-written values of
``fixtures/nvml_h100_handwritten.json``: H100 readings in NVML's units (hand-written plausible
figures, not captured from a device; see its ``_about``). Everything after the pynvml call (unit conversion, unsupported fields, device info)
is the plugin's own code path.
"""

import json
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NVML_VALUES = json.loads((Path(__file__).parent / "fixtures/nvml_h100_handwritten.json").read_text())
SAMPLE_KEYS = {"index", "util_percent", "mem_used_bytes", "mem_total_bytes", "power_w",
               "temp_c", "clock_mhz"}


def load(vendor):
    """The plugin loaded the way the monitor loads it (by path)."""
    from flagperf_host.vendor_plugin import load_plugin

    return load_plugin(str(ROOT / f"vendors/{vendor}/monitor.py"))


def fake_pynvml(values):
    """A module object with the pynvml calls the plugin makes, answering from ``values``."""
    nvml = types.ModuleType("pynvml")

    class NVMLError(Exception):
        def __init__(self, value):
            super().__init__(value)
            self.value = value

    class NVMLError_NotSupported(NVMLError):  # noqa: N801 (pynvml's name)
        def __init__(self):
            super().__init__(3)

    devices = values["devices"]
    nvml.NVMLError, nvml.NVMLError_NotSupported = NVMLError, NVMLError_NotSupported
    nvml.NVML_TEMPERATURE_GPU, nvml.NVML_CLOCK_SM = 0, 1
    nvml.calls = []

    def value(handle, key):
        found = devices[handle][key]
        if found == "not_supported":
            raise NVMLError_NotSupported()
        return found

    nvml.nvmlInit = lambda: nvml.calls.append("init")
    nvml.nvmlDeviceGetCount = lambda: len(devices)
    nvml.nvmlDeviceGetHandleByIndex = lambda i: i
    nvml.nvmlSystemGetDriverVersion = lambda: values["driver"]
    nvml.nvmlDeviceGetName = lambda h: value(h, "name").encode()  # older pynvml: bytes
    nvml.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(
        total=value(h, "memory_total"), used=value(h, "memory_used"),
        free=value(h, "memory_total") - value(h, "memory_used"))
    nvml.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(
        gpu=value(h, "util_gpu"), memory=value(h, "util_memory"))
    nvml.nvmlDeviceGetPowerUsage = lambda h: value(h, "power_mw")
    nvml.nvmlDeviceGetEnforcedPowerLimit = lambda h: value(h, "power_limit_mw")
    nvml.nvmlDeviceGetTemperature = lambda h, sensor: value(h, "temperature_c")
    nvml.nvmlDeviceGetClockInfo = lambda h, clock: value(h, "sm_clock_mhz")
    nvml.nvmlDeviceGetComputeRunningProcesses = lambda h: [
        types.SimpleNamespace(pid=pid, usedGpuMemory=None) for pid in value(h, "compute_pids")]
    return nvml


def test_nvidia_plugin_on_handwritten_h100_values():
    plugin = load("nvidia")
    plugin.pynvml = fake_pynvml(NVML_VALUES)
    info = plugin.device_info()
    assert info["vendor"] == "nvidia" and info["driver"] == "535.129.03"
    assert [d["name"] for d in info["devices"]] == ["NVIDIA H100 80GB HBM3"] * 2
    assert info["devices"][0] == {"index": 0, "name": "NVIDIA H100 80GB HBM3",
                                  "memory_total_bytes": 85520809984, "driver": "535.129.03",
                                  "power_limit_w": 700.0}
    rows = plugin.sample()
    assert [set(r) for r in rows] == [SAMPLE_KEYS | {"pids"}] * 2
    assert rows[0] == {"index": 0, "util_percent": 97.0, "mem_used_bytes": 71325057024,
                       "mem_total_bytes": 85520809984, "power_w": pytest.approx(648.213),
                       "temp_c": 61, "clock_mhz": 1980, "pids": [4242, 4243]}
    assert rows[1]["temp_c"] is None                  # NVMLError_NotSupported: unknown, no error
    assert rows[1]["pids"] is None
    assert rows[1]["power_w"] == pytest.approx(631.954)
    plugin.sample()
    assert plugin.pynvml.calls == ["init"]            # NVML is initialised once


def test_nvidia_plugin_degrades_without_pynvml_or_driver():
    plugin = load("nvidia")
    plugin.pynvml = None
    with pytest.raises(RuntimeError, match="not installed"):
        plugin.device_info()
    plugin = load("nvidia")
    nvml = fake_pynvml(NVML_VALUES)

    def no_driver():
        raise nvml.NVMLError(9)                       # NVML_ERROR_DRIVER_NOT_LOADED

    nvml.nvmlInit = no_driver
    plugin.pynvml = nvml
    with pytest.raises(RuntimeError, match="NVML"):
        plugin.sample()


def test_cpu_plugin_keeps_the_interface_on_real_psutil():
    plugin = load("cpu")
    info = plugin.device_info()
    assert info["vendor"] == "cpu"
    assert {"index", "name", "memory_total_bytes", "driver"} <= set(info["devices"][0])
    rows = plugin.sample()
    assert len(rows) == 1 and set(rows[0]) == SAMPLE_KEYS
    assert 0.0 <= rows[0]["util_percent"] <= 100.0
    assert 0 < rows[0]["mem_used_bytes"] < rows[0]["mem_total_bytes"]
