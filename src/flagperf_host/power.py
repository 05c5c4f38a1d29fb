"""Host power for the monitor: RAPL energy counters (CPU packages) or the BMC through ipmitool
(the whole host), in watts.

RAPL: ``/sys/class/powercap/*-rapl:N/energy_uj``, a counter in microjoules that wraps at
``max_energy_range_uj`` (root-only on most kernels since 2020); power is the energy between two
readings over the time between them. IPMI: ``ipmitool dcmi power reading``, read at most every
5 s and without blocking the sampling (a BMC's reading is an average over seconds).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

POWERCAP = Path("/sys/class/powercap")
IPMI_PERIOD_S = 5.0  # BMC readings are averages over seconds: reading faster only costs


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
