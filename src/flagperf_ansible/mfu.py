"""Model FLOPs utilization (MFU): achieved model FLOP/s over the hardware's peak FLOP/s.

Definition (PaLM, Chowdhery et al. 2022, appendix B "Compute usage and environmental impact"):
``MFU = observed throughput x model FLOPs per sample / peak FLOP/s``. Here

* observed throughput is ``p_train`` (samples/s over the training time without evaluation,
  data loading and every overhead of the training loop included); evaluation is left out because
  its forward passes are not training FLOPs;
* model FLOPs per sample are declared by the case (``case.yml: flops_per_sample``) as training
  FLOPs = 3 x forward FLOPs (backward costs twice the forward: Kaplan et al. 2020, "Scaling Laws
  for Neural Language Models", section 2.1), forward FLOPs = 2 x multiply-adds; activation
  recomputation is not counted (that would be hardware FLOPs utilization);
* peak FLOP/s is the vendor's datasheet figure per device for the precision the round used
  (``vendors/<vendor>/vendor.yml: peak_flops``), times the devices of the round
  (``nnodes x nproc_per_node``, one device per process).

Where either side is not declared, MFU is absent (None with the reason), never guessed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from flagperf_ansible.errors import ConfigError

#: The throughput MFU is computed from (see the module docstring).
THROUGHPUT = "p_train"


def _number(value: Any, source: str, key: str) -> float:
    # PyYAML reads 1e9 (no dot) as a string: accept it, reject anything else.
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"expected a number, got {value!r}", source, key) from None
    if not number > 0:
        raise ConfigError(f"expected a positive number, got {value!r}", source, key)
    return number


def check_case_flops(data: Any, source: str) -> dict[str, Any] | None:
    """Validate a case's ``flops_per_sample`` declaration.

    Args:
        data: the ``flops_per_sample`` mapping of ``case.yml`` (or None): ``value`` (training
            FLOPs per sample), ``source`` (where the count comes from), and optionally
            ``scale_key`` (a config key, e.g. ``image_size``), ``reference`` (the value of that
            key at which ``value`` holds) and ``exponent`` (default 2: FLOPs of a convolutional
            network grow with the image area).
        source: the file, for error messages.

    Returns:
        The normalised declaration, or None when the case declares none.

    Raises:
        ConfigError: a missing or non-positive value, or no source.
    """
    if data is None:
        return None
    key = "flops_per_sample"
    if not isinstance(data, dict):
        raise ConfigError("expected a mapping with value and source", source, key)
    unknown = sorted(set(data) - {"value", "source", "scale_key", "reference", "exponent"})
    if unknown:
        raise ConfigError("unknown key", source, f"{key}.{unknown[0]}")
    if not str(data.get("source") or "").strip():
        raise ConfigError("say where the count comes from", source, f"{key}.source")
    out = {"value": _number(data.get("value"), source, f"{key}.value"),
           "source": str(data["source"]).strip(), "scale_key": data.get("scale_key")}
    if out["scale_key"]:
        out["reference"] = _number(data.get("reference"), source, f"{key}.reference")
        out["exponent"] = _number(data.get("exponent", 2), source, f"{key}.exponent")
    return out


def flops_per_sample(declared: Mapping[str, Any] | None, config: Mapping[str, Any]) -> float | None:
    """Training FLOPs per sample for a round's configuration.

    ``value x (config[scale_key] / reference) ** exponent`` when the declaration scales with a
    config key (e.g. ResNet-50 declared at 224x224, run at 32x32: x (32/224)^2); None when the
    case declares nothing or the config lacks the key.
    """
    if not declared:
        return None
    value = float(declared["value"])
    key = declared.get("scale_key")
    if key:
        if not isinstance(config.get(key), (int, float)):
            return None
        value *= (float(config[key]) / float(declared["reference"])) ** float(declared["exponent"])
    return value


def load_peaks(project: Path, vendor: str) -> dict[str, dict[str, Any]]:
    """The vendor's datasheet peaks: ``{hardware: {"source": str, <precision>: FLOP/s}}``.

    Read from ``vendors/<vendor>/vendor.yml: peak_flops``; empty when the vendor declares none.

    Raises:
        ConfigError: a peak that is not a positive number, or a hardware entry without source.
    """
    from flagperf_ansible.cases import read_yaml

    path = project / "vendors" / vendor / "vendor.yml"
    shown = str(path.relative_to(project))
    data = read_yaml(path, project) or {}
    peaks = data.get("peak_flops") or {}
    if not isinstance(peaks, dict):
        raise ConfigError("expected a mapping hardware -> {precision: FLOP/s, source}", shown,
                          "peak_flops")
    out: dict[str, dict[str, Any]] = {}
    for hardware, entry in peaks.items():
        where = f"peak_flops.{hardware}"
        if not isinstance(entry, dict) or not str(entry.get("source") or "").strip():
            raise ConfigError("needs precision figures and a datasheet source", shown, where)
        out[str(hardware)] = {"source": str(entry["source"]).strip(), **{
            str(p): _number(v, shown, f"{where}.{p}") for p, v in entry.items() if p != "source"}}
    return out


def mfu_basis(declared: Mapping[str, Any] | None, precision_map: Mapping[str, str],
              config: Mapping[str, Any], peaks: Mapping[str, Mapping[str, Any]],
              hardware: str, devices: int) -> dict[str, Any]:
    """What the controller needs to compute a round's MFU, decided at plan time.

    Args:
        declared: the case's ``flops_per_sample`` (see ``check_case_flops``).
        precision_map: the case's map from its ``precision`` config value to a datasheet
            precision (e.g. ``amp -> bf16``); an unmapped value is used as it is.
        config: the round's effective configuration.
        peaks: from ``load_peaks``.
        hardware: the case spec's hardware (e.g. ``A100``).
        devices: ``nnodes x nproc_per_node``.

    Returns:
        ``{flops_per_sample, flops_source, precision, peak_flops_per_device, peak_source,
        devices, throughput, reason}``; ``reason`` is empty when both sides are known, else
        says which is missing (and the missing numbers are None).
    """
    flops = flops_per_sample(declared, config)
    precision = str(config.get("precision", "fp32"))
    precision = str(precision_map.get(precision, precision))
    entry = peaks.get(hardware) or {}
    peak = entry.get(precision)
    reasons = []
    if flops is None:
        reasons.append("the case declares no flops_per_sample")
    if peak is None:
        reasons.append(f"the vendor declares no {precision} peak for {hardware}")
    return {"flops_per_sample": flops, "flops_source": (declared or {}).get("source"),
            "precision": precision, "peak_flops_per_device": peak,
            "peak_source": entry.get("source") if peak is not None else None,
            "devices": int(devices), "throughput": THROUGHPUT, "reason": "; ".join(reasons)}


def round_mfu(basis: Mapping[str, Any] | None, finished: Mapping[str, Any] | None) -> dict[str, Any]:
    """A round's MFU record for round.json.

    ``value = finished[p_train] x flops_per_sample / (peak_flops_per_device x devices)``, a
    fraction. A case that emits ``mfu`` in FINISHED is taken at its word (``computed_by``
    ``case``). Otherwise ``value`` is None with ``reason`` when anything is unknown.
    """
    record = dict(basis or {"reason": "no MFU basis in the plan"})
    finished = finished or {}
    if isinstance(finished.get("mfu"), (int, float)) and not isinstance(finished["mfu"], bool):
        return {**record, "value": float(finished["mfu"]), "computed_by": "case", "reason": ""}
    throughput = finished.get(THROUGHPUT)
    if record.get("reason"):
        return {**record, "value": None, "computed_by": None}
    if not isinstance(throughput, (int, float)) or isinstance(throughput, bool):
        return {**record, "value": None, "computed_by": None,
                "reason": f"FINISHED has no {THROUGHPUT}"}
    achieved = float(throughput) * float(record["flops_per_sample"])
    peak = float(record["peak_flops_per_device"]) * int(record["devices"])
    return {**record, "value": achieved / peak, "achieved_flops": achieved,
            "computed_by": "controller"}
