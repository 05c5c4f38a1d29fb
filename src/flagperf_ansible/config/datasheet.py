"""A vendor's datasheet per hardware, and each base figure's ratio to it ("% of spec").

``vendors/<vendor>/vendor.yml: datasheet.<hardware>`` states, per device, what the chip maker
publishes, each entry with its unit and source:

* ``peak_flops``: dense peak FLOP/s (OP/s for int8) per precision, one ``source`` for all
  (MFU takes its peaks from here too, ``flagperf_ansible.results.mfu``);
* ``memory_bandwidth`` (e.g. GB/s), ``memory_size`` (e.g. GB);
* ``host_link_bandwidth`` (host to device, e.g. PCIe), ``interconnect_bandwidth`` (device to
  device within a server, e.g. NVLink), ``network_bandwidth`` (across servers, per device,
  e.g. one 200 Gb/s NIC): bandwidths with ``duplex``: ``each`` (the figure is per direction)
  or ``both`` (the datasheet sums both directions, as NVIDIA quotes NVLink's 600 GB/s);
* ``device_names``: the names the described boards report (``NVIDIA H100 80GB HBM3``), which
  tell a device's entry (``vendor.hardware_of_device``).

A base case's metric names the entry it is compared with (``case.yml: metrics.<key>.datasheet``,
``datasheet_across_nodes`` for rounds on several nodes). Measured bandwidths are one direction
(a copy, a send, an all-reduce's bus bandwidth), so a ``both`` entry is compared at half its
value: nccl-tests' PERFORMANCE.md defines busbw to be comparable with the hardware's peak
bandwidth per direction (upstream FlagPerf doubles busbw to compare it with NVLink's sum
instead: the same ratio). The ratio is ``measured / spec``, both per device, in one unit.
Where the vendor states nothing, the ratio is absent with the reason (never a guess).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Mapping

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationInfo, \
    field_validator, model_validator

from flagperf_ansible.config.casespec import as_number, check_name, not_bool

#: Units a figure or a datasheet entry may be given in: (dimension, size in base units:
#: FLOP/s, bytes/s, bytes). ``Gb/s`` is bits (network links), ``TOP/s`` integer operations.
UNITS: dict[str, tuple[str, float]] = {
    "FLOP/s": ("flops", 1.0), "GFLOP/s": ("flops", 1e9), "TFLOP/s": ("flops", 1e12),
    "TOP/s": ("flops", 1e12),
    "B/s": ("rate", 1.0), "MB/s": ("rate", 1e6), "GB/s": ("rate", 1e9), "TB/s": ("rate", 1e12),
    "MiB/s": ("rate", 2.0 ** 20), "GiB/s": ("rate", 2.0 ** 30), "Gb/s": ("rate", 1e9 / 8),
    "B": ("size", 1.0), "MB": ("size", 1e6), "GB": ("size", 1e9), "TB": ("size", 1e12),
    "MiB": ("size", 2.0 ** 20), "GiB": ("size", 2.0 ** 30),
}
#: Datasheet entries besides ``peak_flops.<precision>``, with their dimension.
ENTRIES = {"memory_bandwidth": "rate", "memory_size": "size", "host_link_bandwidth": "rate",
           "interconnect_bandwidth": "rate", "network_bandwidth": "rate"}
PEAK = "peak_flops"


Number = Annotated[float, BeforeValidator(not_bool), Field(gt=0, allow_inf_nan=False)]


def entry_dimension(name: str) -> str:
    """The dimension (``flops``, ``rate``, ``size``) of a datasheet entry name.

    Raises:
        ValueError: not ``peak_flops.<precision>`` nor one of ``ENTRIES``.
    """
    if name.startswith(f"{PEAK}.") and len(name) > len(PEAK) + 1:
        return "flops"
    if name in ENTRIES:
        return ENTRIES[name]
    raise ValueError(f"{name!r} is not a datasheet entry ({PEAK}.<precision>, "
                     f"{', '.join(ENTRIES)})")


def check_figure_unit(entry: str, unit: str) -> None:
    """A figure compared with ``entry`` must be in a unit of the entry's dimension.

    Raises:
        ValueError: the entry is unknown, or the unit is not one of ``UNITS`` of its dimension.
    """
    dimension = entry_dimension(entry)
    if UNITS.get(unit, ("",))[0] != dimension:
        allowed = ", ".join(u for u, (d, _) in UNITS.items() if d == dimension)
        raise ValueError(f"unit {unit!r} cannot be compared with {entry} (one of: {allowed})")


class PeakFlops(BaseModel):
    """``datasheet.<hardware>.peak_flops``: ``source`` and FLOP/s per device by precision (any
    other key, e.g. ``fp32: 1.95e+13``; PyYAML reads ``1e9`` without a dot as a string, which
    is accepted as a number)."""

    model_config = ConfigDict(extra="allow")
    __pydantic_extra__: dict[str, Number]

    source: str = Field(min_length=1)

    @model_validator(mode="after")
    def _precisions(self) -> "PeakFlops":
        for precision in self.model_extra or {}:
            check_name(precision)
        return self


class Entry(BaseModel):
    """One datasheet figure per device, as published: ``value`` in ``unit``, ``source``."""

    model_config = ConfigDict(extra="forbid")

    value: Number
    unit: str
    source: str = Field(min_length=1)
    #: Bandwidths: ``each`` (the value is per direction) or ``both`` (the sum of both).
    duplex: Literal["each", "both"] = "each"
    note: str = ""

    @model_validator(mode="after")
    def _unit(self) -> "Entry":
        if self.unit not in UNITS:
            raise ValueError(f"unit {self.unit!r} is not one of {', '.join(UNITS)}")
        return self


class Datasheet(BaseModel):
    """``vendors/<vendor>/vendor.yml: datasheet.<hardware>``."""

    model_config = ConfigDict(extra="forbid")

    #: The names the boards this datasheet describes report (NVML's ``nvmlDeviceGetName``,
    #: ``torch.cuda.get_device_name``), so that a tool can tell which entry a device's is.
    device_names: list[str] = []
    peak_flops: PeakFlops | None = None
    memory_bandwidth: Entry | None = None
    memory_size: Entry | None = None
    host_link_bandwidth: Entry | None = None
    interconnect_bandwidth: Entry | None = None
    network_bandwidth: Entry | None = None

    @field_validator(*ENTRIES)
    @classmethod
    def _dimension(cls, entry: Entry | None, info: ValidationInfo) -> Entry | None:
        dimension = ENTRIES[str(info.field_name)]
        if entry is not None and UNITS[entry.unit][0] != dimension:
            raise ValueError(f"unit {entry.unit!r} is not a "
                             f"{'bandwidth' if dimension == 'rate' else 'size'}")
        return entry

    def plain(self) -> dict[str, dict[str, Any]]:
        """Every entry as ``{name: {"value": base units per device and direction, "quoted":
        "600 GB/s (both directions)", "source": str}}``, peaks as ``peak_flops.<precision>``."""
        entries: dict[str, dict[str, Any]] = {}
        if self.peak_flops is not None:
            for precision, value in (self.peak_flops.model_extra or {}).items():
                unit = "TOP/s" if precision == "int8" else "TFLOP/s"
                entries[f"{PEAK}.{precision}"] = {"value": float(value),
                                                  "quoted": f"{float(value) / 1e12:g} {unit}",
                                                  "source": self.peak_flops.source.strip()}
        for name in ENTRIES:
            entry = getattr(self, name)
            if entry is None:
                continue
            value = entry.value * UNITS[entry.unit][1]
            both = entry.duplex == "both"
            quoted = f"{entry.value:g} {entry.unit}" + (" (both directions)" if both else "")
            entries[name] = {"value": value / 2 if both else value, "quoted": quoted,
                             "source": entry.source.strip()}
        return entries


def datasheet_basis(metrics: Mapping[str, Mapping[str, Any]],
                    datasheet: Mapping[str, Mapping[str, Any]], vendor: str, hardware: str,
                    nnodes: int) -> dict[str, dict[str, Any]]:
    """What each compared figure of a round is set against, decided at plan time.

    Args:
        metrics: the case's contract ``metrics`` (``{key: {unit, datasheet,
            datasheet_across_nodes, ...}}``).
        datasheet: ``Datasheet.plain()`` of the round's hardware (``{}`` when none).
        vendor, hardware: for the reason when an entry is missing.
        nnodes: the round's nodes; above 1 a metric's ``datasheet_across_nodes`` applies.

    Returns:
        ``{key: {entry, unit, spec, quoted, source, reason}}`` for the metrics that name an
        entry: ``spec`` in the metric's unit (per device, per direction), or None with
        ``reason``.
    """
    basis = {}
    for key, metric in metrics.items():
        entry = metric.get("datasheet")
        if nnodes > 1 and metric.get("datasheet_across_nodes"):
            entry = metric["datasheet_across_nodes"]
        if not entry:
            continue
        unit = str(metric.get("unit") or "")
        stated = datasheet.get(entry)
        record = {"entry": entry, "unit": unit, "spec": None, "quoted": None, "source": None,
                  "reason": ""}
        if stated is None:
            record["reason"] = f"vendors/{vendor}/vendor.yml states no {entry} for {hardware}"
        else:
            record.update(spec=stated["value"] / UNITS[unit][1], quoted=stated["quoted"],
                          source=stated["source"])
        basis[key] = record
    return basis


def round_datasheet(basis: Mapping[str, Mapping[str, Any]] | None,
                    finished: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    """A round's figures against the datasheet, for round.json: ``{key: {**basis, value,
    ratio}}`` with ``ratio = value / spec`` (a fraction), or None with ``reason``: the
    basis's, or FINISHED's ``not_measured`` reason, or that the figure is absent."""
    finished = finished or {}
    not_measured = finished.get("not_measured")
    not_measured = not_measured if isinstance(not_measured, dict) else {}
    result = {}
    for key, record in (basis or {}).items():
        value = as_number(finished.get(key))
        item = {**record, "value": value, "ratio": None}
        if value is None:
            item["reason"] = (f"not measured: {not_measured[key]}" if key in not_measured
                              else "FINISHED has no such figure")
        elif record.get("spec"):
            item["ratio"] = value / float(record["spec"])
        result[key] = item
    return result


def case_datasheet(rounds: list[Mapping[str, Any]],
                   stats: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """A case's figures against the datasheet, for the summary: per compared figure its mean
    over the passed rounds (``stats``) over the spec, ``{key: {entry, unit, spec, quoted,
    source, mean, ratio, reason}}``; without a mean or a spec, ``ratio`` is None and
    ``reason`` the first round's reason (e.g. FINISHED's ``not_measured``)."""
    result: dict[str, dict[str, Any]] = {}
    for item in rounds:
        for key, record in (item.get("datasheet") or {}).items():
            if key not in result:
                mean = as_number((stats.get(key) or {}).get("mean"))
                spec = as_number(record.get("spec"))
                result[key] = {**{k: record.get(k) for k in ("entry", "unit", "spec", "quoted",
                                                            "source")},
                               "mean": mean, "ratio": mean / spec if mean is not None and spec
                               else None, "reason": ""}
            if result[key]["ratio"] is None and not result[key]["reason"]:
                result[key]["reason"] = record.get("reason") or ""
    for record in result.values():
        if record["ratio"] is None and not record["reason"]:
            record["reason"] = "no passed round reported it"
    return result
