"""The optimizers the training cases configure (``optimizer``, ``learning_rate``,
``weight_decay``, ``norm_weight_decay`` and each algorithm's keys), over the parameters that
require gradients (frozen stages are left out)."""

from __future__ import annotations

from typing import Any, Mapping

import torch

from driver.case_io import setting


def make_optimizer(model: torch.nn.Module, config: Mapping[str, Any]) -> torch.optim.Optimizer:
    """``optimizer`` over the model's parameters, with ``norm_weight_decay`` on 1-D ones.

    Raises:
        ValueError: ``optimizer`` is not sgd or adamw.
    """
    decay = float(setting(config, "weight_decay", 0.0))
    norm_decay = float(setting(config, "norm_weight_decay", decay))
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.ndim > 1], "weight_decay": decay},
              {"params": [p for p in params if p.ndim <= 1], "weight_decay": norm_decay}]
    lr = float(config["learning_rate"])
    kind = str(setting(config, "optimizer", "sgd"))
    if kind == "sgd":
        return torch.optim.SGD(groups, lr=lr, momentum=float(setting(config, "momentum", 0.0)),
                               nesterov=bool(setting(config, "nesterov", False)))
    if kind == "adamw":
        betas = tuple(float(b) for b in setting(config, "adam_betas", (0.9, 0.999)))
        return torch.optim.AdamW(groups, lr=lr, betas=betas,
                                 eps=float(setting(config, "adam_eps", 1e-8)))
    raise ValueError(f"config optimizer: {kind!r}, expected sgd or adamw")
