"""RetinaNet as FlagPerf trains it: torchvision's ``retinanet_resnet50_fpn`` (Lin et al. 2017,
"Focal Loss for Dense Object Detection") with its ResNet-50 backbone started from ImageNet
weights (``resnet50-0676ba61.pth``), the rest randomly initialised."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import torch
from torchvision.models.detection import RetinaNet

from driver.torch.detection import detector_options, resnet_fpn_backbone

#: RetinaNet keyword arguments a configuration may set (torchvision's defaults otherwise).
HEAD_KEYS = {"topk_candidates": int, "detections_per_img": int, "score_thresh": float}


def build_model(config: Mapping[str, Any], data_dir: Path | None = None) -> torch.nn.Module:
    """torchvision's ``RetinaNet`` on :func:`driver.torch.detection.resnet_fpn_backbone` with
    P6 and P7 (``retinanet=True``: the FPN over ``returned_layers``, ResNet-50's stages 2-4 in
    the standard model), built as ``retinanet_resnet50_fpn(weights_backbone=...)`` builds it
    (frozen BatchNorm, 3 trainable stages): images ``[3, H, W]`` in [0, 1] (a list) -> in
    training, the losses ``classification`` (sigmoid focal loss) and ``bbox_regression``; in
    evaluation, per image ``boxes [N, 4]``, ``labels [N]``, ``scores [N]``.

    Config: ``num_classes``, the backbone keys of ``resnet_fpn_backbone``, ``min_size``,
    ``max_size``, ``anchor_sizes`` (the same number per level: the head is shared),
    ``aspect_ratios`` and ``HEAD_KEYS``.

    Raises:
        FileNotFoundError, ValueError: see ``resnet_fpn_backbone``.
    """
    backbone = resnet_fpn_backbone(config, data_dir, retinanet=True)
    options = detector_options(config, anchor_key="anchor_generator")
    options.update({key: kind(config[key]) for key, kind in HEAD_KEYS.items()
                    if config.get(key) is not None})
    return RetinaNet(backbone, num_classes=int(config["num_classes"]), **options)
