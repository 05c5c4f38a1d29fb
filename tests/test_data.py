"""The digits data set written as ImageNet folders (format ``imagenet``) and read back by the vision
cases' real loader (``driver.torch.classification``) with resnet50's cpu profile."""

import pytest
import torch

from driver.torch.classification import eval_transform, image_folder, train_transform
from flagperf_ansible import datasets
from flagperf_ansible.config.cases import load_case, profile_of


@pytest.fixture(scope="module")
def config(project):
    """resnet50's effective configuration on `cpu` hardware: its profile over the standard."""
    case = load_case(project, "resnet50", "pytorch")
    _, params = profile_of(project, case, "cpu")
    return {**case.standard.params, **params}


def test_digits_layout(digits_dir):
    train = sorted(p.name for p in (digits_dir / "train").iterdir() if p.is_dir())
    assert train == [str(d) for d in range(10)]
    counts = {split: sum(1 for _ in (digits_dir / split).rglob("*.png")) for split in ("train", "val")}
    assert counts == {"train": 1437, "val": 360}
    assert datasets.check("imagenet", digits_dir) == []  # what preflight checks on a host


def test_loader_reads_tensors_and_labels(digits_dir, config):
    assert config["train_transform"] == "random_shift" and config["cache_images"]
    train = image_folder(digits_dir / "train", train_transform(config), cache=True)
    val = image_folder(digits_dir / "val", eval_transform(config), cache=True)
    assert len(train) == 1437 and len(val) == 360 and train.classes == val.classes
    image, label = val[0]
    size = config["val_crop_size"]
    assert image.shape == (3, size, size) and image.dtype == torch.float32
    assert 0 <= label < 10
    assert -1.0 - 1e-6 <= float(image.min()) and float(image.max()) <= 1.0 + 1e-6
    assert torch.equal(val[5][0], val[5][0])                 # evaluation is deterministic
    labels = {train[i][1] for i in range(0, len(train), 50)}
    assert len(labels) == 10


def test_imagenet_transforms_give_the_configured_size(digits_dir, config):
    config = {**config, "train_transform": "random_resized_crop", "train_crop_size": 24,
              "val_resize_size": 24, "val_crop_size": 24}
    train = image_folder(digits_dir / "train", train_transform(config), cache=False)
    val = image_folder(digits_dir / "val", eval_transform(config), cache=False)
    assert train[0][0].shape == (3, 24, 24)
    assert val[0][0].shape == (3, 24, 24)


def test_a_missing_split_folder_is_named(tmp_path, config):
    with pytest.raises(FileNotFoundError, match="no such data folder"):
        image_folder(tmp_path / "train", eval_transform(config), cache=False)
