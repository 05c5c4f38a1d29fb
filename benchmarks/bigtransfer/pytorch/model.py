"""BiT-M-R152x2 as FlagPerf fine-tunes it: Big Transfer (Kolesnikov et al. 2020, "Big Transfer
(BiT): General Visual Representation Learning"), a ResNetV2 (pre-activation bottlenecks,
weight-standardised convolutions, GroupNorm with 32 groups) pretrained on ImageNet-21k.

The network is timm's ``ResNetV2`` built as ``timm.models.resnetv2._create_resnetv2_bit`` builds
``resnetv2_152x2_bit`` (``stem_type="fixed"``, ``StdConv2d`` with eps 1e-8), started from Google's
``.npz`` release through timm's ``load_pretrained``, with the head zeroed for fine-tuning.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Mapping

import torch
from timm.layers import StdConv2d
from timm.models.resnetv2 import ResNetV2


def build_model(config: Mapping[str, Any], num_classes: int,
                data_dir: Path | None = None) -> torch.nn.Module:
    """A BiT ResNetV2 with ``num_classes`` outputs: images ``[batch, 3, H, W]`` -> logits
    ``[batch, num_classes]`` (any H, W of at least 32: global average pooling).

    Config: ``layers``, units per stage (4 ints; BiT-R152: ``[3, 8, 36, 3]``), ``width_factor``
    (BiT-R152x2: 2), ``init_checkpoint``, a BiT ``.npz`` (``BiT-M-R152x2.npz``; keys in
    ``flagperf_ansible.datasets.bit_checkpoint``) relative to ``data_dir``, loaded by timm's
    ``load_pretrained`` when set. Its head (21843 classes for BiT-M) is not used: the head's
    1x1 convolution starts at weight and bias 0 either way, BiT's fine-tuning "zero head"
    (google-research/big_transfer, ``bit_pytorch/train.py``).

    Raises:
        FileNotFoundError: ``init_checkpoint`` is set but ``data_dir/init_checkpoint`` is no file.
        ValueError: the file is not a BiT ``.npz`` (timm's message), or ``layers`` is not 4 ints.
        KeyError, RuntimeError: the file is a BiT ``.npz`` of another depth or width.
    """
    layers = [int(n) for n in config["layers"]]
    if len(layers) != 4:
        raise ValueError(f"layers must be 4 ints (units per stage), got {layers}")
    model = ResNetV2(layers=layers, width_factor=int(config["width_factor"]),
                     num_classes=num_classes, stem_type="fixed",
                     conv_layer=functools.partial(StdConv2d, eps=1e-8))
    checkpoint = config.get("init_checkpoint")
    if checkpoint:
        path = Path(data_dir or ".") / str(checkpoint)
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no such BiT checkpoint (init_checkpoint)")
        model.load_pretrained(str(path))
    head = model.get_classifier()
    with torch.no_grad():
        head.weight.zero_()
        head.bias.zero_()
    return model
