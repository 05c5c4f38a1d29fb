"""Describe this host for one round: ``sys_info.json`` (standard library only, psutil if present).

    flagperf_host.sys_info --output FILE [--vendor-dir DIR] [--mask-label host0]

Fields: ``hostname``, ``addresses`` (IPv4 of the interfaces), ``kernel``, ``os``, ``cpu``
(``model``, ``logical_cores``, ``physical_cores``), ``memory`` (``total_bytes``), ``python``
and ``versions`` (torch, transformers and numpy of this Python, and whichever of the other
frameworks' packages in ``FRAMEWORK_PACKAGES`` it has, read from package metadata without
importing them), ``accelerators``. Accelerators come from the vendor plugin
``<vendor-dir>/monitor.py`` when it exists: its ``device_info()`` returns at least ``vendor`` and
``devices: [{index, name, memory_total_bytes, driver}]``; otherwise, or when it fails,
``{"available": false, "reason": ...}``. With ``--mask-label`` the host name is the label and
addresses are left out.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import sys
from importlib import metadata
from pathlib import Path

from flagperf_host.vendor_plugin import load_plugin

PROG = "sys_info"


def cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def physical_cores() -> int | None:
    try:
        import psutil

        return psutil.cpu_count(logical=False)
    except ImportError:
        return None


def memory_total() -> int | None:
    try:
        with open("/proc/meminfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return None


def addresses() -> list[str]:
    try:
        import psutil

        return sorted({a.address for nics in psutil.net_if_addrs().values() for a in nics
                       if a.family == socket.AF_INET})
    except ImportError:
        return []


def version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def accelerators(vendor_dir: str) -> dict:
    plugin = Path(vendor_dir) / "monitor.py" if vendor_dir else None
    if plugin is None or not plugin.is_file():
        return {"available": False, "reason": f"no vendor monitor plugin ({plugin})"}
    try:
        info = dict(load_plugin(str(plugin)).device_info())
    except Exception as err:  # noqa: BLE001 - any plugin failure is recorded, never fatal
        return {"available": False, "reason": f"{plugin.name}: {type(err).__name__}: {err}"}
    info.setdefault("devices", [])
    info["available"] = bool(info["devices"])
    return info


#: Always listed (None when absent), then the packages of every framework a case may run on,
#: listed when installed.
ALWAYS = ("torch", "transformers", "numpy")
FRAMEWORK_PACKAGES = ("torchvision", "torchaudio", "timm", "paddlepaddle", "paddlepaddle-gpu",
                      "tensorflow", "mindspore", "onnx", "onnxruntime", "onnxruntime-gpu",
                      "tensorrt", "deepspeed", "megatron-core", "apex")


def versions() -> dict:
    """``{package: version}``: the ``ALWAYS`` ones (None when absent) and the installed ones of
    ``FRAMEWORK_PACKAGES``."""
    found = {name: version(name) for name in ALWAYS}
    for name in FRAMEWORK_PACKAGES:
        installed = version(name)
        if installed is not None:
            found[name] = installed
    return found


def describe(vendor_dir: str, mask_label: str) -> dict:
    """The host description written to sys_info.json."""
    return {
        "hostname": mask_label or socket.gethostname(),
        "addresses": [] if mask_label else addresses(),
        "kernel": platform.release(),
        "os": platform.platform(),
        "cpu": {"model": cpu_model(), "logical_cores": os.cpu_count(),
                "physical_cores": physical_cores()},
        "memory": {"total_bytes": memory_total()},
        "python": {"version": platform.python_version(), "executable": sys.executable},
        "versions": versions(),
        "accelerators": accelerators(vendor_dir),
    }


def main() -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument("--output", required=True, type=Path)
    parser.add_argument("--vendor-dir", default="")
    parser.add_argument("--mask-label", default="")
    args = parser.parse_args()
    args.output.parent.mkdir(parents=True, exist_ok=True)
    # Unique per process: hosts that share a home (NFS) may write side by side.
    tmp = args.output.with_name(f".{args.output.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(describe(args.vendor_dir, args.mask_label), indent=2,
                              default=str) + "\n", encoding="utf-8")
    os.replace(tmp, args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
