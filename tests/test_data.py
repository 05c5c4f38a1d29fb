"""The digits data set written as ImageNet folders (format ``imagenet``) and read back by the case's
real loader."""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks/resnet50/pytorch"))

from image_folder import ImageFolder  # noqa: E402

from flagperf_ansible import datasets  # noqa: E402

CONFIG = {"image_size": 32, "augment": "random_shift", "random_shift": 4,
          "normalize_mean": [0.5] * 3, "normalize_std": [0.5] * 3, "cache_images": True}


def test_digits_layout(digits_dir):
    train = sorted(p.name for p in (digits_dir / "train").iterdir() if p.is_dir())
    assert train == [str(d) for d in range(10)]
    counts = {split: sum(1 for _ in (digits_dir / split).rglob("*.png")) for split in ("train", "val")}
    assert counts == {"train": 1437, "val": 360}
    assert datasets.check("imagenet", digits_dir) == []  # what preflight checks on a host


def test_loader_reads_tensors_and_labels(digits_dir):
    train = ImageFolder(digits_dir / "train", CONFIG, train=True)
    val = ImageFolder(digits_dir / "val", CONFIG, train=False)
    assert len(train) == 1437 and len(val) == 360 and train.classes == val.classes
    image, label = val[0]
    assert image.shape == (3, 32, 32) and image.dtype == torch.float32
    assert 0 <= label < 10
    assert -1.0 - 1e-6 <= float(image.min()) and float(image.max()) <= 1.0 + 1e-6
    assert torch.equal(val[5][0], val[5][0])                 # evaluation is deterministic
    labels = {train[i][1] for i in range(0, len(train), 50)}
    assert len(labels) == 10


def test_imagenet_transforms_give_the_configured_size(digits_dir):
    config = {**CONFIG, "augment": "random_resized_crop", "image_size": 24}
    assert ImageFolder(digits_dir / "train", config, train=True)[0][0].shape == (3, 24, 24)
    assert ImageFolder(digits_dir / "val", config, train=False)[0][0].shape == (3, 24, 24)
