"""ImageNet as TFRecords: tensorflow/models' ImageNet TFRecords (tools/datasets/imagenet_to_gcs.py):
shards named <split>-NNNNN-of-MMMMM holding tf.train.Example records, in <split>/ folders as that
script writes them and FlagPerf's tensorflow2 loader reads them (<data_dir>/<split>/<split>*), or
flat at the root as official legacy resnet's imagenet_preprocessing.get_filenames lists them.
"""

import os
import re
import struct

from flagperf_host.checks.common import entries, image_kind, some
from flagperf_host.readers.tfrecord import example_features, tfrecord_first


TFRECORD_SPLITS = ("train", "validation")
TFRECORD_SHARD = re.compile(r"^(train|validation)-(\d{5})-of-(\d{5})$")
# The features official resnet's parse_example_proto cannot do without.
TFRECORD_FEATURES = (("image/encoded", "bytes"), ("image/class/label", "int64"))


def _tfrecord_shards(root, split):
    """``(folder relative to root, {name: (index, total)})`` of a split's shards: in ``<split>/``,
    else at the root; ``(None, {})`` when there are none."""
    for relative in (split, ""):
        folder = os.path.join(root, relative)
        if not os.path.isdir(folder):
            continue
        found = {}
        for name in entries(folder):
            match = TFRECORD_SHARD.match(name)
            if match and match.group(1) == split and os.path.isfile(os.path.join(folder, name)):
                found[name] = (int(match.group(2)), int(match.group(3)))
        if found:
            return relative, found
    return None, {}


def check(root):
    """ImageNet as TFRecords (tensorflow/models' imagenet_to_gcs.py layout): for train and
    validation, shards ``<split>-NNNNN-of-MMMMM`` in ``<split>/`` (or all at the root), every
    index 0..MMMMM-1 present with one total. The first shard's first record is read: its
    TFRecord framing (lengths and both CRC-32C) must be valid and it must be a
    ``tf.train.Example`` with ``image/encoded`` (bytes that start as an image file) and
    ``image/class/label`` (int64, 1-based as in ImageNet's 1..1000: the loaders subtract 1).
    """
    problems = []
    for split in TFRECORD_SPLITS:
        relative, shards = _tfrecord_shards(root, split)
        if not shards:
            problems.append("no %s shards (%s/%s-00000-of-NNNNN, or %s-00000-of-NNNNN at the "
                            "root)" % (split, split, split, split))
            continue
        where = "%s/" % relative if relative else "%s shards" % split
        totals = sorted(set(total for _, total in shards.values()))
        if len(totals) > 1:
            problems.append("%s: shards of different totals (%s)" % (
                where, ", ".join("of-%05d" % t for t in totals)))
            continue
        total = totals[0]
        have = set(index for index, _ in shards.values())
        missing = ["%s-%05d-of-%05d" % (split, i, total) for i in range(total) if i not in have]
        beyond = sorted(name for name, (index, _) in shards.items() if index >= total)
        if missing:
            problems.append("%s: %d of %d shards missing: %s" % (
                where, len(missing), total, some(missing)))
        if beyond:
            problems.append("%s: shard numbers beyond the total: %s" % (where, some(beyond)))
        first = min(shards, key=lambda name: shards[name][0])
        shown = "%s/%s" % (relative, first) if relative else first
        try:
            record = tfrecord_first(os.path.join(root, relative, first))
            if record is None:
                problems.append("%s: empty (no records)" % shown)
                continue
            features = example_features(record)
        except (ValueError, struct.error) as err:
            problems.append("%s: %s" % (shown, err))
            continue
        for name, kind in TFRECORD_FEATURES:
            found_kind, values = features.get(name, ("absent", []))
            if found_kind != kind or not values:
                problems.append("%s: the first record has no %s %s (it has: %s)" % (
                    shown, kind, name, some(sorted(features)) or "no features"))
        kind, encoded = features.get("image/encoded", ("absent", []))
        if kind == "bytes" and encoded and image_kind(encoded[0][:12]) is None:
            problems.append("%s: the first record's image/encoded is not an image file"
                            % shown)
        kind, labels = features.get("image/class/label", ("absent", []))
        if kind == "int64" and labels and labels[0] < 1:
            problems.append("%s: the first record's image/class/label is %d: labels are "
                            "1-based (ImageNet's 1..1000; the loaders subtract 1)"
                            % (shown, labels[0]))
    return problems
