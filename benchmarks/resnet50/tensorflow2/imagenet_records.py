"""The input pipeline of the tensorflow2 resnet50 case: ImageNet TFRecords (data format
``imagenet_tfrecord``) through ``tf.data``, as tensorflow/models' official resnet reads them.

Files: ``<data_dir>/<split>/<split>-NNNNN-of-MMMMM`` (imagenet_to_gcs.py, FlagPerf's loader), or
the shards flat in ``data_dir`` (official legacy resnet), ``split`` ``train`` or ``validation``.
Records: ``tf.train.Example`` with ``image/encoded`` (any format ``tf.io.decode_image`` reads:
JPEG, PNG...) and ``image/class/label`` (1-based: class = label - 1, as official resnet's
``parse_record``).

Each worker (input pipeline) reads its own shards: the files are split over the workers when
there are at least as many as workers, else the records (every worker then reads every file).
Training batches come from a repeated, shuffled stream, ``drop_remainder``; an epoch is
``num_train_examples // global batch`` updates on every worker (as official resnet's
``steps_per_epoch``). Evaluation reads each worker's share once per evaluation, padded with
weight-0 images to the same number of whole batches on every worker, so each collective step
has every worker in it and the top-1 counts every validation image exactly once.

Augmentation (config ``train_transform``): ``inception_crop`` (tensorflow/models'
``preprocess_for_train``: a random box covering 5-100 % of the image with aspect ratio 3/4-4/3,
resized to ``image_size``, flipped with ``hflip_prob``) or ``random_shift`` (the whole image
resized to ``image_size``, padded by ``random_shift`` pixels, a random ``image_size`` crop: the
pytorch cpu profile's). Evaluation: tensorflow/models' centre crop, the central
``image_size / (image_size + val_crop_padding)`` of the shorter side resized to ``image_size``.
Both normalise with ``normalize_mean``/``normalize_std`` (fractions of 255). Random draws are
stateless, seeded per element from ``seed`` and the worker, so a run's data order and crops
repeat.
"""

from __future__ import annotations

import math
import re
import struct
from pathlib import Path
from typing import Any, Mapping

import tensorflow as tf

SPLITS = ("train", "validation")
SHARD = re.compile(r"^(train|validation)-(\d{5})-of-(\d{5})$")
FEATURES = {
    "image/encoded": tf.io.FixedLenFeature((), tf.string, ""),
    "image/class/label": tf.io.FixedLenFeature((), tf.int64, -1),
}


def shard_files(data_dir: Path, split: str) -> list[Path]:
    """The split's shard files in shard order: ``<data_dir>/<split>/``, else ``data_dir``.

    Raises:
        FileNotFoundError: no shards of the split, or some of its shards missing.
    """
    for folder in (data_dir / split, data_dir):
        if not folder.is_dir():
            continue
        shards = {}
        for path in folder.iterdir():
            match = SHARD.match(path.name)
            if match and match.group(1) == split and path.is_file():
                shards[int(match.group(2))] = (int(match.group(3)), path)
        if shards:
            totals = {total for total, _ in shards.values()}
            total = max(totals)
            if len(totals) > 1 or sorted(shards) != list(range(total)):
                raise FileNotFoundError(f"{folder}: {split} shards incomplete ({len(shards)} "
                                        f"files for {total} shards)")
            return [shards[index][1] for index in range(total)]
    raise FileNotFoundError(f"{data_dir}: no {split} shards ({split}/{split}-00000-of-NNNNN)")


def count_records(path: Path) -> int:
    """The records in a TFRecord file, counted by its framing (each record: 8-byte length, 4-byte
    CRC, the data, 4-byte CRC); reads 12 bytes a record.

    Raises:
        ValueError: the file ends inside a record.
    """
    count, size = 0, path.stat().st_size
    with open(path, "rb") as handle:
        at = 0
        while at < size:
            header = handle.read(12)
            if len(header) < 12:
                raise ValueError(f"{path}: truncated record header at byte {at}")
            (length,) = struct.unpack("<Q", header[:8])
            at += 16 + length
            if at > size:
                raise ValueError(f"{path}: truncated record at byte {at - 16 - length}")
            handle.seek(at)
            count += 1
    return count


def worker_files(files: list[Path], workers: int, index: int) -> tuple[list[Path], bool]:
    """``(files this worker reads, whether it then takes every workers-th record)``."""
    if workers <= 1:
        return files, False
    if len(files) >= workers:
        return files[index::workers], False
    return files, True


def worker_records(counts: list[int], workers: int, index: int) -> int:
    """The records worker ``index`` reads of files holding ``counts`` records (worker_files)."""
    files, by_record = worker_files(list(range(len(counts))), workers, index)
    if by_record:
        return len(range(index, sum(counts), workers))
    return sum(counts[i] for i in files)


def _records(files: list[Path], workers: int, index: int, shuffle_files: bool, seed: int,
             cycle_length: int) -> tf.data.Dataset:
    mine, by_record = worker_files(files, workers, index)
    names = tf.data.Dataset.from_tensor_slices([str(p) for p in mine])
    if shuffle_files:
        names = names.shuffle(len(mine), seed=seed, reshuffle_each_iteration=True)
    records = names.interleave(tf.data.TFRecordDataset, cycle_length=max(1, cycle_length),
                               block_length=1, num_parallel_calls=tf.data.AUTOTUNE)
    return records.shard(workers, index) if by_record else records


def parse(record: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """A serialized Example -> ``(image uint8 [H, W, 3], class int32 = label - 1)``."""
    parsed = tf.io.parse_single_example(record, FEATURES)
    image = tf.io.decode_image(parsed["image/encoded"], channels=3, expand_animations=False)
    return image, tf.cast(parsed["image/class/label"] - 1, tf.int32)


def record_labels(files: list[Path]) -> list[int]:
    """The class (``label - 1``) of every record of ``files``, for the input-blind baseline
    (only the label feature is parsed)."""
    label = {"image/class/label": FEATURES["image/class/label"]}
    return [int(tf.io.parse_single_example(record, label)["image/class/label"]) - 1
            for record in tf.data.TFRecordDataset([str(p) for p in files])]


def _normalise(image: tf.Tensor, config: Mapping[str, Any]) -> tf.Tensor:
    mean = tf.constant(config["normalize_mean"], tf.float32) * 255.0
    std = tf.constant(config["normalize_std"], tf.float32) * 255.0
    return (tf.cast(image, tf.float32) - mean) / std


def train_transform(config: Mapping[str, Any]):
    """``(image uint8 [H, W, 3], seed int64 [2]) -> float32 [size, size, 3]``.

    Raises:
        ValueError: an unknown ``train_transform``.
    """
    size = int(config["image_size"])
    kind = str(config.get("train_transform") or "inception_crop")
    shift = int(config.get("random_shift") or 0)
    flip = float(config.get("hflip_prob", 0.5) or 0.0)
    if kind not in ("inception_crop", "random_shift"):
        raise ValueError(f"config train_transform: {kind!r}, expected inception_crop or "
                         "random_shift")

    def transform(image: tf.Tensor, seed: tf.Tensor) -> tf.Tensor:
        seeds = tf.random.experimental.stateless_split(seed, 3)
        if kind == "inception_crop":
            begin, extent, _ = tf.image.stateless_sample_distorted_bounding_box(
                tf.shape(image), tf.constant([[[0.0, 0.0, 1.0, 1.0]]]), seed=seeds[0],
                min_object_covered=0.1, aspect_ratio_range=(0.75, 1.33),
                area_range=(0.05, 1.0), max_attempts=100, use_image_if_no_bounding_boxes=True)
            image = tf.slice(image, begin, extent)
            image = tf.image.resize(image, (size, size), method="bilinear")
        else:
            image = tf.image.resize(image, (size, size), method="bilinear")
            if shift:
                image = tf.pad(image, [[shift, shift], [shift, shift], [0, 0]])
                image = tf.image.stateless_random_crop(image, (size, size, 3), seed=seeds[1])
        if flip > 0:
            draw = tf.random.stateless_uniform((), seed=seeds[2])
            image = tf.cond(draw < flip, lambda: tf.image.flip_left_right(image), lambda: image)
        return _normalise(image, config)
    return transform


def eval_transform(config: Mapping[str, Any]):
    """``image uint8 [H, W, 3] -> float32 [size, size, 3]``: tensorflow/models' centre crop
    (``decode_and_center_crop``: ``size / (size + val_crop_padding)`` of the shorter side),
    resized, normalised."""
    size = int(config["image_size"])
    padding = int(config.get("val_crop_padding") or 0)

    def transform(image: tf.Tensor) -> tf.Tensor:
        shape = tf.shape(image)
        height, width = shape[0], shape[1]
        crop = tf.cast(size / (size + padding)
                       * tf.cast(tf.minimum(height, width), tf.float32), tf.int32)
        top, left = (height - crop + 1) // 2, (width - crop + 1) // 2
        image = tf.image.crop_to_bounding_box(image, top, left, crop, crop)
        return _normalise(tf.image.resize(image, (size, size), method="bilinear"), config)
    return transform


def train_dataset(files: list[Path], config: Mapping[str, Any], workers: int, index: int,
                  batch_size: int, seed: int) -> tf.data.Dataset:
    """This worker's endless stream of training batches ``(images [batch, size, size, 3],
    classes [batch])``, ``batch_size`` a replica's batch."""
    records = _records(files, workers, index, True, seed + index,
                       int(config.get("interleave_cycle_length") or 10))
    images = records.map(parse, num_parallel_calls=tf.data.AUTOTUNE)
    if config.get("cache_images"):
        images = images.cache()
    images = images.shuffle(int(config.get("shuffle_buffer_size") or 10000),
                            seed=seed + index, reshuffle_each_iteration=True).repeat()
    seeds = tf.data.Dataset.random(seed=seed * 7919 + index).batch(2)
    transform = train_transform(config)
    return (tf.data.Dataset.zip((images, seeds))
            .map(lambda pair, draw: (transform(pair[0], draw), pair[1]),
                 num_parallel_calls=tf.data.AUTOTUNE)
            .batch(batch_size, drop_remainder=True)
            .prefetch(tf.data.AUTOTUNE))


def eval_steps(counts: list[int], workers: int, batch_size: int, local_replicas: int) -> int:
    """Collective evaluation steps covering the largest worker's share, each step a batch of
    ``batch_size`` on each of ``local_replicas`` replicas."""
    largest = max(worker_records(counts, workers, i) for i in range(workers))
    return max(1, math.ceil(largest / (batch_size * local_replicas)))


def eval_dataset(files: list[Path], config: Mapping[str, Any], workers: int, index: int,
                 batch_size: int, steps: int, local_replicas: int) -> tf.data.Dataset:
    """This worker's validation share, over and over, as batches ``(images, classes,
    weights)``: each pass is ``steps * local_replicas`` batches, weight 1 for each real image and
    0 for the padding after them. One iterator serves every evaluation (one pass each)."""
    size = int(config["image_size"])
    transform = eval_transform(config)
    images = (_records(files, workers, index, False, 0,
                       int(config.get("interleave_cycle_length") or 10))
              .map(parse, num_parallel_calls=tf.data.AUTOTUNE)
              .map(lambda image, label: (transform(image), label, tf.constant(1.0)),
                   num_parallel_calls=tf.data.AUTOTUNE))
    padding = tf.data.Dataset.from_tensors(
        (tf.zeros((size, size, 3), tf.float32), tf.constant(0, tf.int32), tf.constant(0.0)))
    one_pass = images.concatenate(padding.repeat()).take(steps * local_replicas * batch_size)
    if config.get("cache_images"):
        one_pass = one_pass.cache()  # after take: each pass reads the cache to its end
    return (one_pass.repeat()
            .batch(batch_size, drop_remainder=True)
            .prefetch(tf.data.AUTOTUNE))
