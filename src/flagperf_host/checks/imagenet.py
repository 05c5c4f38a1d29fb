"""ImageNet (ILSVRC-2012) class folders, as torchvision's ImageFolder reads them."""

import os

from flagperf_host.checks.common import entries, head, image_kind, need, some, spread, subfolders


# Image files the ImageNet loaders take (torchvision's IMG_EXTENSIONS, benchmarks' ImageFolder).
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".ppm", ".pgm", ".bmp", ".tif", ".tiff", ".webp")


def check(root):
    """ImageNet (ILSVRC-2012) folders, as torchvision's ImageFolder reads them:
    ``train/<wnid>/<wnid>_<n>.JPEG`` and ``val/<wnid>/ILSVRC2012_val_<n>.JPEG`` (the validation
    images moved into class folders, e.g. by ``valprep.sh``). Class folders may have any name
    (``digits`` uses ``0``..``9`` and PNG files): the loader sorts them into class indices, so
    train/ and val/ must have the same ones. Every class folder holds an image; a sample of
    HEADER_SAMPLE images per split must start as an image file (any of the formats the loader
    decodes: ImageNet itself has a PNG named ``.JPEG``).
    """
    problems = []
    classes = {}
    for split in ("train", "val"):
        if not need(root, split, problems, folder=True):
            continue
        folder = os.path.join(root, split)
        names = subfolders(folder)
        if not names:
            loose = [n for n in entries(folder) if n.lower().endswith(IMAGE_SUFFIXES)]
            problems.append("%s/: no class folders%s" % (
                split, " (%d images lie loose: move them into <wnid>/ folders)" % len(loose)
                if loose else ""))
            continue
        classes[split] = names
        empty, firsts = [], []
        for name in names:
            first = None
            with os.scandir(os.path.join(folder, name)) as scan:  # stops at the first image
                for entry in scan:
                    if entry.name.lower().endswith(IMAGE_SUFFIXES) and entry.is_file():
                        first = entry.path
                        break
            if first is None:
                empty.append(name)
            else:
                firsts.append(first)
        if empty:
            problems.append("%s/: %d class folder(s) without images: %s" % (
                split, len(empty), some(empty)))
        bad = [os.path.relpath(p, root) for p in spread(firsts)
               if image_kind(head(p, 12)) is None]
        if bad:
            problems.append("%s/: not image files: %s" % (split, some(bad)))
    if len(classes) == 2 and classes["train"] != classes["val"]:
        only_train = sorted(set(classes["train"]) - set(classes["val"]))
        only_val = sorted(set(classes["val"]) - set(classes["train"]))
        problems.append("train/ and val/ have different class folders (only in train: %s; "
                        "only in val: %s)" % (some(only_train) or "none",
                                              some(only_val) or "none"))
    return problems
