"""Mask R-CNN as FlagPerf trains it: torchvision's ``maskrcnn_resnet50_fpn`` (He et al. 2017)
with its ResNet-50 backbone started from ImageNet weights (FlagPerf reads them from
``<data_dir>/checkpoint/resnet50.pth``), the rest randomly initialised."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import torch
from torchvision.models.detection import MaskRCNN
from torchvision.models.detection.mask_rcnn import MaskRCNNHeads, MaskRCNNPredictor

from driver.torch.detection import rcnn_options, resnet_fpn_backbone


def build_model(config: Mapping[str, Any], data_dir: Path | None = None) -> torch.nn.Module:
    """torchvision's ``MaskRCNN`` on :func:`driver.torch.detection.resnet_fpn_backbone`,
    built as ``maskrcnn_resnet50_fpn(weights_backbone=...)`` builds it (frozen BatchNorm, 3
    trainable stages): images ``[3, H, W]`` in [0, 1] (a list) -> in training, Faster R-CNN's
    losses and ``loss_mask``; in evaluation, per image ``boxes [N, 4]``, ``labels [N]``,
    ``scores [N]`` and ``masks [N, 1, H, W]`` (probabilities).

    Config: ``num_classes`` (with the background), the backbone keys of
    ``resnet_fpn_backbone``, those of ``driver.torch.detection.rcnn_options``, and
    ``mask_head_channels`` (the mask head's four 3x3 convolutions and its deconvolution; null:
    torchvision's 256).

    Raises:
        FileNotFoundError, ValueError: see ``resnet_fpn_backbone``.
    """
    backbone = resnet_fpn_backbone(config, data_dir)
    options = rcnn_options(config, backbone.out_channels, masks=True)
    if config.get("mask_head_channels"):
        width = int(config["mask_head_channels"])
        options["mask_head"] = MaskRCNNHeads(backbone.out_channels, (width,) * 4, 1)
        options["mask_predictor"] = MaskRCNNPredictor(width, width, int(config["num_classes"]))
    return MaskRCNN(backbone, **options)
