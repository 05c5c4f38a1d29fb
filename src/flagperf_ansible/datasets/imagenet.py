"""Format ``imagenet``: ImageNet (ILSVRC-2012) class folders, written with scikit-learn's digits.

Real layout: ``train/<wnid>/<wnid>_<n>.JPEG`` (1.28 M images, 1000 classes) and
``val/<wnid>/ILSVRC2012_val_<n>.JPEG`` (50 000, after moving them into class folders); what the
checker accepts: ``flagperf_host.checks.imagenet.check``.

Tiny data (``digits``): scikit-learn's bundled handwritten digits (1797 8x8 grey images, 10
classes, from the UCI "Optical Recognition of Handwritten Digits" set), split 80/20 stratified
with a fixed seed into ``train/`` and ``val/``, one PNG per image under ``<split>/<digit>/``
(the loader reads PNG as it reads JPEG; lossless keeps the 8x8 images as they are).

Beside the splits, the tiny data holds ``BiT-R14x1-random.npz``: a randomly initialised BiT
ResNetV2 (layers ``[1, 1, 1, 1]``, width 1, a 1000-class head, seed 0) in BiT's
``.npz`` checkpoint format (``bit_checkpoint``), the initial checkpoint of the bigtransfer
case's cpu profile, which fine-tunes from BiT-M-R152x2.npz on real data.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

from flagperf_ansible.datasets.bit_checkpoint import write_bit_npz
from flagperf_ansible.datasets.registry import Format
from flagperf_host import data_check

NAME = "imagenet"
# The bigtransfer cpu profile's init_checkpoint (pinned there by SHA-256): bit_checkpoint's args.
BIT_CHECKPOINT = "BiT-R14x1-random.npz"
BIT_LAYERS, BIT_WIDTH, BIT_CLASSES, BIT_SEED = (1, 1, 1, 1), 1, 1000, 0


def generate(target: Path) -> dict[str, int]:
    """Write the digits data set under ``target`` and return image counts per split
    (``{"train": 1437, "val": 360}``); also write ``target/BiT-R14x1-random.npz``, the
    bigtransfer cpu profile's initial checkpoint (module docstring), when it is missing.

    Idempotent: a split whose ``.complete`` marker exists is left as it is, and so is an
    existing checkpoint (the case's SHA-256 pin catches a damaged one).

    Raises:
        OSError: ``target`` cannot be written.
    """
    import numpy as np
    from PIL import Image
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    images = (digits.images * (255.0 / 16.0)).round().astype(np.uint8)
    train_idx, val_idx = train_test_split(
        np.arange(len(images)), test_size=0.2, stratify=digits.target, random_state=0)
    counts = {}
    for split, indices in (("train", train_idx), ("val", val_idx)):
        marker = target / split / ".complete"
        counts[split] = len(indices)
        if marker.is_file():
            continue
        for index in indices:
            folder = target / split / f"{digits.target[index]:d}"
            folder.mkdir(parents=True, exist_ok=True)
            Image.fromarray(images[index], mode="L").save(folder / f"{index:04d}.png")
        marker.write_text(f"{len(indices)}\n")
    if not (target / BIT_CHECKPOINT).is_file():
        write_bit_npz(target / BIT_CHECKPOINT, BIT_LAYERS, BIT_WIDTH, BIT_CLASSES, BIT_SEED)
    return counts


FORMAT = Format(
    name=NAME,
    description="ImageNet class folders: train/<class>/*.JPEG, val/<class>/*.JPEG "
                "(tiny: scikit-learn digits, 1437 + 360 PNG)",
    check=partial(data_check.check, NAME),
    generate=generate,
    aliases=("digits",),
)
