"""Swin-B inference on ImageNet val (FlagPerf inference/benchmarks/swinTransformer):
torchvision's ``swin_b`` with its IMAGENET1K_V1 weights (top-1 83.58 %), framework validation
in PyTorch, then the vendor's compiler. Data, top-1, timing and export:
``driver/torch/inference_images.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import torch
from torchvision.models.swin_transformer import SwinTransformer

from driver.torch.inference_images import (build_dataloader, engine_forward, evaluator,
                                           export_model, load_state_dict, model_forward,
                                           num_classes, place)

#: The seed's six functions (the driver calls them by name); only create_model is this case's.
__all__ = ["build_dataloader", "create_model", "evaluator", "model_forward", "export_model",
           "engine_forward"]


def create_model(config: Mapping[str, Any], data_dir: Path) -> torch.nn.Module:
    """A Swin Transformer (Liu et al. 2021; torchvision's ``SwinTransformer``, of which
    ``swin_b`` is patch 4, embedding 128, depths 2-2-18-2, heads 4-8-16-32, window 7) of the
    parameters' dimensions with one output per class folder of ``<data_dir>/val``: images
    ``[B, 3, S, S]`` -> logits ``[B, classes]``, in eval mode on the driver's device (fp16 there
    when ``fp16`` and on CUDA).

    ``weight_dir`` set: the state-dict file ``<data_dir>/<weight_dir>`` (torchvision's
    ``swin_b-68c6b09e.pth``, 1000 classes); null: random weights from ``random_seed``.

    Raises:
        FileNotFoundError: the weights file or the val folder is missing.
        RuntimeError: the weights do not fit the dimensions or the number of classes.
    """
    patch, window = int(config["patch_size"]), int(config["window_size"])
    torch.manual_seed(int(config["random_seed"]))
    # stochastic_depth_prob: swin_b's 0.5, inactive in eval mode.
    model = SwinTransformer(
        patch_size=[patch, patch], embed_dim=int(config["embed_dim"]),
        depths=[int(d) for d in config["depths"]], num_heads=[int(h) for h in config["num_heads"]],
        window_size=[window, window], stochastic_depth_prob=0.5,
        num_classes=num_classes(data_dir))
    if config.get("weight_dir"):
        load_state_dict(model, Path(data_dir) / config["weight_dir"])
    return place(model, config)
