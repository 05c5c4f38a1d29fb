"""A randomly initialised ResNetV2 in Big Transfer's (BiT) ``.npz`` checkpoint format.

The format is that of Google's released BiT weights (``BiT-M-R152x2.npz`` and kin), as
google-research/big_transfer reads them (``bit_pytorch/models.py``, ``ResNetV2.load_from`` and
``PreActBottleneck.load_from``) and as timm's ``ResNetV2.load_pretrained`` reads them
(``timm/models/resnetv2.py``, ``_load_weights``): one float32 array per key, convolution kernels
in TensorFlow's HWIO layout ``[kh, kw, in, out]``, under the prefix ``resnet/``:

- ``root_block/standardized_conv2d/kernel`` ``[7, 7, 3, 64 wf]`` (the stem; no norm: pre-activation)
- ``block{s}/unit{u:02d}/{a,b,c}/standardized_conv2d/kernel``: ``a`` 1x1 ``in -> mid``, ``b`` 3x3
  ``mid -> mid`` (the stride: 2 in unit01 of blocks 2-4), ``c`` 1x1 ``mid -> out``, with stage
  ``s`` (1-4) giving ``out = 256 wf 2^(s-1)`` and ``mid = out / 4``
- ``block{s}/unit{u:02d}/{a,b,c}/group_norm/{gamma,beta}``: the pre-activation GroupNorm before each
  convolution, so ``a`` has ``in`` channels, ``b`` and ``c`` have ``mid``
- ``block{s}/unit01/a/proj/standardized_conv2d/kernel`` ``[1, 1, in, out]`` (the shortcut projection)
- ``group_norm/{gamma,beta}`` ``[2048 wf]`` (the final pre-head norm)
- ``head/conv2d/kernel`` ``[1, 1, 2048 wf, classes]`` and ``head/conv2d/bias`` ``[classes]``

This is a random, not a pretrained, checkpoint: CPU profiles of the bigtransfer case start
from it so that the load path of the real case runs on tiny data. numpy only (it runs in
``flagperf-ansible data prepare``, without torch), and byte-for-byte reproducible so that its
SHA-256 can be pinned.
"""

from __future__ import annotations

import hashlib
import io
import zipfile
from pathlib import Path
from typing import Sequence

PREFIX = "resnet/"
STEM_CHANNELS, STAGE_CHANNELS = 64, (256, 512, 1024, 2048)  # times width_factor
BOTTLE_RATIO = 4  # mid = out / 4
# Fixed zip metadata: the earliest date a zip can hold, a regular file -rw-r--r--, made on Unix.
ZIP_DATE = (1980, 1, 1, 0, 0, 0)
ZIP_EXTERNAL_ATTR = (0o100644 << 16)
ZIP_CREATE_SYSTEM = 3


def bit_arrays(layers: Sequence[int], width_factor: int, num_classes: int = 21843,
               seed: int = 0) -> dict:
    """The checkpoint's arrays, ``{key: float32 ndarray}`` (keys and shapes: module docstring).

    Convolution kernels are He-normal, std ``sqrt(2 / fan_in)`` with ``fan_in = kh * kw * in``
    (He et al. 2015, "Delving Deep into Rectifiers"), drawn from ``numpy.random.RandomState(seed)``
    (the legacy generator, whose stream numpy keeps stable across versions) in sorted key order;
    GroupNorm gamma 1 and beta 0; the head's kernel and bias 0 (BiT's "zero head").

    Args:
        layers: units per stage, 4 ints (BiT-R152: ``[3, 8, 36, 3]``).
        width_factor: channel multiplier (BiT-R152x2: 2).
        num_classes: head outputs (BiT-M: 21843, ImageNet-21k).
        seed: the generator's seed.

    Raises:
        ValueError: ``layers`` is not 4 positive ints, or ``width_factor`` / ``num_classes``
            is not positive.
    """
    import numpy as np

    layers = [int(n) for n in layers]
    if len(layers) != 4 or min(layers) < 1:
        raise ValueError(f"layers must be 4 positive ints, got {layers}")
    if int(width_factor) < 1 or int(num_classes) < 1:
        raise ValueError(f"width_factor and num_classes must be positive, got "
                         f"{width_factor}, {num_classes}")
    wf = int(width_factor)
    kernels = {"root_block/standardized_conv2d/kernel": (7, 7, 3, STEM_CHANNELS * wf)}
    norms = {}
    in_chs = STEM_CHANNELS * wf
    for stage, (units, channels) in enumerate(zip(layers, STAGE_CHANNELS), start=1):
        out_chs = channels * wf
        mid_chs = out_chs // BOTTLE_RATIO
        for unit in range(1, units + 1):
            unit_in = in_chs if unit == 1 else out_chs
            key = f"block{stage}/unit{unit:02d}/"
            kernels[key + "a/standardized_conv2d/kernel"] = (1, 1, unit_in, mid_chs)
            kernels[key + "b/standardized_conv2d/kernel"] = (3, 3, mid_chs, mid_chs)
            kernels[key + "c/standardized_conv2d/kernel"] = (1, 1, mid_chs, out_chs)
            norms[key + "a/group_norm/"] = unit_in
            norms[key + "b/group_norm/"] = mid_chs
            norms[key + "c/group_norm/"] = mid_chs
            if unit == 1:  # channels change (stage 1) or stride 2 (stages 2-4): projection
                kernels[key + "a/proj/standardized_conv2d/kernel"] = (1, 1, unit_in, out_chs)
        in_chs = out_chs
    norms["group_norm/"] = in_chs

    rng = np.random.RandomState(seed)
    arrays = {}
    for key in sorted(kernels):
        shape = kernels[key]
        std = np.sqrt(2.0 / (shape[0] * shape[1] * shape[2]))
        arrays[PREFIX + key] = (rng.standard_normal(shape) * std).astype(np.float32)
    for key, channels in norms.items():
        arrays[PREFIX + key + "gamma"] = np.ones(channels, np.float32)
        arrays[PREFIX + key + "beta"] = np.zeros(channels, np.float32)
    arrays[PREFIX + "head/conv2d/kernel"] = np.zeros((1, 1, in_chs, int(num_classes)), np.float32)
    arrays[PREFIX + "head/conv2d/bias"] = np.zeros(int(num_classes), np.float32)
    return arrays


def write_bit_npz(path: str | Path, layers: Sequence[int], width_factor: int,
                  num_classes: int = 21843, seed: int = 0) -> str:
    """Write :func:`bit_arrays` to ``path`` as an ``.npz`` that ``numpy.load`` (so timm's
    ``load_pretrained``) reads; returns the file's SHA-256 (hex).

    Same arguments, same bytes on every machine: ``numpy.savez`` stamps each member with the
    current time, so the zip is written here instead, members in sorted key order, stored
    uncompressed (compressed bytes depend on the zlib build), each ``<key>.npy`` in .npy format
    1.0 with fixed date, permissions and creating system. Written to ``<path>.tmp`` and renamed,
    so an interrupted run leaves no partial checkpoint under ``path``.

    Raises:
        ValueError: see :func:`bit_arrays`.
        OSError: ``path`` cannot be written.
    """
    import numpy as np

    arrays = bit_arrays(layers, width_factor, num_classes, seed)
    path = Path(path)
    partial = path.with_name(path.name + ".tmp")
    with zipfile.ZipFile(partial, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as archive:
        for key in sorted(arrays):
            member = zipfile.ZipInfo(key + ".npy", date_time=ZIP_DATE)
            member.compress_type = zipfile.ZIP_STORED
            member.external_attr = ZIP_EXTERNAL_ATTR
            member.create_system = ZIP_CREATE_SYSTEM  # else 0 on Windows
            buffer = io.BytesIO()
            np.lib.format.write_array(buffer, arrays[key], version=(1, 0), allow_pickle=False)
            archive.writestr(member, buffer.getvalue())
    partial.replace(path)
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
