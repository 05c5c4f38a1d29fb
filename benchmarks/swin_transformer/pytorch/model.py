"""Swin-T as FlagPerf trains it (microsoft/Swin-Transformer ``swin_tiny_patch4_window7_224``):
torchvision's ``SwinTransformer``, the same architecture (Liu et al. 2021: patch 4, window 7,
embedding 96, depths 2-2-6-2, heads 3-6-12-24, relative position bias, shifted windows),
randomly initialised."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import torch
from torchvision.models.swin_transformer import SwinTransformer


def build_model(config: Mapping[str, Any], num_classes: int,
                data_dir: Path | None = None) -> torch.nn.Module:
    """A Swin Transformer with ``num_classes`` outputs: images ``[batch, 3, H, W]`` -> logits
    ``[batch, num_classes]``.

    Config: ``patch_size``, ``embed_dim``, ``depths``, ``num_heads``, ``window_size``,
    ``mlp_ratio``, ``drop_path_rate`` (Swin-T: 4, 96, [2, 2, 6, 2], [3, 6, 12, 24], 7, 4.0, 0.2).
    """
    patch, window = int(config["patch_size"]), int(config["window_size"])
    return SwinTransformer(
        patch_size=[patch, patch], embed_dim=int(config["embed_dim"]),
        depths=[int(d) for d in config["depths"]],
        num_heads=[int(h) for h in config["num_heads"]], window_size=[window, window],
        mlp_ratio=float(config.get("mlp_ratio", 4.0)),
        stochastic_depth_prob=float(config.get("drop_path_rate", 0.2)), num_classes=num_classes)
