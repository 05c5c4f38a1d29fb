"""COCO 2017 detection and segmentation: annotations and image folders."""

import codecs
import json
import os

from flagperf_host.checks.common import entries, head, image_kind, need, some, spread


COCO_HEAD = 1 << 20


def _first_json_item(text, key):
    """The first element of the list under ``"key"`` in the JSON object text ``text`` (a prefix
    of a file), or None when the list does not start or its first element ends beyond it."""
    decoder = json.JSONDecoder()
    marker = '"%s"' % key
    at = text.find(marker)
    while at >= 0:
        rest = text[at + len(marker):].lstrip()
        if rest.startswith(":"):
            rest = rest[1:].lstrip()
            if rest.startswith("["):
                rest = rest[1:].lstrip()
                try:
                    return decoder.raw_decode(rest)[0]
                except ValueError:
                    return None
        at = text.find(marker, at + 1)
    return None


def check(root):
    """COCO 2017 detection / segmentation: ``annotations/instances_train2017.json`` and
    ``annotations/instances_val2017.json`` (a JSON object with ``info``, ``licenses``, ``images``,
    ``annotations``, ``categories``), images ``train2017/<12-digit id>.jpg`` and
    ``val2017/<id>.jpg``. Reads the first MiB of each annotation file only: it must be a JSON
    object whose ``images`` list starts there (as in the official files) with an entry naming a
    ``file_name`` that exists in the split's folder; a sample of each folder's images must be
    JPEG files.
    """
    problems = []
    for split in ("train2017", "val2017"):
        annotations = "annotations/instances_%s.json" % split
        have_json = need(root, annotations, problems)
        have_folder = need(root, split, problems, folder=True)
        if have_folder:
            folder = os.path.join(root, split)
            images = [n for n in entries(folder) if n.lower().endswith((".jpg", ".jpeg"))]
            if not images:
                problems.append("%s/: no .jpg images" % split)
            bad = [n for n in spread(images)
                   if image_kind(head(os.path.join(folder, n), 12)) != "jpeg"]
            if bad:
                problems.append("%s/: not JPEG files: %s" % (split, some(bad)))
        if not have_json:
            continue
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        text = decoder.decode(head(os.path.join(root, annotations), COCO_HEAD))
        if not text.lstrip().startswith("{"):
            problems.append("%s: not a JSON object (starts with %r)" % (annotations, text[:16]))
            continue
        first = _first_json_item(text, "images")
        if not isinstance(first, dict) or not isinstance(first.get("file_name"), str):
            problems.append('%s: no "images" list with a file_name in its first MiB (the '
                            'official files start with info, licenses, images)' % annotations)
            continue
        for key in ("id", "width", "height"):
            if not isinstance(first.get(key), int):
                problems.append('%s: first image has no integer "%s"' % (annotations, key))
        if have_folder and not os.path.isfile(os.path.join(root, split, first["file_name"])):
            problems.append("%s: first image %s is not in %s/" % (
                annotations, first["file_name"], split))
    return problems
