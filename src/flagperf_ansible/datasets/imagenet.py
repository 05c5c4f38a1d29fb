"""Format ``imagenet``: ImageNet (ILSVRC-2012) class folders, written with scikit-learn's digits.

Real layout: ``train/<wnid>/<wnid>_<n>.JPEG`` (1.28 M images, 1000 classes) and
``val/<wnid>/ILSVRC2012_val_<n>.JPEG`` (50 000, after moving them into class folders); what the
checker accepts: ``flagperf_host.checks.imagenet.check``.

Tiny data (``digits``): scikit-learn's bundled handwritten digits (1797 8x8 grey images, 10
classes, from the UCI "Optical Recognition of Handwritten Digits" set), split 80/20 stratified
with a fixed seed into ``train/`` and ``val/``, one PNG per image under ``<split>/<digit>/``
(the loader reads PNG as it reads JPEG; lossless keeps the 8x8 images as they are).

Synthetic data of ImageNet's shape (:func:`write_synthetic`, for throughput checks such as
``scripts/gpu_check.py``): RGB JPEG images of a chosen size in ``classes`` class folders named
as WordNet ids are (``n00000000``, ...), each image a smooth random pattern: an 8x8 random
image scaled up (bicubic) with a little noise, about 10-20 KB at 256x256, cheaper to decode than
ImageNet's photographs (about 110 KB), so that a loader keeps up at least as well as on the real
set.

Beside the splits, the tiny data holds ``BiT-R14x1-random.npz``: a randomly initialised BiT
ResNetV2 (layers ``[1, 1, 1, 1]``, width 1, a 1000-class head, seed 0) in BiT's
``.npz`` checkpoint format (``bit_checkpoint``), the initial checkpoint of the bigtransfer
case's cpu profile, which fine-tunes from BiT-M-R152x2.npz on real data.
"""

from __future__ import annotations

import os
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


#: WordNet-id-like class folder names of the synthetic set: ``n00000000``, ``n00000001``, ...
SYNTHETIC_CLASS = "n{:08d}"


def _synthetic_images(target: str, split: str, indices: range, classes: int, size: int,
                      seed: int) -> None:
    """Write the synthetic images ``indices`` of ``split`` (see :func:`write_synthetic`)."""
    import numpy as np
    from PIL import Image

    for index in indices:
        rng = np.random.default_rng([seed, 0 if split == "train" else 1, index])
        small = Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8), mode="RGB")
        image = np.asarray(small.resize((size, size), Image.Resampling.BICUBIC), dtype=np.int16)
        image = image + rng.integers(-8, 9, image.shape, dtype=np.int16)
        wnid = SYNTHETIC_CLASS.format(index % classes)
        name = f"{wnid}_{index}.JPEG" if split == "train" else f"ILSVRC2012_val_{index:08d}.JPEG"
        Image.fromarray(image.clip(0, 255).astype(np.uint8), mode="RGB").save(
            Path(target) / split / wnid / name, format="JPEG", quality=90)


def write_synthetic(target: Path, train: int, val: int, classes: int = 1000, size: int = 256,
                    seed: int = 0, workers: int | None = None) -> dict[str, int]:
    """Write a synthetic data set of ImageNet's shape under ``target``: ``train`` and ``val``
    RGB JPEG images of ``size`` x ``size`` pixels (ImageNet's are about 400 x 350; its
    evaluation resizes to 256), image ``i`` of a split in class ``i % classes`` (module
    docstring). Deterministic in ``seed``; ``workers`` processes write it (default: one per
    CPU; at most one per 500 images).

    Idempotent: a split whose ``.complete`` marker holds the same parameters is left as it is.

    Returns:
        ``{"train": train, "val": val}``.

    Raises:
        ValueError: a split has fewer images than classes (each class folder needs one), or a
            count or the size is not positive.
        OSError: ``target`` cannot be written.
    """
    if min(train, val) < classes or classes < 1 or size < 1:
        raise ValueError(f"synthetic ImageNet: train {train} and val {val} images must each be "
                         f"at least the {classes} classes (and classes, size positive)")
    from concurrent.futures import ProcessPoolExecutor

    target = Path(target)
    counts = {"train": train, "val": val}
    for split, count in counts.items():
        marker = target / split / ".complete"
        stamp = f"{count} images, {classes} classes, {size} px, seed {seed}\n"
        if marker.is_file() and marker.read_text() == stamp:
            continue
        for wnid in range(classes):
            (target / split / SYNTHETIC_CLASS.format(wnid)).mkdir(parents=True, exist_ok=True)
        jobs = max(1, min(workers or os.cpu_count() or 1, count // 500))
        chunks = [range(start, count, jobs) for start in range(jobs)]
        if jobs == 1:
            _synthetic_images(str(target), split, chunks[0], classes, size, seed)
        else:
            with ProcessPoolExecutor(jobs) as pool:
                for done in [pool.submit(_synthetic_images, str(target), split, chunk, classes,
                                         size, seed) for chunk in chunks]:
                    done.result()
        marker.write_text(stamp)
    return counts


FORMAT = Format(
    name=NAME,
    description="ImageNet class folders: train/<class>/*.JPEG, val/<class>/*.JPEG "
                "(tiny: scikit-learn digits, 1437 + 360 PNG)",
    check=partial(data_check.check, NAME),
    generate=generate,
    aliases=("digits",),
)
