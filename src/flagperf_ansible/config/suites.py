"""Suites: what kind of case a case is, and what follows from that on the controller.

A suite decides (DESIGN.md "suite"):

* the pass rule of a round (``round_verdict``): an LLM training case ran every step with its
  loss curve near its reference (``llm_verdict``); other training converges to its target (and to
  each of its further targets in effect, ``also_targets``), which neither the untrained model
  nor an input-blind predictor meets where the round scored them (a profile's baselines,
  ``untrained_<metric>`` and ``blind_<metric>``; with further targets: meets them all),
  inference
  ran, its accuracy is within its bound and its engine's outputs are the framework's (within
  ``target_output_rel_error``), base ran and reported every figure it declares
  (or why the device cannot measure it, FINISHED ``not_measured``),
  diagnostic ran to FINISHED;
* the standard figures of FINISHED with their directions and units (``Suite.figures``), which
  the report shows as columns and compare judges, beside the case's own ``metrics``
  (``summary.case_figures`` puts the two together);
* the default monitoring window (PerfLog events) and the unit that energy is given per.

One results layout, one statistics module, one compare serve every suite: they ask this module.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from flagperf_ansible.config.casespec import as_number


@dataclass(frozen=True)
class Figure:
    """A FINISHED figure: its key, +1 higher is better / -1 lower / 0 not judged, its unit
    (``{unit}`` stands for the case's throughput unit) and its report header."""

    key: str
    direction: int
    unit: str
    header: str


@dataclass(frozen=True)
class Suite:
    name: str
    #: The PerfLog events that open and close the monitoring window by default.
    window: tuple[str, str]
    #: Standard FINISHED figures, in report order.
    figures: tuple[Figure, ...]
    #: How a passing round is described in the summary's pass rule.
    rule: str


_TIMES = (Figure("e2e_time", -1, "s", "e2e s"),)
SUITES: dict[str, Suite] = {s.name: s for s in (
    Suite("training", ("TRAIN_START", "TRAIN_END"),
          (Figure("p_whole", +1, "{unit}/s", "p_whole"), Figure("p_train", +1, "{unit}/s", "p_train"),
           Figure("p_core", +1, "{unit}/s", "p_core"), Figure("mfu", +1, "", "MFU"),
           Figure("raw_train_time", -1, "s", "train s"), *_TIMES),
          "converged to its target"),
    # Seed 004: whole includes data loading and evaluation, core only the compute; the engine
    # path's (inference) and the framework's (validation). foo_time is the work the engine
    # reports as not its own: shown for review, never subtracted (direction 0).
    Suite("inference", ("INFERENCE_START", "INFERENCE_END"),
          (Figure("p_inference_whole", +1, "{unit}/s", "inference whole"),
           Figure("p_inference_core", +1, "{unit}/s", "inference core"),
           Figure("p_validation_whole", +1, "{unit}/s", "validation whole"),
           Figure("p_validation_core", +1, "{unit}/s", "validation core"),
           Figure("inference_latency_p50", -1, "ms", "p50"),
           Figure("inference_latency_p99", -1, "ms", "p99"),
           Figure("mfu", +1, "", "MFU"), Figure("foo_time", 0, "s", "foo_time"), *_TIMES),
          "ran, engine accuracy within its bound of the framework's"),
    Suite("base", ("BENCHMARK_START", "BENCHMARK_END"), _TIMES,
          "ran, every declared figure reported"),
    Suite("diagnostic", ("TRAIN_START", "TRAIN_END"), (), "ran to FINISHED"),
)}


#: Units of the other standard FINISHED figures (driver/finished.py, the base harness
#: driver/torch/microbench.py), shown beside their statistics though not report columns. A case
#: counting its throughput in another unit than samples (tokens, mel frames) keeps its samples
#: in ``num_trained_samples`` and ``p_train_samples``; its ``throughput.count`` key is in its
#: unit.
FINISHED_UNITS = {"init_time": "s", "raw_train_time": "s", "train_no_eval_time": "s",
                  "pure_compute_time": "s", "e2e_time": "s", "num_trained_samples": "samples",
                  "p_train_samples": "samples/s", "benchmark_time": "s",
                  **{f"{path}_latency_{q}": "ms" for path in ("validation", "inference")
                     for q in ("p50", "p90", "p99")},
                  "export_time": "s", "compile_time": "s", "build_time": "s", "warmup_time": "s"}

#: The FINISHED keys that say which of an inference case's two paths ran (seed 004:
#: ``compiler: null`` ends after validation, ``no_validation`` runs the engine path only).
INFERENCE_PATHS = {"validation": "val_average_acc", "inference": "infer_average_acc"}


def suite(name: str | None) -> Suite:
    """The suite called ``name``; training for None (FlagPerf's folders, which are training).

    Raises:
        KeyError: no such suite.
    """
    return SUITES[name or "training"]


def metric_name(target: Mapping[str, Any]) -> str:
    """The metric's name of a contract's ``target`` (``final_acc1`` -> ``acc1``)."""
    metric = str(target["metric"])
    return metric[len("final_"):] if metric.startswith("final_") else metric


#: A profile's baselines in FINISHED (``<prefix>_<metric>``) and how a reason names them.
BASELINES = {"untrained": "the untrained model", "blind": "an input-blind predictor"}


def target_met(finished: Mapping[str, Any], target: Mapping[str, Any],
               prefix: str = "final") -> bool | None:
    """Whether FINISHED's ``<prefix>_<metric>`` (the final value, or a baseline's:
    ``BASELINES``) meets ``target_<metric>`` by ``target.comparison`` (``>=`` or ``<=``); None
    when either number is missing. ``target.metric`` is ``final_<metric>``."""
    name = metric_name(target)
    value = as_number(finished.get(f"{prefix}_{name}"))
    goal = as_number(finished.get(f"target_{name}"))
    if value is None or goal is None:
        return None
    return value >= goal if target["comparison"] == ">=" else value <= goal


def training_targets(finished: Mapping[str, Any], contract: Mapping[str, Any]) -> list[Mapping]:
    """A training round's targets: the contract's ``target``, then each of its
    ``also_targets`` that the round had (its ``target_<metric>`` is in FINISHED)."""
    targets = [contract["target"]] if contract.get("target") else []
    return targets + [t for t in contract.get("also_targets") or ()
                      if as_number(finished.get(f"target_{metric_name(t)}")) is not None]


#: The reason a passing LLM round gives where its configuration has no reference curve.
THROUGHPUT_ONLY = "throughput only: no reference loss curve for this configuration"


def llm_verdict(finished: Mapping[str, Any], contract: Mapping[str, Any]) -> tuple[bool, str]:
    """An LLM round's ``(passed, reason)``, upstream FlagPerf's rule: it ran every step
    (FINISHED ``steps_run`` = ``train_iters``) and its loss curve's error against the
    reference curve (the contract's ``target``, e.g. ``final_loss_curve_error`` <= 0.02) is
    within the bound. Without a reference curve (no ``final_<metric>`` in FINISHED) the round
    passes, and the reason says "throughput only"."""
    steps, ran = as_number(finished.get("train_iters")), as_number(finished.get("steps_run"))
    if steps is None or ran is None or ran < steps:
        return False, (f"ran {'?' if ran is None else f'{ran:g}'} of "
                       f"{'?' if steps is None else f'{steps:g}'} steps")
    target = contract.get("target")
    met = target_met(finished, target) if target else None
    if met is None:
        return True, THROUGHPUT_ONLY
    if not met:
        name = metric_name(target)
        return False, (f"the loss curve is off its reference: {name} "
                       f"{finished[f'final_{name}']:.4g} is not {target['comparison']} "
                       f"{finished[f'target_{name}']:.4g}")
    return True, ""


def round_verdict(suite_name: str | None, finished: Mapping[str, Any],
                  contract: Mapping[str, Any] | None) -> tuple[bool, str]:
    """``(passed, reason)`` for a round that ran to FINISHED, by its suite's rule.

    Args:
        suite_name: the case's suite.
        finished: rank 0's FINISHED value.
        contract: the plan's ``contract`` of the case (``target``, ``also_targets``,
            ``metrics``), or None for FlagPerf's folders, where only the case's ``converged``
            claim is known.
    """
    name = suite_name or "training"
    contract = contract or {}
    target = contract.get("target")
    if name == "training" and contract.get("kind") == "llm":
        return llm_verdict(finished, contract)
    if name == "training":
        if finished.get("converged") is not True:
            return False, "did not converge to its target"
        targets = training_targets(finished, contract)
        for one in targets:
            if target_met(finished, one) is False:
                return False, (f"claims converged, but {one['metric']} "
                               f"{finished.get(one['metric'])} is not {one['comparison']} its "
                               "target")
        for prefix, who in BASELINES.items():
            if targets and all(target_met(finished, one, prefix) for one in targets):
                scores = ", ".join(
                    f"{metric_name(one)} {finished[f'{prefix}_{metric_name(one)}']:.4g} (target "
                    f"{one['comparison']} {finished[f'target_{metric_name(one)}']:.4g})"
                    for one in targets)
                return False, (f"the target is met without learning: {who} scores {scores}")
        return True, ""
    if name == "inference":
        ran = [p for p in finished.get("paths_run") or () if p in INFERENCE_PATHS]
        if ran and len(ran) < len(INFERENCE_PATHS):
            # One path by configuration: no gap to bound; its accuracy must be there.
            accuracy = INFERENCE_PATHS[ran[0]]
            return (True, "") if as_number(finished.get(accuracy)) is not None else (
                False, f"FINISHED lacks {accuracy}")
        met = target_met(finished, target) if target else None
        if met is None:
            return False, f"FINISHED lacks {target['metric'] if target else 'the metric'} or its target"
        if not met:
            return False, f"{target['metric']} outside its bound ({target['comparison']} target)"
        # The engine computes the framework's model: its outputs, not only its accuracy.
        error = as_number(finished.get("output_rel_error"))
        bound = as_number(finished.get("target_output_rel_error"))
        if bound is not None and error is None:
            # Accuracy alone cannot tell an engine that computes another function.
            return False, ("the engine's outputs could not be compared with the framework's "
                           "(FINISHED has no output_rel_error)")
        if error is not None and bound is not None and not error <= bound:
            return False, (f"the engine's outputs are not the framework's: output_rel_error "
                           f"{error:.3g} above {bound:g}")
        return True, ""
    if name == "base":
        # A figure the device cannot measure (TF32 on a CPU) is reported as not measured, with
        # the reason; one that is neither a number nor explained is missing.
        explained = finished.get("not_measured")
        explained = explained if isinstance(explained, dict) else {}
        declared = list(contract.get("metrics") or {})
        missing = [k for k in declared if as_number(finished.get(k)) is None
                   and not (isinstance(explained.get(k), str) and explained[k].strip())]
        if missing:
            return False, (f"FINISHED lacks {', '.join(missing)} (neither a number nor "
                           "not_measured with a reason)")
        if declared and all(as_number(finished.get(k)) is None for k in declared):
            return False, "no declared figure was measured"
        return True, ""
    return True, ""
