"""ViT-B/16 as FlagPerf trains it: torchvision's ``vit_b_16`` (Dosovitskiy et al. 2021),
randomly initialised."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import torch
from torchvision.models.vision_transformer import VisionTransformer


def build_model(config: Mapping[str, Any], num_classes: int,
                data_dir: Path | None = None) -> torch.nn.Module:
    """A Vision Transformer with ``num_classes`` outputs: images ``[batch, 3, S, S]`` with S
    the config's ``train_crop_size`` -> logits ``[batch, num_classes]``.

    Config: ``patch_size``, ``num_layers``, ``num_heads``, ``hidden_dim``, ``mlp_dim`` (ViT-B/16:
    16, 12, 12, 768, 3072, torchvision's ``vit_b_16``), ``dropout`` and ``attention_dropout``
    (0). The evaluation crop must equal the training crop (positions are learnt per patch).
    """
    return VisionTransformer(
        image_size=int(config["train_crop_size"]), patch_size=int(config["patch_size"]),
        num_layers=int(config["num_layers"]), num_heads=int(config["num_heads"]),
        hidden_dim=int(config["hidden_dim"]), mlp_dim=int(config["mlp_dim"]),
        dropout=float(config.get("dropout", 0.0)),
        attention_dropout=float(config.get("attention_dropout", 0.0)), num_classes=num_classes)
