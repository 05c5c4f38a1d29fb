"""Format ``coco2017``: COCO 2017 detection and instance segmentation.

Real layout: ``annotations/instances_{train,val}2017.json`` (``info``, ``licenses``, ``images``
[{id, file_name, width, height, ...}], ``annotations`` [{id, image_id, category_id,
segmentation (polygons), area, bbox [x, y, w, h], iscrowd}], ``categories``) with
``train2017/`` (118 287 images) and ``val2017/`` (5000), named ``<12-digit id>.jpg``; what the
checker accepts: ``flagperf_host.checks.coco2017.check``.

Tiny data: scikit-image's ``coins`` photograph (public domain, Galerie Numismatique) with its 24
coins as objects of one category, ``coin``: masks from the watershed segmentation of
scikit-image's gallery (Sobel edges, markers below 30 and above 150), polygons from their
contours. The photograph is cut between its second and third rows of coins (``SPLIT``, where no
coin lies), so that validation never shows a pixel that training saw: train2017 is its top part
(12 coins) and that part's three flips (4 images); val2017 its bottom part (12 other coins, 1
image). pycocotools reads the annotations back (tests/test_datasets.py).

Beside them, ``checkpoint/resnet10-random.pth``: the initial backbone of the detection cases'
cpu profiles (:func:`write_backbone_checkpoint`), a ``torch.save``'d ResNet state dict as
torchvision's ``resnet50-0676ba61.pth`` is, with random weights, pinned by SHA-256 in their
``config/cpu.yaml``.
"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

from flagperf_ansible.datasets.registry import Format
from flagperf_host import data_check

NAME = "coco2017"
CATEGORY = {"id": 1, "name": "coin", "supercategory": "money"}
# Regions smaller than this (pixels) are segmentation specks, not coins (the smallest coin
# covers about 1100).
MIN_AREA = 200
#: The row where the photograph is cut into training and validation parts: its second row of
#: coins ends at row 145, its third begins at 156.
SPLIT = 150


def coin_labels():
    """The coins photograph (uint8 ``[303, 384]``) and its coin label image (0 background,
    1..24 coins).
    """
    import numpy as np
    from scipy import ndimage
    from skimage import data, filters, segmentation

    image = data.coins()
    markers = np.zeros_like(image)
    markers[image < 30], markers[image > 150] = 1, 2
    coins = ndimage.binary_fill_holes(segmentation.watershed(filters.sobel(image), markers) == 2)
    labels, _ = ndimage.label(coins)
    return image, labels


def _annotations(labels, image_id: int, first_id: int) -> list[dict]:
    """COCO annotations (polygon segmentation) of each region of ``labels`` of at least
    MIN_AREA pixels."""
    import numpy as np
    from skimage import measure

    found = []
    for region in range(1, int(labels.max()) + 1):
        mask = labels == region
        area = int(mask.sum())
        if area < MIN_AREA:
            continue
        # Contours of the mask padded by one pixel, at level 0.5: they run along pixel edges'
        # midpoints, so the polygon rasterises back to the mask.
        polygons = []
        for contour in measure.find_contours(np.pad(mask, 1).astype(float), 0.5):
            contour = measure.approximate_polygon(contour - 1, tolerance=0.5)
            if len(contour) >= 3:
                polygons.append([round(float(v), 2) for row, col in contour for v in (col, row)])
        rows, cols = np.nonzero(mask)
        bbox = [float(cols.min()), float(rows.min()), float(cols.max() - cols.min() + 1),
                float(rows.max() - rows.min() + 1)]
        found.append({"id": first_id + len(found), "image_id": image_id,
                      "category_id": CATEGORY["id"], "segmentation": polygons,
                      "area": float(area), "bbox": bbox, "iscrowd": 0})
    return found


def generate(target: Path) -> dict[str, int]:
    """Write the coins data set in the COCO 2017 layout under ``target``; returns image and
    annotation counts per split.

    Raises:
        OSError: ``target`` cannot be written.
        ImportError: torch is not installed (:func:`write_backbone_checkpoint`).
    """
    import numpy as np
    from PIL import Image

    image, labels = coin_labels()
    top, top_labels = image[:SPLIT], labels[:SPLIT]
    views = {
        "train2017": [(top, top_labels), (top[:, ::-1], top_labels[:, ::-1]),
                      (top[::-1], top_labels[::-1]), (top[::-1, ::-1], top_labels[::-1, ::-1])],
        "val2017": [(image[SPLIT:], labels[SPLIT:])],
    }
    (target / "annotations").mkdir(parents=True, exist_ok=True)
    counts, image_id, annotation_id = {}, 1, 1
    for split, pictures in views.items():
        (target / split).mkdir(exist_ok=True)
        images, annotations = [], []
        for picture, picture_labels in pictures:
            file_name = f"{image_id:012d}.jpg"
            rgb = np.repeat(np.ascontiguousarray(picture)[:, :, None], 3, axis=2)
            Image.fromarray(rgb).save(target / split / file_name, quality=90)
            height, width = picture.shape
            images.append({"license": 1, "file_name": file_name, "coco_url": "",
                           "height": height, "width": width, "date_captured": "",
                           "flickr_url": "", "id": image_id})
            found = _annotations(picture_labels, image_id, annotation_id)
            annotations += found
            image_id, annotation_id = image_id + 1, annotation_id + len(found)
        document = {
            "info": {"description": "flagperf-ansible tiny COCO: scikit-image coins",
                     "version": "1.0", "year": 2017, "contributor": "", "date_created": ""},
            "licenses": [{"id": 1, "name": "Public Domain", "url": ""}],
            "images": images, "annotations": annotations, "categories": [CATEGORY]}
        path = target / "annotations" / f"instances_{split}.json"
        path.write_text(json.dumps(document, separators=(",", ":")), encoding="utf-8")
        counts[split] = len(images)
        counts[f"{split} annotations"] = len(annotations)
    write_backbone_checkpoint(target / BACKBONE_CHECKPOINT)
    counts["backbone checkpoint"] = 1
    return counts


#: The cpu profiles' backbone checkpoint, relative to the data folder.
BACKBONE_CHECKPOINT = "checkpoint/resnet10-random.pth"


def backbone_arrays(seed: int = 0) -> dict:
    """A ResNet-10 (torchvision's ``ResNet(BasicBlock, [1, 1, 1, 1])``) up to ``layer3``, the
    stages the cpu profiles' FPN reads, as ``{state-dict key: float32 ndarray}`` in torchvision's
    names and shapes (``conv1.weight`` ``[64, 3, 7, 7]``, ``bn1.*`` ``[64]``,
    ``layer{s}.0.conv{1,2}.weight``, ``layer{s}.0.bn{1,2}.*``, ``layer{2,3}.0.downsample.{0,1}.*``;
    stage s of 64 x 2^(s-1) channels): 1,235,392 numbers.

    Convolutions are He-normal with ``fan_out`` as torchvision initialises ResNets
    (``kaiming_normal_(mode="fan_out")``: std ``sqrt(2 / (out * kh * kw))``), drawn from
    ``numpy.random.RandomState(seed)`` (a stream numpy keeps stable) in sorted key order;
    BatchNorm weight and running variance 1, bias and running mean 0.
    """
    import numpy as np

    shapes = {"conv1.weight": (64, 3, 7, 7)}
    norms = {"bn1": 64}
    inputs = 64
    for stage in (1, 2, 3):
        width = 64 * 2 ** (stage - 1)
        block = f"layer{stage}.0"
        shapes[f"{block}.conv1.weight"] = (width, inputs, 3, 3)
        shapes[f"{block}.conv2.weight"] = (width, width, 3, 3)
        norms[f"{block}.bn1"] = norms[f"{block}.bn2"] = width
        if inputs != width:  # stride 2 and more channels: a 1x1 projection on the shortcut
            shapes[f"{block}.downsample.0.weight"] = (width, inputs, 1, 1)
            norms[f"{block}.downsample.1"] = width
        inputs = width
    for norm, channels in norms.items():
        for name, value in (("weight", 1.0), ("bias", 0.0), ("running_mean", 0.0),
                            ("running_var", 1.0)):
            shapes[f"{norm}.{name}"] = (channels, value)
    generator = np.random.RandomState(seed)
    arrays = {}
    for key in sorted(shapes):
        shape = shapes[key]
        if key.endswith(".weight") and len(shape) == 4:
            std = (2.0 / (shape[0] * shape[2] * shape[3])) ** 0.5
            arrays[key] = generator.normal(0.0, std, shape).astype(np.float32)
        else:
            arrays[key] = np.full(shape[0], shape[1], dtype=np.float32)
    return arrays


def write_backbone_checkpoint(path: Path, seed: int = 0) -> None:
    """Save :func:`backbone_arrays` with ``torch.save`` (the format ``torch.load`` reads with
    ``weights_only``), byte for byte the same on every run of the same torch, so that the cpu
    profiles can pin its SHA-256.

    Raises:
        ImportError: torch is not installed (the ``local`` extra).
        OSError: ``path`` cannot be written.
    """
    import torch

    state = {key: torch.from_numpy(array) for key, array in backbone_arrays(seed).items()}
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(state, path)


FORMAT = Format(
    name=NAME,
    description="COCO 2017: annotations/instances_{train,val}2017.json, train2017/ val2017/ "
                "*.jpg (tiny: scikit-image coins, 24 masks; and the detection cpu profiles' "
                "random ResNet-10 checkpoint)",
    check=partial(data_check.check, NAME),
    generate=generate,
)
