"""ImageNet class folders (``<data_dir>/train/<class>/*.JPEG``, ``<data_dir>/val/<class>/*``,
the ``imagenet`` data format) read with ``mindspore.dataset.ImageFolderDataset``, with the
augmentation of the PyTorch vision cases (``driver/torch/classification.py``: torchvision's
classification references) written in ``mindspore.dataset.vision``.

Classes are the sorted folder names, numbered from 0, as torchvision's ``ImageFolder`` numbers
them. Configuration keys: ``train_transform`` ``random_resized_crop`` (Inception crop of
``train_crop_size``, scale 0.08-1, ratio 3/4-4/3) or ``random_shift`` (resize to the crop, pad
by ``random_shift`` pixels, random crop); ``hflip_prob`` (0.5); ``val_resize_size`` (short
side) and ``val_crop_size`` (centre crop); ``normalize_mean``/``normalize_std`` (of pixels in
[0, 1]); ``num_workers`` (parallel map workers, 0 = 1); ``seed`` (the shuffling and
augmentation seed, the same on every rank so that the shards split one permutation).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import mindspore.dataset as ds
import numpy as np
from mindspore.dataset import transforms, vision

from driver.case_io import setting

TRAIN_TRANSFORMS = ("random_resized_crop", "random_shift")


def _split(data_dir: Path, split: str) -> str:
    folder = Path(data_dir) / split
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: no such data folder (ImageNet layout: "
                                f"{split}/<class>/<image>)")
    return str(folder)


def _normalize(config: Mapping[str, Any]) -> list:
    # ImageFolderDataset decodes to uint8 HWC RGB: mean and std in pixel units, then CHW.
    mean = [255.0 * float(m) for m in config["normalize_mean"]]
    std = [255.0 * float(s) for s in config["normalize_std"]]
    return [vision.Normalize(mean, std), vision.HWC2CHW()]


def train_transforms(config: Mapping[str, Any]) -> list:
    """The training operations on a decoded uint8 ``[H, W, 3]`` image, giving float32
    ``[3, crop, crop]``.

    Raises:
        ValueError: an unknown ``train_transform``.
    """
    crop = int(config["train_crop_size"])
    kind = str(setting(config, "train_transform", "random_resized_crop"))
    if kind == "random_resized_crop":
        steps = [vision.RandomResizedCrop(crop, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3),
                                          interpolation=vision.Inter.BILINEAR)]
    elif kind == "random_shift":
        steps = [vision.Resize((crop, crop), vision.Inter.BILINEAR),
                 vision.RandomCrop(crop, padding=int(setting(config, "random_shift", 0)))]
    else:
        raise ValueError(f"config train_transform: {kind!r}, expected one of "
                         f"{', '.join(TRAIN_TRANSFORMS)}")
    hflip = float(setting(config, "hflip_prob", 0.5))
    if hflip > 0:
        steps.append(vision.RandomHorizontalFlip(hflip))
    return steps + _normalize(config)


def eval_transforms(config: Mapping[str, Any]) -> list:
    """Resize the short side to ``val_resize_size``, centre crop ``val_crop_size``, normalise."""
    return [vision.Resize(int(config["val_resize_size"]), vision.Inter.BILINEAR),
            vision.CenterCrop(int(config["val_crop_size"]))] + _normalize(config)


def class_names(data_dir: Path) -> list[str]:
    """The classes of ``<data_dir>/train`` (sorted folder names: index = label).

    Raises:
        FileNotFoundError: the folder is missing or holds no class folder.
    """
    folder = Path(_split(data_dir, "train"))
    names = sorted(p.name for p in folder.iterdir() if p.is_dir())
    if not names:
        raise FileNotFoundError(f"{folder}: no class folders")
    return names


def folder_labels(data_dir: Path, split: str) -> list[int]:
    """The class index of each image of ``<data_dir>/<split>`` (its class folder's place among
    the training classes), for the input-blind baseline.

    Raises:
        FileNotFoundError: see ``class_names``.
    """
    index = {name: i for i, name in enumerate(class_names(data_dir))}
    folder = Path(_split(data_dir, split))
    return [index[c.name] for c in sorted(folder.iterdir()) if c.name in index
            for f in c.iterdir() if f.is_file()]


def _pipeline(dataset: ds.Dataset, operations: list, batch_size: int, workers: int,
              drop_remainder: bool) -> ds.Dataset:
    dataset = dataset.map(operations, input_columns="image", num_parallel_workers=workers)
    dataset = dataset.map(transforms.TypeCast(np.int32), input_columns="label")
    return dataset.batch(batch_size, drop_remainder=drop_remainder)


def train_dataset(data_dir: Path, config: Mapping[str, Any], rank: int,
                  world_size: int) -> ds.Dataset:
    """This rank's training batches ``(images [B, 3, crop, crop] float32, labels [B] int32)``:
    a fresh permutation every epoch (iterate one ``create_tuple_iterator(num_epochs=...)``)
    split over ``world_size`` shards (MindSpore pads a short shard with images of the others),
    whole batches of ``train_batch_size`` only.

    Raises:
        FileNotFoundError: ``train/`` is missing.
        ValueError: an unknown transform, or no whole batch in a shard.
    """
    ds.config.set_seed(int(setting(config, "seed", 0)))
    classes = {name: i for i, name in enumerate(class_names(data_dir))}
    dataset = ds.ImageFolderDataset(_split(data_dir, "train"), decode=True, shuffle=True,
                                    class_indexing=classes, num_shards=world_size,
                                    shard_id=rank)
    batch = int(config["train_batch_size"])
    dataset = _pipeline(dataset, train_transforms(config), batch,
                        max(1, int(setting(config, "num_workers", 0))), drop_remainder=True)
    if dataset.get_dataset_size() == 0:
        raise ValueError(f"config train_batch_size: {batch} is more than the images of one "
                         f"of {world_size} shards of {data_dir}/train")
    return dataset


def val_dataset(data_dir: Path, config: Mapping[str, Any], rank: int,
                world_size: int) -> ds.Dataset:
    """This rank's share of the validation images (every ``world_size``-th from ``rank``, no
    padding, so that the shards add up to the whole set exactly once), in batches of
    ``eval_batch_size``.

    Raises:
        FileNotFoundError: ``val/`` is missing.
    """
    folder = _split(data_dir, "val")
    classes = {name: i for i, name in enumerate(class_names(data_dir))}
    size = ds.ImageFolderDataset(folder, class_indexing=classes).get_dataset_size()
    sampler = ds.SubsetSampler(list(range(rank, size, world_size)))
    dataset = ds.ImageFolderDataset(folder, decode=True, sampler=sampler, class_indexing=classes)
    return _pipeline(dataset, eval_transforms(config), int(config["eval_batch_size"]),
                     max(1, int(setting(config, "num_workers", 0))), drop_remainder=False)
