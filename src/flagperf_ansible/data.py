"""Data sets the platform can write itself, in the ImageNet folder layout.

``digits``: scikit-learn's bundled handwritten digits (1797 8x8 grey images, 10 classes, from
the UCI "Optical Recognition of Handwritten Digits" set), split 80/20 stratified with a fixed
seed into ``train/`` and ``val/``, one PNG per image under ``<split>/<class>/``.
"""

from __future__ import annotations

from pathlib import Path

DATASETS = ("digits",)


def prepare_digits(target: Path) -> dict[str, int]:
    """Write the digits data set under ``target`` and return image counts per split.

    Idempotent: an existing complete tree is left as it is.

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
    return counts


def prepare(name: str, target: Path) -> dict[str, int]:
    """Write data set ``name`` (one of ``DATASETS``) under ``target``."""
    if name != "digits":
        raise ValueError(f"unknown data set {name!r} (known: {', '.join(DATASETS)})")
    return prepare_digits(target)
