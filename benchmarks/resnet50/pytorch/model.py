"""ResNet-50 from transformers' model definitions (``ResNetConfig`` defaults are ResNet-50:
depths 3-4-6-3, bottleneck blocks, widths 256-512-1024-2048), trained from random weights."""

from __future__ import annotations

import torch
from transformers import ResNetConfig, ResNetForImageClassification

def build_resnet50(num_labels: int, zero_init_residual: bool) -> torch.nn.Module:
    """A randomly initialised ResNet-50 with ``num_labels`` outputs.

    Args:
        zero_init_residual: start the last BatchNorm of every bottleneck at gamma 0, so each
            residual block begins as the identity (Goyal et al. 2017, "Accurate, Large Minibatch
            SGD"); this keeps very short schedules stable.
    """
    model = ResNetForImageClassification(ResNetConfig(num_labels=num_labels))
    if zero_init_residual:
        for module in model.modules():
            if type(module).__name__ == "ResNetBottleNeckLayer":
                torch.nn.init.zeros_(module.layer[-1].normalization.weight)
    return model
