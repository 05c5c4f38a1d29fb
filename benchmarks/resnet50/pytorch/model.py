"""ResNet-50 as FlagPerf trains it: torchvision's ``resnet50`` (v1.5, stride in the 3x3
convolution), randomly initialised."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import torch
import torchvision


def build_model(config: Mapping[str, Any], num_classes: int,
                data_dir: Path | None = None) -> torch.nn.Module:
    """ResNet-50 with ``num_classes`` outputs: images ``[batch, 3, H, W]`` -> logits
    ``[batch, num_classes]`` (any H, W of at least 32: global average pooling).

    Config: ``zero_init_residual`` starts the last BatchNorm of every bottleneck at gamma 0, so
    each residual block begins as the identity (Goyal et al. 2017, "Accurate, Large Minibatch
    SGD"), which keeps very short schedules stable.
    """
    return torchvision.models.resnet50(
        num_classes=num_classes, zero_init_residual=bool(config.get("zero_init_residual")))
