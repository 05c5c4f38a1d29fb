"""A case's convergence target: the metric it trains for, the value to reach, and which way is
better (top-1 accuracy rises to a target, a validation loss falls to one); and the baselines a
profile's target must clear to mean that something was learned.

Baselines (``evaluate_baselines`` in the effective configuration, which a profile with a
``baselines`` block sets): the metric of the model as built, before its first update
(``untrained_<metric>``), and of the best predictor that ignores the input, from the case's own
data (``blind_<metric>``: the most frequent training class or token, the mean training frame,
the prior over answer positions...). Both go into FINISHED; a round whose target either of them
already meets fails (``flagperf_ansible.config.suites.round_verdict``): the target would pass
a training loop that never updates the weights, or a model that ignores its input.

Further targets (a case's ``also_targets``, e.g. a profile's validation loss beside the case's
metric where that metric alone cannot tell learning): convergence needs every target; an
evaluation then gives a figure per metric (:func:`as_figures`), and the baselines are scored
for each target."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Any, Hashable, Iterable, Mapping


@dataclass(frozen=True)
class Target:
    """Reach ``value`` of ``metric``; ``higher_is_better`` says from which side.

    Args:
        metric: the metric's name in FINISHED keys (``acc1`` gives ``final_acc1`` and
            ``target_acc1``).
        value: the target, in the metric's unit (e.g. % for ``acc1``).
        higher_is_better: True for accuracies (reached at ``>= value``), False for losses and
            errors (reached at ``<= value``).

    Raises:
        ValueError: an empty metric name or a non-finite target.
    """

    metric: str
    value: float
    higher_is_better: bool = True

    def __post_init__(self) -> None:
        if not self.metric:
            raise ValueError("a convergence target needs a metric name")
        if not math.isfinite(float(self.value)):
            raise ValueError(f"target {self.metric}: {self.value!r} is not a finite number")

    def reached(self, value: float | None) -> bool:
        """Whether ``value`` meets the target (the bound included); None and NaN never do."""
        if value is None or math.isnan(value):
            return False
        return value >= self.value if self.higher_is_better else value <= self.value

    def finished_figures(self, final: float | None) -> dict[str, Any]:
        """``{"final_<metric>": final, "target_<metric>": value}`` for the FINISHED event."""
        return {f"final_{self.metric}": final, f"target_{self.metric}": float(self.value)}


#: The configuration key that asks for the baselines (a profile's ``baselines`` block sets it).
EVALUATE_BASELINES = "evaluate_baselines"


def baseline_figures(target: Target, untrained: float | None,
                     blind: float | None) -> dict[str, Any]:
    """``{"untrained_<metric>": untrained, "blind_<metric>": blind}`` for FINISHED (see the
    module docstring); a None value is left out."""
    figures = {f"untrained_{target.metric}": untrained, f"blind_{target.metric}": blind}
    return {key: float(value) for key, value in figures.items() if value is not None}


def as_figures(target: Target, value: float | Mapping[str, float] | None) -> dict[str, float]:
    """An evaluation's result as ``{metric: value}``: a number (or None) is ``target``'s
    metric's; a mapping (a case with further targets, or more figures to report) is copied.

    Raises:
        ValueError: a mapping without ``target``'s metric.
    """
    if not isinstance(value, Mapping):
        return {target.metric: value}
    if target.metric not in value:
        raise ValueError(f"the evaluation gives {', '.join(value) or 'no figure'}, not the "
                         f"target's {target.metric}")
    return dict(value)


def all_reached(targets: Iterable[Target], figures: Mapping[str, float | None]) -> bool:
    """Whether every target is reached by its metric in ``figures`` (a missing one is not)."""
    return all(target.reached(figures.get(target.metric)) for target in targets)


def majority_share(train_labels: Iterable[Hashable], val_labels: Iterable[Hashable]) -> float:
    """The accuracy (0..1) of always predicting the most frequent training label (of the
    most frequent, the smallest): the share of ``val_labels`` equal to it. Labels are class
    indices, token ids, answer positions... 0.0 for an empty validation set.

    Raises:
        ValueError: no training labels.
    """
    counts = Counter(train_labels)
    if not counts:
        raise ValueError("no training labels to count")
    top = max(counts.values())
    majority = min(label for label, count in counts.items() if count == top)
    val = list(val_labels)
    return sum(label == majority for label in val) / len(val) if val else 0.0
