"""ImageNet-layout data: ``<root>/<split>/<class>/<image>``, classes sorted by folder name.

A small replacement for torchvision's ImageFolder (torchvision is not available for every
vendor's torch build), with the two augmentations the configurations use.
"""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any

import torch
from PIL import Image

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp", ".webp"}


def find_samples(split_dir: Path) -> tuple[list[tuple[Path, int]], list[str]]:
    """``[(image path, class index)]`` and the class names of one split folder.

    Raises:
        FileNotFoundError: the folder is missing or holds no images.
    """
    if not split_dir.is_dir():
        raise FileNotFoundError(f"{split_dir}: no such data folder")
    classes = sorted(p.name for p in split_dir.iterdir() if p.is_dir())
    samples = [
        (path, index)
        for index, name in enumerate(classes)
        for path in sorted((split_dir / name).iterdir())
        if path.suffix.lower() in IMAGE_SUFFIXES
    ]
    if not samples:
        raise FileNotFoundError(f"{split_dir}: no images in class folders")
    return samples, classes


class ImageFolder(torch.utils.data.Dataset):
    """Images as float tensors ``[3, image_size, image_size]``, normalised, with labels.

    Args:
        split_dir: e.g. ``<data_dir>/train``.
        config: the case configuration (``image_size``, ``augment``, ``random_shift``,
            ``normalize_mean``, ``normalize_std``, ``cache_images``).
        train: apply training augmentation; evaluation uses a deterministic resize (and the
            standard 0.875 centre crop with ``random_resized_crop``).
    """

    def __init__(self, split_dir: Path, config: dict[str, Any], train: bool) -> None:
        self.samples, self.classes = find_samples(split_dir)
        self.size = int(config["image_size"])
        self.augment = config["augment"] if train else "none"
        self.crop_eval = config["augment"] == "random_resized_crop"
        self.shift = int(config.get("random_shift", 0))
        self.mean = torch.tensor(config["normalize_mean"]).view(3, 1, 1)
        self.std = torch.tensor(config["normalize_std"]).view(3, 1, 1)
        self.cache: dict[int, Image.Image] | None = {} if config.get("cache_images") else None

    def __len__(self) -> int:
        return len(self.samples)

    def _load(self, index: int) -> Image.Image:
        if self.cache is not None and index in self.cache:
            return self.cache[index]
        with Image.open(self.samples[index][0]) as image:
            image = image.convert("RGB")
        if self.cache is not None:
            self.cache[index] = image
        return image

    def _random_resized_crop(self, image: Image.Image) -> Image.Image:
        # Inception-style crop: scale 8-100 % of the area, aspect 3/4..4/3, then flip.
        width, height = image.size
        for _ in range(10):
            area = width * height * random.uniform(0.08, 1.0)
            ratio = math.exp(random.uniform(math.log(3 / 4), math.log(4 / 3)))
            w, h = round(math.sqrt(area * ratio)), round(math.sqrt(area / ratio))
            if 0 < w <= width and 0 < h <= height:
                left, top = random.randint(0, width - w), random.randint(0, height - h)
                image = image.crop((left, top, left + w, top + h))
                break
        image = image.resize((self.size, self.size), Image.BILINEAR)
        return image.transpose(Image.FLIP_LEFT_RIGHT) if random.random() < 0.5 else image

    def _eval_resize(self, image: Image.Image) -> Image.Image:
        if not self.crop_eval:
            return image.resize((self.size, self.size), Image.BILINEAR)
        resized = round(self.size / 0.875)
        width, height = image.size
        scale = resized / min(width, height)
        image = image.resize((max(1, round(width * scale)), max(1, round(height * scale))),
                             Image.BILINEAR)
        left = (image.size[0] - self.size) // 2
        top = (image.size[1] - self.size) // 2
        return image.crop((left, top, left + self.size, top + self.size))

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        image = self._load(index)
        if self.augment == "random_resized_crop":
            image = self._random_resized_crop(image)
        elif self.augment == "random_shift":
            image = image.resize((self.size, self.size), Image.BILINEAR)
        else:
            image = self._eval_resize(image)
        data = torch.frombuffer(bytearray(image.tobytes()), dtype=torch.uint8)
        tensor = data.view(self.size, self.size, 3).permute(2, 0, 1).float().div_(255.0)
        tensor = (tensor - self.mean) / self.std
        if self.augment == "random_shift" and self.shift:
            # Translate by up to `shift` pixels, filling with the normalised background (black).
            fill = float(((0.0 - self.mean) / self.std).mean())
            padded = torch.nn.functional.pad(tensor, (self.shift,) * 4, value=fill)
            dx, dy = random.randint(0, 2 * self.shift), random.randint(0, 2 * self.shift)
            tensor = padded[:, dy:dy + self.size, dx:dx + self.size]
        return tensor, self.samples[index][1]
