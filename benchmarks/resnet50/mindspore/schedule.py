"""The per-update learning-rate schedule of the resnet50 case, without any framework: the same
function of the same configuration keys as the PyTorch vision cases'
(``driver/torch/classification.py`` ``lr_factor``, torchvision's classification references),
so that both frameworks train on the same schedule (tests/test_resnet50_mindspore.py compares
them update by update).

Keys: ``learning_rate`` (the peak); ``lr_scheduler`` ``cosine`` (to ``lr_min`` at the planned
end), ``step`` (times ``lr_gamma`` every ``lr_step_size`` epochs) or ``constant``; a linear
warmup over ``lr_warmup_epochs`` (or ``lr_warmup_steps``) from ``lr_warmup_decay`` x the peak.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from driver.case_io import setting

SCHEDULERS = ("cosine", "step", "constant")


def check(config: Mapping[str, Any]) -> None:
    """Raise ValueError naming the key when the schedule keys are not ones this case knows."""
    kind = str(setting(config, "lr_scheduler", "cosine"))
    if kind not in SCHEDULERS:
        raise ValueError(f"config lr_scheduler: {kind!r}, expected one of {', '.join(SCHEDULERS)}")
    if kind == "step" and float(setting(config, "lr_step_size", 0)) <= 0:
        raise ValueError("config lr_step_size: a positive number of epochs is required")


def learning_rate(step: int, steps_per_epoch: float, total_steps: int,
                  config: Mapping[str, Any]) -> float:
    """The learning rate at optimizer update ``step`` (0-based) of ``total_steps``, with
    ``steps_per_epoch`` updates per epoch.

    Raises:
        ValueError: an unknown ``lr_scheduler`` (see :func:`check`).
    """
    check(config)
    peak = float(config["learning_rate"])
    warmup = int(setting(config, "lr_warmup_steps", 0)) or round(
        float(setting(config, "lr_warmup_epochs", 0)) * steps_per_epoch)
    if step < warmup:
        start = float(setting(config, "lr_warmup_decay", 0.01))
        return peak * (start + (1.0 - start) * step / warmup)
    kind = str(setting(config, "lr_scheduler", "cosine"))
    if kind == "cosine":
        floor = float(setting(config, "lr_min", 0.0)) / peak
        progress = min(1.0, (step - warmup) / max(1, total_steps - warmup))
        return peak * (floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress)))
    if kind == "step":
        epochs = step / max(steps_per_epoch, 1e-9)
        gamma = float(setting(config, "lr_gamma", 0.1))
        return peak * gamma ** math.floor(epochs / float(config["lr_step_size"]))
    return peak


def per_update(steps_per_epoch: int, total_steps: int, config: Mapping[str, Any]) -> list[float]:
    """The learning rate of every update ``0 .. total_steps - 1`` (MindSpore's dynamic learning
    rate: the optimizer takes entry ``global_step``)."""
    return [learning_rate(step, steps_per_epoch, total_steps, config)
            for step in range(total_steps)]
