"""Format ``imagenet_tfrecord``: ImageNet (ILSVRC-2012) as TFRecords of ``tf.train.Example``,
written with scikit-learn's digits.

Real layout: tensorflow/models' ImageNet TFRecords, as ``tools/datasets/imagenet_to_gcs.py``
writes them and official legacy resnet (``imagenet_preprocessing.py``) and FlagPerf's
tensorflow2 resnet50 read them: ``train/train-NNNNN-of-01024`` and
``validation/validation-NNNNN-of-00128`` (or the shards flat at the root), each record a
``tf.train.Example`` with ``image/encoded`` (JPEG bytes), ``image/format``, ``image/height``,
``image/width``, ``image/filename``, ``image/class/synset`` (the WordNet id) and
``image/class/label`` (int64, 1..1000: the loaders subtract 1). What the checker accepts:
``flagperf_host.checks.imagenet_tfrecord.check``.

Tiny data: the ``imagenet`` format's digits (``imagenet.py``: the same 1437 train / 360
validation split, the same PNG bytes of the same 8x8 grey images), so that a TensorFlow case and
the PyTorch case train and evaluate on the same images. Labels are the digit + 1, the synset the
digit (``"0"``..``"9"``, the ``imagenet`` format's class folder names), ``image/format`` ``PNG``;
train in ``TRAIN_SHARDS`` shards, validation in ``VALIDATION_SHARDS`` (contiguous runs of the
split's order), so that two workers each read shards of their own.

No TensorFlow here: ``encode_example`` writes the protobuf wire format and ``frame_record`` the
TFRecord framing (CRC-32C from ``google-crc32c``); tests read the files back with TensorFlow.
"""

from __future__ import annotations

import io
import struct
from functools import partial
from pathlib import Path
from typing import Iterable, Mapping, Sequence, Union

from flagperf_ansible.datasets.registry import Format
from flagperf_host import data_check
from flagperf_host.readers.protobuf import varint_bytes
from flagperf_host.readers.tfrecord import mask_crc

NAME = "imagenet_tfrecord"
TRAIN_SHARDS = 4
VALIDATION_SHARDS = 2

FeatureValue = Union[bytes, str, int, float, Sequence[bytes], Sequence[str], Sequence[int],
                     Sequence[float]]


# --- protobuf and TFRecord writing -----------------------------------------------------------

def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2)."""
    return varint_bytes(number << 3 | 2) + varint_bytes(len(payload)) + payload


def _feature(value: FeatureValue) -> bytes:
    """A serialized ``tf.train.Feature``: bytes/str -> BytesList (field 1), float -> FloatList
    (field 2, packed little-endian float32), int -> Int64List (field 3, packed varints)."""
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    if not values:
        raise ValueError("a feature needs at least one value")
    if all(isinstance(v, (bytes, str)) for v in values):
        listed = b"".join(_field(1, v.encode() if isinstance(v, str) else v) for v in values)
        return _field(1, listed)
    if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return _field(3, _field(1, b"".join(varint_bytes(v) for v in values)))
    if all(isinstance(v, float) for v in values):
        return _field(2, _field(1, struct.pack(f"<{len(values)}f", *values)))
    raise TypeError(f"feature values must be all bytes/str, all int or all float: {values!r}")


def encode_example(features: Mapping[str, FeatureValue]) -> bytes:
    """A serialized ``tf.train.Example`` (tensorflow/core/example/example.proto and
    feature.proto: ``Example.features`` = 1, ``Features.feature`` = 1, a map whose entries have
    key = 1 and value = 2), features in name order so the bytes are deterministic.

    Raises:
        TypeError: a feature mixes kinds or has a value of another type.
        ValueError: a feature with no value.
    """
    entries = b"".join(_field(1, _field(1, name.encode()) + _field(2, _feature(features[name])))
                       for name in sorted(features))
    return _field(1, entries)


def frame_record(data: bytes) -> bytes:
    """One TFRecord: uint64 length, masked CRC-32C of the length's 8 bytes, the data, masked
    CRC-32C of the data, integers little-endian (tensorflow/core/lib/io/record_writer.cc;
    the mask is ``flagperf_host.readers.tfrecord.mask_crc``)."""
    import google_crc32c

    length = struct.pack("<Q", len(data))
    return b"".join((length,
                     struct.pack("<I", mask_crc(google_crc32c.value(length))),
                     data,
                     struct.pack("<I", mask_crc(google_crc32c.value(data)))))


def write_tfrecord(path: Path, records: Iterable[bytes]) -> int:
    """Write ``records`` to the TFRecord file ``path`` (replaced); returns how many.

    Raises:
        OSError: the file cannot be written.
    """
    count = 0
    with open(path, "wb") as handle:
        for data in records:
            handle.write(frame_record(data))
            count += 1
    return count


def shard_name(split: str, index: int, total: int) -> str:
    """``<split>-NNNNN-of-MMMMM`` (imagenet_to_gcs.py's ``%s-%.5d-of-%.5d``)."""
    return f"{split}-{index:05d}-of-{total:05d}"


# --- the tiny data ---------------------------------------------------------------------------

def digits_split():
    """The ``imagenet`` format's digits: ``(images uint8 [1797, 8, 8], digits [1797],
    train indices [1437], validation indices [360])``, by the same calls as
    ``imagenet.generate`` (grey levels 0..16 scaled to 0..255, an 80/20 split stratified by
    digit, random_state 0); tests check that both formats hold the same images."""
    import numpy as np
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    images = (digits.images * (255.0 / 16.0)).round().astype(np.uint8)
    train_idx, val_idx = train_test_split(
        np.arange(len(images)), test_size=0.2, stratify=digits.target, random_state=0)
    return images, digits.target, train_idx, val_idx


def digit_example(image, digit: int, index: int) -> bytes:
    """The record of one digit image: its PNG bytes as ``imagenet.generate`` saves them
    (``<index:04d>.png``), label ``digit + 1``, synset the digit."""
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(image, mode="L").save(buffer, format="PNG")
    height, width = image.shape
    return encode_example({
        "image/encoded": buffer.getvalue(),
        "image/format": "PNG",
        "image/colorspace": "Grayscale",
        "image/channels": 1,
        "image/height": int(height),
        "image/width": int(width),
        "image/filename": f"{index:04d}.png",
        "image/class/label": int(digit) + 1,
        "image/class/synset": f"{int(digit):d}",
    })


def generate(target: Path) -> dict[str, int]:
    """Write the digits as ImageNet TFRecords under ``target`` (``train/`` and ``validation/``)
    and return record counts per split (``{"train": 1437, "validation": 360}``).

    Idempotent: a split whose ``.complete`` marker exists is left as it is.

    Raises:
        OSError: ``target`` cannot be written.
    """
    import numpy as np

    images, digits, train_idx, val_idx = digits_split()
    counts = {}
    for split, indices, shards in (("train", train_idx, TRAIN_SHARDS),
                                   ("validation", val_idx, VALIDATION_SHARDS)):
        folder = target / split
        marker = folder / ".complete"
        counts[split] = len(indices)
        if marker.is_file():
            continue
        folder.mkdir(parents=True, exist_ok=True)
        for shard, run in enumerate(np.array_split(indices, shards)):
            write_tfrecord(folder / shard_name(split, shard, shards),
                           (digit_example(images[i], int(digits[i]), int(i)) for i in run))
        marker.write_text(f"{len(indices)}\n")
    return counts


FORMAT = Format(
    name=NAME,
    description="ImageNet TFRecords: train/train-NNNNN-of-MMMMM, validation/validation-... "
                "of tf.train.Example (tiny: the digits of imagenet, 1437 + 360 PNG)",
    check=partial(data_check.check, NAME),
    generate=generate,
)
