"""ResNet-50 inference on ImageNet val (FlagPerf inference/benchmarks/resnet50): torchvision's
``resnet50`` with its IMAGENET1K_V1 weights (top-1 76.13 %), framework validation in PyTorch,
then the vendor's compiler. Data, top-1, timing and export: ``driver/torch/inference_images.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import torch
import torchvision

from driver.torch.inference_images import (build_dataloader, engine_forward, evaluator,
                                           export_model, load_state_dict, model_forward,
                                           num_classes, place)

#: The seed's six functions (the driver calls them by name); only create_model is this case's.
__all__ = ["build_dataloader", "create_model", "evaluator", "model_forward", "export_model",
           "engine_forward"]


def create_model(config: Mapping[str, Any], data_dir: Path) -> torch.nn.Module:
    """ResNet-50 v1.5 (torchvision ``resnet50``) with one output per class folder of
    ``<data_dir>/val``: images ``[B, 3, S, S]`` -> logits ``[B, classes]``, in eval mode on the
    driver's device (fp16 there when ``fp16`` and on CUDA).

    ``weight_dir`` set: the state-dict file ``<data_dir>/<weight_dir>`` (torchvision's
    ``resnet50-0676ba61.pth``, 1000 classes); null: random weights from ``random_seed``.

    Raises:
        FileNotFoundError: the weights file or the val folder is missing.
        RuntimeError: the weights do not fit (e.g. data with another number of classes).
    """
    torch.manual_seed(int(config["random_seed"]))
    model = torchvision.models.resnet50(num_classes=num_classes(data_dir))
    if config.get("weight_dir"):
        load_state_dict(model, Path(data_dir) / config["weight_dir"])
    return place(model, config)
