"""EfficientNetV2-S as FlagPerf trains it: torchvision's ``efficientnet_v2_s`` (Tan and Le
2021), randomly initialised."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any, Mapping

import torch
import torchvision
from torchvision.models.efficientnet import EfficientNet, _efficientnet_conf


def build_model(config: Mapping[str, Any], num_classes: int,
                data_dir: Path | None = None) -> torch.nn.Module:
    """EfficientNetV2-S with ``num_classes`` outputs: images ``[batch, 3, H, W]`` -> logits
    ``[batch, num_classes]``.

    Config: ``stages`` (how many of the network's six stages to keep, in order; 6 is
    EfficientNetV2-S itself, a profile may keep fewer), ``stochastic_depth_prob`` (0.2) and
    ``dropout`` (0.2), as torchvision's ``efficientnet_v2_s``.
    """
    stages = int(config.get("stages", 6))
    dropout = float(config.get("dropout", 0.2))
    depth = float(config.get("stochastic_depth_prob", 0.2))
    if stages == 6:
        return torchvision.models.efficientnet_v2_s(
            num_classes=num_classes, dropout=dropout, stochastic_depth_prob=depth)
    # The same stage table as efficientnet_v2_s (torchvision 0.29's _efficientnet_conf), the
    # later stages left out; the head still widens to 1280 channels.
    settings, last_channel = _efficientnet_conf("efficientnet_v2_s")
    return EfficientNet(settings[:stages], dropout, depth, num_classes,
                        norm_layer=partial(torch.nn.BatchNorm2d, eps=1e-3),
                        last_channel=last_channel)
