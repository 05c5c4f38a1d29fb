"""The bigtransfer case's model and its random BiT checkpoint: the .npz that
``datasets.bit_checkpoint`` writes is reproducible byte for byte and is what timm's
``ResNetV2.load_pretrained`` reads."""

from __future__ import annotations

import functools
import hashlib
import re
from pathlib import Path

import numpy as np
import pytest

from case_model import case_model
from flagperf_ansible.datasets.bit_checkpoint import write_bit_npz

ROOT = Path(__file__).resolve().parents[1]
LAYERS, WIDTH = [1, 1, 1, 1], 1
# A small head keeps the files small; timm skips a head whose class count differs from the model's.
CLASSES = 16


@pytest.fixture(scope="module")
def build_model():
    """The case's ``build_model``, loaded under its own name (every case has a model.py)."""
    return case_model("bigtransfer").build_model


def test_writing_twice_gives_the_same_bytes(tmp_path):
    first, second = tmp_path / "a.npz", tmp_path / "b.npz"
    digest = write_bit_npz(first, LAYERS, WIDTH, CLASSES, seed=0)
    assert write_bit_npz(second, LAYERS, WIDTH, CLASSES, seed=0) == digest
    assert first.read_bytes() == second.read_bytes()
    assert hashlib.sha256(first.read_bytes()).hexdigest() == digest
    assert write_bit_npz(second, LAYERS, WIDTH, CLASSES, seed=1) != digest


def test_timm_loads_every_key(tmp_path):
    import torch
    from timm.layers import StdConv2d
    from timm.models.resnetv2 import ResNetV2

    path = tmp_path / "bit.npz"
    write_bit_npz(path, LAYERS, WIDTH, CLASSES)
    model = ResNetV2(layers=LAYERS, width_factor=WIDTH, num_classes=CLASSES, stem_type="fixed",
                     conv_layer=functools.partial(StdConv2d, eps=1e-8))
    model.load_pretrained(str(path))  # KeyError on a missing key, RuntimeError on a bad shape
    with np.load(path) as weights:
        keys = set(weights.files)
        stem = weights["resnet/root_block/standardized_conv2d/kernel"]
        last_unit = weights["resnet/block4/unit01/b/standardized_conv2d/kernel"]
    assert torch.equal(model.stem.conv.weight, torch.from_numpy(stem.transpose(3, 2, 0, 1)))
    assert torch.equal(model.stages[3].blocks[0].conv2.weight,
                       torch.from_numpy(last_unit.transpose(3, 2, 0, 1)))
    # Every array is one parameter timm copies: (conv, GroupNorm gamma + beta) x 3 per unit,
    # a projection per stage, the stem, the final norm's two, the head's two.
    units = sum(LAYERS)
    assert len(keys) == 9 * units + len(LAYERS) + 1 + 2 + 2
    assert {k for k in keys if "proj" in k} == {
        f"resnet/block{s}/unit01/a/proj/standardized_conv2d/kernel" for s in range(1, 5)}


def test_build_model_starts_from_the_checkpoint_with_a_zero_head(tmp_path, build_model):
    import torch

    write_bit_npz(tmp_path / "bit.npz", LAYERS, WIDTH, num_classes=21843)
    config = {"layers": LAYERS, "width_factor": WIDTH, "init_checkpoint": "bit.npz"}
    model = build_model(config, 10, tmp_path)
    head = model.get_classifier()
    assert not head.weight.any() and not head.bias.any()
    with np.load(tmp_path / "bit.npz") as weights:
        stem = torch.from_numpy(weights["resnet/root_block/standardized_conv2d/kernel"])
    assert torch.equal(model.stem.conv.weight, stem.permute(3, 2, 0, 1))
    model.eval()
    with torch.no_grad():
        logits = model(torch.randn(2, 3, 32, 32))
    assert logits.shape == (2, 10)


def test_a_missing_checkpoint_is_named(tmp_path, build_model):
    config = {"layers": LAYERS, "width_factor": WIDTH, "init_checkpoint": "BiT-M-R152x2.npz"}
    with pytest.raises(FileNotFoundError, match=re.escape(str(tmp_path / "BiT-M-R152x2.npz"))):
        build_model(config, 10, tmp_path)
