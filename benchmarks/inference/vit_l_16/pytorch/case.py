"""ViT-L/16 inference on ImageNet val (FlagPerf inference/benchmarks/vit_l_16): Hugging Face
``ViTForImageClassification`` with ``google/vit-large-patch16-224``'s weights, framework
validation in PyTorch, then the vendor's compiler. Data, top-1, timing and export:
``driver/torch/inference_images.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import torch
from transformers import ViTConfig, ViTForImageClassification

from driver.torch.inference_images import (build_dataloader, engine_forward, evaluator,
                                           export_model, model_forward, num_classes, place)

#: The seed's six functions (the driver calls them by name); only create_model is this case's.
__all__ = ["build_dataloader", "create_model", "evaluator", "model_forward", "export_model",
           "engine_forward"]
#: parameters.yaml keys that are ViTConfig fields: the architecture.
DIMENSIONS = ("image_size", "patch_size", "hidden_size", "num_hidden_layers",
              "num_attention_heads", "intermediate_size")


class Logits(torch.nn.Module):
    """A Hugging Face image classifier whose forward returns the logits tensor alone, not its
    output object: ONNX export and the engines need a plain tensor."""

    def __init__(self, classifier: torch.nn.Module) -> None:
        super().__init__()
        self.classifier = classifier

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return self.classifier(pixel_values=pixel_values).logits


def create_model(config: Mapping[str, Any], data_dir: Path) -> torch.nn.Module:
    """ViT (Dosovitskiy et al. 2021) of the parameters' dimensions with one output per class
    folder of ``<data_dir>/val``: images ``[B, 3, image_size, image_size]`` -> logits
    ``[B, classes]``, in eval mode on the driver's device (fp16 there when ``fp16`` and on
    CUDA).

    ``weight_dir`` set: ``from_pretrained`` of the folder ``<data_dir>/<weight_dir>`` (the
    Hub's ``google/vit-large-patch16-224`` written by ``save_pretrained``; nothing is
    downloaded), whose configuration must match the parameters; null: ``ViTConfig`` of the
    parameters, random weights from ``random_seed``.

    Raises:
        FileNotFoundError: the weights folder or the val folder is missing.
        ValueError: the weights' architecture or class count differs from the parameters'.
    """
    classes = num_classes(data_dir)
    torch.manual_seed(int(config["random_seed"]))
    if config.get("weight_dir"):
        folder = Path(data_dir) / config["weight_dir"]
        if not (folder / "config.json").is_file():
            raise FileNotFoundError(f"{folder}: no save_pretrained folder (config.json missing)")
        classifier = ViTForImageClassification.from_pretrained(folder, local_files_only=True)
        wanted = {**{key: config[key] for key in DIMENSIONS}, "num_labels": classes}
        found = {key: getattr(classifier.config, key) for key in wanted}
        if found != wanted:
            raise ValueError(f"{folder}: the weights are {found}, the case's parameters {wanted}")
    else:
        classifier = ViTForImageClassification(ViTConfig(
            **{key: int(config[key]) for key in DIMENSIONS}, num_labels=classes))
    return place(Logits(classifier), config)
