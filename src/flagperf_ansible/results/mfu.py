"""Model FLOPs utilization (MFU): achieved model FLOP/s over the hardware's peak FLOP/s.

Definition (PaLM, Chowdhery et al. 2022, appendix B "Compute usage and environmental impact"):
``MFU = observed throughput x model FLOPs per unit / peak FLOP/s``. Here

* observed throughput is the case's ``mfu.throughput`` figure, ``p_train`` for training
  (samples/s over the training time without evaluation, data loading and every overhead of the
  training loop included; evaluation's forward passes are not training FLOPs), ``p_core`` or
  ``p_whole`` for inference;
* model FLOPs per unit are declared by the case (``case.yml: mfu.flops_per_unit``): for training
  FLOPs per sample (or token) = 3 x forward FLOPs (backward costs twice the forward: Kaplan et al. 2020, "Scaling Laws
  for Neural Language Models", section 2.1), forward FLOPs = 2 x multiply-adds; activation
  recomputation is not counted (that would be hardware FLOPs utilization);
* peak FLOP/s is the vendor's datasheet figure per device for the precision the round used
  (``vendors/<vendor>/vendor.yml: datasheet.<hardware>.peak_flops``), times the devices of the
  round (``nnodes x nproc_per_node``, one device per process).

Where either side is not declared, MFU is absent (None with the reason), never guessed.
"""

from __future__ import annotations

from typing import Any, Mapping

from flagperf_ansible.config.case_schema import evaluate_formula

#: The throughput MFU is computed from unless the case names another (``mfu.throughput``).
THROUGHPUT = "p_train"


def flops_per_unit(declared: Mapping[str, Any] | None, config: Mapping[str, Any]) -> float | None:
    """Model FLOPs per unit of throughput for a round's configuration.

    ``declared`` is a case's ``mfu.flops_per_unit`` (``case_schema.Flops`` as a mapping):

    * ``value``: a constant;
    * ``value`` with ``scale_key``, ``reference``, ``exponent``: ``value x (config[scale_key] /
      reference) ** exponent`` (ResNet-50 declared at 224x224, run at 32x32: x (32/224)^2);
    * ``formula``: an arithmetic expression of config keys (e.g. ``6 * n_params + 12 * layers *
      hidden * seq_len`` per token), walked node by node, never executed as code.

    Returns None when the case declares nothing or the config lacks a key it needs.
    """
    if not declared:
        return None
    if declared.get("formula"):
        return evaluate_formula(str(declared["formula"]), config)
    value = float(declared["value"])
    key = declared.get("scale_key")
    if key:
        if isinstance(config.get(key), bool) or not isinstance(config.get(key), (int, float)):
            return None
        value *= (float(config[key]) / float(declared["reference"])) ** float(declared["exponent"])
    return value


def mfu_basis(declared: Mapping[str, Any] | None, precision_map: Mapping[str, str],
              config: Mapping[str, Any], datasheet: Mapping[str, Mapping[str, Any]],
              hardware: str, devices: int, throughput: str = THROUGHPUT) -> dict[str, Any]:
    """What the controller needs to compute a round's MFU, decided at plan time.

    Args:
        declared: the case's ``mfu.flops_per_unit`` (see ``flops_per_unit``).
        precision_map: the case's map from its ``precision`` config value to a datasheet
            precision (e.g. ``amp -> bf16``); an unmapped value is used as it is.
        config: the round's effective configuration.
        datasheet: the hardware's datasheet (``datasheet.Datasheet.plain()``: the peak of
            precision ``p`` is its ``peak_flops.<p>`` entry).
        hardware: the case spec's hardware (e.g. ``A100``), for the reason.
        devices: ``nnodes x nproc_per_node``.
        throughput: the FINISHED figure MFU takes (the case's ``mfu.throughput``).

    Returns:
        ``{flops_per_unit, flops_source, precision, peak_flops_per_device, peak_source,
        devices, throughput, reason}``; ``reason`` is empty when both sides are known, else
        says which is missing (and the missing numbers are None).
    """
    flops = flops_per_unit(declared, config)
    precision = str(config.get("precision", "fp32"))
    precision = str(precision_map.get(precision, precision))
    entry = datasheet.get(f"peak_flops.{precision}") or {}
    peak = entry.get("value")
    reasons = []
    if flops is None:
        reasons.append("the case declares no mfu.flops_per_unit for this configuration")
    if peak is None:
        reasons.append(f"the vendor declares no {precision} peak for {hardware}")
    return {"flops_per_unit": flops, "flops_source": (declared or {}).get("source"),
            "precision": precision, "peak_flops_per_device": peak,
            "peak_source": entry.get("source") if peak is not None else None,
            "devices": int(devices), "throughput": throughput, "reason": "; ".join(reasons)}


def round_mfu(basis: Mapping[str, Any] | None, finished: Mapping[str, Any] | None) -> dict[str, Any]:
    """A round's MFU record for round.json.

    ``value = finished[throughput] x flops_per_unit / (peak_flops_per_device x devices)``, a
    fraction. A case that emits ``mfu`` in FINISHED is taken at its word (``computed_by``
    ``case``). Otherwise ``value`` is None with ``reason`` when anything is unknown.
    """
    record = dict(basis or {"reason": "no MFU basis in the plan"})
    finished = finished or {}
    if isinstance(finished.get("mfu"), (int, float)) and not isinstance(finished["mfu"], bool):
        return {**record, "value": float(finished["mfu"]), "computed_by": "case", "reason": ""}
    figure = str(record.get("throughput") or THROUGHPUT)
    throughput = finished.get(figure)
    if record.get("reason"):
        return {**record, "value": None, "computed_by": None}
    if not isinstance(throughput, (int, float)) or isinstance(throughput, bool):
        return {**record, "value": None, "computed_by": None,
                "reason": f"FINISHED has no {figure}"}
    achieved = float(throughput) * float(record["flops_per_unit"])
    peak = float(record["peak_flops_per_device"]) * int(record["devices"])
    return {**record, "value": achieved / peak, "achieved_flops": achieved,
            "computed_by": "controller"}
