"""ResNet-50 on MindSpore: mindcv's ``resnet50`` (v1.5, stride in the 3x3 convolution as
torchvision's, 25,557,032 trainable parameters with 1000 classes), randomly initialised."""

from __future__ import annotations

from typing import Any, Mapping

from mindcv.models import create_model
from mindcv.models.resnet import Bottleneck
from mindspore import nn
from mindspore.common.initializer import initializer


def build_model(config: Mapping[str, Any], num_classes: int,
                data_dir: str | None = None) -> nn.Cell:
    """ResNet-50 with ``num_classes`` outputs: images ``[batch, 3, H, W]`` float32 -> logits
    ``[batch, num_classes]`` (any H, W of at least 32: global average pooling).

    Config: ``zero_init_residual`` starts the last BatchNorm of every bottleneck at gamma 0, so
    each residual block begins as the identity (Goyal et al. 2017, "Accurate, Large Minibatch
    SGD"), as torchvision's ``resnet50(zero_init_residual=True)``; mindcv has no such option.
    """
    net = create_model("resnet50", num_classes=num_classes, pretrained=False)
    if config.get("zero_init_residual"):
        for _, cell in net.cells_and_names():
            if isinstance(cell, Bottleneck):
                gamma = cell.bn3.gamma
                gamma.set_data(initializer("zeros", gamma.shape, gamma.dtype))
    return net


def trainable_parameters(net: nn.Cell) -> int:
    """Elements of the parameters the optimizer updates (BatchNorm's moving mean and variance
    excluded, as torch counts ``parameters()``)."""
    return sum(int(p.size) for p in net.trainable_params())
