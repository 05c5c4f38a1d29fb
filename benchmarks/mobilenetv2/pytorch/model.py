"""MobileNetV2 as FlagPerf trains it: torchvision's ``mobilenet_v2`` (Sandler et al. 2018),
randomly initialised."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import torch
import torchvision


def build_model(config: Mapping[str, Any], num_classes: int,
                data_dir: Path | None = None) -> torch.nn.Module:
    """MobileNetV2 with ``num_classes`` outputs: images ``[batch, 3, H, W]`` -> logits
    ``[batch, num_classes]``.

    Config: ``width_mult`` (1.0: the paper's network; a profile may narrow it) and ``dropout``
    (0.2, before the classifier).
    """
    return torchvision.models.mobilenet_v2(
        num_classes=num_classes, width_mult=float(config.get("width_mult", 1.0)),
        dropout=float(config.get("dropout", 0.2)))
