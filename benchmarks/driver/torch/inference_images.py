"""Image classification for the inference suite, shared by its vision cases (resnet50,
vit_l_16, swin_transformer): the ImageNet validation loader, top-1, the two timed paths and
the ONNX export. A case adds its ``create_model``.

What carries over from FlagPerf (``inference/benchmarks/<case>/pytorch/``, identical in the
three cases): ``dataloader.py`` reads an ``ImageFolder`` with resize 256, centre crop 224, ImageNet
mean and std, casting to fp16 when the model runs in fp16; ``evaluator.py`` is top-1;
``export.py`` exports with ``torch.onnx.export``. Here the sizes are config keys
(``resize_size``, ``image_size``: the cpu profile shrinks them), the last partial batch is kept
(FlagPerf drops it: ``drop_last=True``), and the ONNX model has a dynamic batch axis.

Config keys read: ``batch_size``, ``num_workers``, ``fp16``, ``image_size`` (square input side,
px), ``resize_size`` (short side before the centre crop, px).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping

import torch
from torch.utils.data import DataLoader, default_collate
from torchvision import datasets
from torchvision.transforms import v2 as T

from driver.torch import inference

#: ImageNet's channel statistics (FlagPerf's dataloader.py; torchvision's weights' transforms).
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
#: The data set's split the cases read (``flagperf_ansible.datasets.imagenet``).
SPLIT = "val"


def half_precision(config: Mapping[str, Any]) -> bool:
    """Whether model and inputs run in fp16: ``fp16`` set and the device is CUDA (CPU kernels
    of half convolutions are missing or slow; the seed runs fp16 on the accelerator only)."""
    return bool(config.get("fp16")) and inference.device(config).type == "cuda"


def eval_transform(config: Mapping[str, Any]) -> Callable:
    """PIL image -> ``[3, image_size, image_size]`` float tensor: resize the short side to
    ``resize_size`` (bilinear, antialiased), centre crop, scale to [0, 1], normalise with the
    ImageNet mean and std; then fp16 when :func:`half_precision`."""
    steps = [T.Resize(int(config["resize_size"]), antialias=True),
             T.CenterCrop(int(config["image_size"])),
             T.PILToTensor(), T.ToDtype(torch.float32, scale=True),
             T.Normalize(IMAGENET_MEAN, IMAGENET_STD)]
    if half_precision(config):
        steps.append(T.ToDtype(torch.float16))
    return T.Compose(steps)


def val_folder(data_dir: Path) -> Path:
    """``<data_dir>/val``, checked.

    Raises:
        FileNotFoundError: it is not a folder.
    """
    folder = Path(data_dir) / SPLIT
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: no such folder (the ImageNet layout's val/<class>/ "
                                "images; flagperf-ansible data prepare imagenet)")
    return folder


def num_classes(data_dir: Path) -> int:
    """The number of class folders under ``<data_dir>/val`` (ImageFolder's classes).

    Raises:
        FileNotFoundError: the folder is missing or has no class folder.
    """
    folder = val_folder(data_dir)
    count = sum(1 for p in folder.iterdir() if p.is_dir())
    if not count:
        raise FileNotFoundError(f"{folder}: no class folders")
    return count


def _inputs_and_labels(samples: list) -> tuple[tuple[torch.Tensor], torch.Tensor]:
    """Collate ``(image, label)`` pairs into ``((images [B, 3, S, S],), labels [B])``: the
    driver's batch form, inputs as the model's positional arguments."""
    images, labels = default_collate(samples)
    return (images,), labels


def build_dataloader(config: Mapping[str, Any], data_dir: Path) -> DataLoader:
    """The validation images, in ImageFolder's order (classes sorted by folder name, which for
    ImageNet's wnid folders is the index order of torchvision's and Hugging Face's 1000-class
    heads), ``batch_size`` per batch, the last one partial.

    Batches: ``((images [B, 3, image_size, image_size],), labels [B] int64)``.

    Raises:
        FileNotFoundError: ``<data_dir>/val`` is missing or holds no image.
    """
    dataset = datasets.ImageFolder(str(val_folder(data_dir)), transform=eval_transform(config))
    workers = int(config.get("num_workers") or 0)
    return DataLoader(dataset, batch_size=int(config["batch_size"]), shuffle=False,
                      drop_last=False, num_workers=workers, persistent_workers=workers > 0,
                      pin_memory=inference.device(config).type == "cuda",
                      collate_fn=_inputs_and_labels)


def place(model: torch.nn.Module, config: Mapping[str, Any]) -> torch.nn.Module:
    """``model`` in eval mode on the driver's device, in fp16 when :func:`half_precision`."""
    model = model.eval().to(inference.device(config))
    return model.half() if half_precision(config) else model


def load_state_dict(model: torch.nn.Module, path: Path) -> torch.nn.Module:
    """Load a torchvision state-dict file (``torch.save`` of ``state_dict()``) into ``model``,
    every key matching.

    Raises:
        FileNotFoundError: no such file.
        RuntimeError: the file's keys or shapes differ from the model's.
    """
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such weights file (weight_dir under the data folder)")
    model.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
    return model


def evaluator(outputs: torch.Tensor | list[torch.Tensor], labels: torch.Tensor) -> tuple[int, int]:
    """Top-1 of one batch: ``(correct, counted)``.

    Args:
        outputs: logits ``[B, classes]`` (any dtype), or an engine's list of outputs whose first
            is the logits, possibly flat (TensorRT bindings): reshaped to ``[B, -1]``.
        labels: ``[B]`` class indices.
    """
    if isinstance(outputs, (list, tuple)):
        outputs = outputs[0]
    logits = torch.as_tensor(outputs).reshape(len(labels), -1)
    return int((logits.argmax(dim=1) == labels).sum()), len(labels)


def model_forward(model: torch.nn.Module, dataloader: DataLoader, evaluate: Callable,
                  config: Mapping[str, Any]) -> inference.PathResult:
    """Framework validation: ``model(images)`` under ``torch.no_grad`` over the data
    (``inference.timed_forward``)."""
    def call(inputs: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, float]:
        with torch.no_grad():
            return model(*inputs), 0.0
    return inference.timed_forward(call, dataloader, evaluate, config)


def engine_forward(engine: Callable, dataloader: DataLoader, evaluate: Callable,
                   config: Mapping[str, Any]) -> inference.PathResult:
    """The compiled engine over the data (``inference.timed_forward``; the engine returns
    ``(outputs, foo_time)`` itself)."""
    return inference.timed_forward(engine, dataloader, evaluate, config)


#: ONNX keeps a model of at most 2 GiB in one protobuf file; larger ones need external data.
_PROTOBUF_LIMIT = 2 * 1024 ** 3


def export_model(model: torch.nn.Module, config: Mapping[str, Any], onnx_path: Path) -> Path:
    """Export ``model`` to ONNX at ``onnx_path``: input ``input`` ``[batch, 3, S, S]`` with a
    dynamic batch axis (S = ``image_size``; the model's device and dtype), output ``output``
    (logits ``[batch, classes]``). torch's ``torch.export``-based exporter, the default since
    torch 2.9 (the TorchScript one FlagPerf used is deprecated). The weights stay in the one
    file unless they exceed protobuf's 2 GiB (then ``<onnx_path>.data`` beside it).

    Returns:
        ``onnx_path``.
    """
    parameter = next(model.parameters())
    size = int(config["image_size"])
    # Batch 2: torch.export specialises a dimension of size 1, which would fix the batch axis.
    example = torch.randn(2, 3, size, size, device=parameter.device, dtype=parameter.dtype)
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    onnx_path = Path(onnx_path)
    onnx_path.parent.mkdir(parents=True, exist_ok=True)
    with torch.no_grad():
        torch.onnx.export(model, (example,), str(onnx_path), dynamo=True,
                          input_names=["input"], output_names=["output"],
                          dynamic_shapes=({0: torch.export.Dim("batch")},),
                          external_data=weight_bytes >= _PROTOBUF_LIMIT)
    return onnx_path
