"""Faster R-CNN as FlagPerf trains it: torchvision's ``fasterrcnn_resnet50_fpn`` (Ren et al.
2015, with the FPN of Lin et al. 2017) with its ResNet-50 backbone started from ImageNet
weights (``resnet50-0676ba61.pth``), the rest randomly initialised."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import torch
from torchvision.models.detection import FasterRCNN

from driver.torch.detection import rcnn_options, resnet_fpn_backbone


def build_model(config: Mapping[str, Any], data_dir: Path | None = None) -> torch.nn.Module:
    """torchvision's ``FasterRCNN`` on :func:`driver.torch.detection.resnet_fpn_backbone`,
    built as ``fasterrcnn_resnet50_fpn(weights_backbone=...)`` builds it (frozen BatchNorm, 3
    trainable stages): images ``[3, H, W]`` in [0, 1] (a list) -> in training, the losses
    ``loss_classifier``, ``loss_box_reg``, ``loss_objectness``, ``loss_rpn_box_reg``; in
    evaluation, per image ``boxes [N, 4]``, ``labels [N]``, ``scores [N]``.

    Config: ``num_classes`` (with the background), the backbone keys of
    ``resnet_fpn_backbone``, and those of ``driver.torch.detection.rcnn_options`` (image size,
    anchors, proposals, box head width).

    Raises:
        FileNotFoundError, ValueError: see ``resnet_fpn_backbone``.
    """
    backbone = resnet_fpn_backbone(config, data_dir)
    return FasterRCNN(backbone, **rcnn_options(config, backbone.out_channels))
