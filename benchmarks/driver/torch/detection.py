"""Object detection and instance segmentation on COCO 2017, shared by the detection training
cases (faster_rcnn, retinanet, mask_rcnn): the data, the ResNet-FPN backbone started from a
checkpoint in the data folder, the detector (case.yml's ``model.builder``, completed by
:func:`build_detector`), the optimizer, FlagPerf's schedule and COCO mAP; :func:`detection_case`
returns the trainer's ``TrainingCase``, :func:`run` is the cases' driver.

The recipe is FlagPerf's (``training/benchmarks/{faster_rcnn,retinanet,mask_rcnn}/pytorch``),
itself torchvision's detection references (``pytorch/vision`` ``references/detection``:
``coco_utils.py``, ``presets.py``, ``engine.py``): images as tensors in [0, 1] with a random
horizontal flip (the detector's own ``GeneralizedRCNNTransform`` resizes and normalises), COCO
category ids as labels (91 classes with the background), SGD over the parameters that require
gradients, a linear warmup from 1/1000 over the first ``min(1000, updates per epoch - 1)``
updates, the learning rate times ``lr_gamma`` at each epoch of ``lr_steps``, and COCO's bbox (and
segm) AP@[.5:.95] by pycocotools' ``COCOeval`` after every epoch.

Configuration keys (a case's ``config/standard.yaml`` lists those it sets):

* data: ``hflip_prob`` (0.5), ``vflip_prob`` (0), ``train_repeats`` (each training image this
  many times per epoch, differently augmented; 1), ``cache_images`` (keep decoded images in
  memory: small data sets only), ``aspect_ratio_group_factor`` (training batches of images of
  one aspect-ratio group, :class:`GroupedBatchSampler`, with ``2k`` bins; negative or absent:
  batches in the sampler's order, whatever their shapes);
* backbone (:func:`resnet_fpn_backbone`): ``backbone_block`` (``bottleneck``: ResNet-50's,
  ``basic``: ResNet-18's), ``backbone_layers`` (blocks per stage, 4 ints), ``returned_layers``
  (the stages the FPN reads), ``trainable_backbone_layers`` (0-5), ``frozen_batchnorm``,
  ``fpn_channels``, ``init_checkpoint`` (a ``torch.save``'d ResNet state dict, relative to the
  data folder; null: random weights);
* detector: ``num_classes`` (with the background; COCO: 91), ``min_size`` (an int, or a list:
  one drawn per training image, torchvision evaluating at the last), ``max_size``,
  ``anchor_sizes`` (one list per feature map), ``aspect_ratios``; R-CNN keys in
  :func:`rcnn_options`; :func:`build_detector` the heads' own keys;
* optimizer and schedule: ``learning_rate``, ``momentum``, ``weight_decay``,
  ``lr_warmup_steps`` (1000), ``lr_warmup_factor`` (0.001), ``lr_steps`` (epochs), ``lr_gamma``,
  ``clip_grad_norm`` (the trainer's backward hook; none in FlagPerf's recipe);
* evaluation: ``iou_types`` (``[bbox]``, ``[bbox, segm]``); the first one's AP is the target
  metric (:func:`detection_case`'s ``metric``), the others are reported beside it.
"""

from __future__ import annotations

import bisect
import contextlib
import io
import math
import random
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import torch
import torchvision
from torchvision.models.detection.anchor_utils import AnchorGenerator
from torchvision.models.detection.backbone_utils import BackboneWithFPN, _resnet_fpn_extractor
from torchvision.models.detection.faster_rcnn import FastRCNNPredictor, TwoMLPHead
from torchvision.ops import MultiScaleRoIAlign
from torchvision.ops import misc as misc_ops
from torchvision.ops.feature_pyramid_network import LastLevelP6P7

from driver.case_io import setting
from driver.convergence import Target
from driver.torch.optimizers import make_optimizer
from driver.torch.trainer import Trainer, TrainingCase, TrainingPlan

BLOCKS = {"bottleneck": torchvision.models.resnet.Bottleneck,
          "basic": torchvision.models.resnet.BasicBlock}
IOU_TYPES = ("bbox", "segm")


def _quiet():
    """pycocotools prints its progress on stdout: kept out of the rank's log."""
    return contextlib.redirect_stdout(io.StringIO())


# -- data ------------------------------------------------------------------------------------

class CocoDetection(torch.utils.data.Dataset):
    """One split of a COCO 2017 folder (``<root>/<split>2017/``,
    ``<root>/annotations/instances_<split>2017.json``) as ``(image_id, image, target)``:
    ``image`` float ``[3, H, W]`` in [0, 1], ``target`` torchvision's detection target
    (``boxes`` ``[N, 4]`` x1 y1 x2 y2 in pixels, ``labels`` ``[N]`` category ids, with
    ``masks`` ``[N, H, W]`` uint8 when ``masks``). Crowd regions and empty boxes are left out;
    training splits drop images without a usable annotation (FlagPerf's
    ``_coco_remove_images_without_annotations``).

    Raises:
        FileNotFoundError: the image folder or the annotation file is missing.
    """

    def __init__(self, root: Path, split: str, *, train: bool, masks: bool, hflip: float = 0.0,
                 vflip: float = 0.0, repeats: int = 1, cache: bool = False) -> None:
        from pycocotools.coco import COCO

        self.folder = root / f"{split}2017"
        annotations = root / "annotations" / f"instances_{split}2017.json"
        for path in (self.folder, annotations):
            if not path.exists():
                raise FileNotFoundError(f"{path}: no such file or folder (COCO 2017 layout)")
        with _quiet():
            self.coco = COCO(str(annotations))
        ids = sorted(self.coco.imgs)
        if train:
            ids = [i for i in ids if any(
                not a["iscrowd"] and a["bbox"][2] > 1 and a["bbox"][3] > 1
                for a in self.coco.imgToAnns[i])]
        self.ids = ids
        self.masks, self.hflip, self.vflip = masks, hflip, vflip
        self.repeats = max(1, int(repeats))
        self.cache: dict[int, tuple] | None = {} if cache else None

    def __len__(self) -> int:
        return len(self.ids) * self.repeats

    def _load(self, image_id: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        if self.cache is not None and image_id in self.cache:
            image, target = self.cache[image_id]
            return image, {key: value.clone() for key, value in target.items()}
        from PIL import Image

        with Image.open(self.folder / self.coco.imgs[image_id]["file_name"]) as picture:
            image = torchvision.transforms.functional.pil_to_tensor(picture.convert("RGB"))
        image = image.float() / 255.0
        target = self.target(image_id, image.shape[-2], image.shape[-1])
        if self.cache is not None:  # the flips below change the target: cached as read
            self.cache[image_id] = image, {key: value.clone() for key, value in target.items()}
        return image, target

    def target(self, image_id: int, height: int, width: int) -> dict[str, torch.Tensor]:
        """The detection target of one image (see the class docstring)."""
        anns = [a for a in self.coco.imgToAnns[image_id] if not a["iscrowd"]]
        boxes = torch.tensor([a["bbox"] for a in anns], dtype=torch.float32).reshape(-1, 4)
        boxes[:, 2:] += boxes[:, :2]
        boxes[:, 0::2].clamp_(0, width)
        boxes[:, 1::2].clamp_(0, height)
        keep = (boxes[:, 2] > boxes[:, 0]) & (boxes[:, 3] > boxes[:, 1])
        target = {"boxes": boxes[keep],
                  "labels": torch.tensor([a["category_id"] for a in anns],
                                         dtype=torch.int64)[keep]}
        if self.masks:
            masks = [torch.from_numpy(self.coco.annToMask(a)) for a in anns]
            target["masks"] = (torch.stack(masks) if masks else
                               torch.zeros((0, height, width), dtype=torch.uint8))[keep]
        return target

    def __getitem__(self, index: int):
        image_id = self.ids[index % len(self.ids)]
        image, target = self._load(image_id)
        height, width = image.shape[-2:]
        if self.hflip and random.random() < self.hflip:
            image = image.flip(-1)
            target["boxes"][:, [0, 2]] = width - target["boxes"][:, [2, 0]]
            if "masks" in target:
                target["masks"] = target["masks"].flip(-1)
        if self.vflip and random.random() < self.vflip:
            image = image.flip(-2)
            target["boxes"][:, [1, 3]] = height - target["boxes"][:, [3, 1]]
            if "masks" in target:
                target["masks"] = target["masks"].flip(-2)
        return image_id, image, target


def collate(batch: list) -> tuple[torch.Tensor, list, list]:
    """``[(image_id, image, target)]`` -> ``(image_ids [B], [image], [target])``: images of
    different sizes stay a list (the detector batches them); the ids come first so that the
    trainer counts ``B`` samples."""
    ids, images, targets = zip(*batch)
    return torch.tensor(ids, dtype=torch.int64), list(images), list(targets)


def aspect_ratio_groups(ratios: Sequence[float], k: int) -> list[int]:
    """The group of each image's aspect ratio (width / height): its bin among the ``2k + 1``
    edges ``2 ** linspace(-1, 1, 2k + 1)`` (``k`` 0: the edge 1.0, wide or tall), so ``2k + 2``
    groups. torchvision's detection references (``group_by_aspect_ratio.py``
    ``create_aspect_ratio_groups``), which FlagPerf's detection cases use with ``k`` 3."""
    edges = [2.0 ** (-1.0 + i / k) for i in range(2 * k + 1)] if k > 0 else [1.0]
    return [bisect.bisect_right(edges, ratio) for ratio in ratios]


class GroupedBatchSampler(torch.utils.data.Sampler):
    """Batches of ``batch_size`` indices of one group each, in the order ``sampler`` yields
    them, as torchvision's detection references build them (``GroupedBatchSampler``): an index
    joins its group's buffer, a full buffer is a batch; when the sampler is exhausted, the
    fullest buffers are completed with earlier indices of their group (repeated as needed)
    until there are ``len(sampler) // batch_size`` batches, so an epoch has a fixed length.
    Images of one aspect-ratio group batch with less padding (the detector pads each batch to
    its largest image).

    Args:
        sampler: the per-index order (random, distributed, ...); its ``set_epoch`` is the
            trainer's to call.
        group_ids: the group of each index of the data set (:func:`aspect_ratio_groups`).
        batch_size: indices per batch.
    """

    def __init__(self, sampler: torch.utils.data.Sampler, group_ids: Sequence[int],
                 batch_size: int) -> None:
        self.sampler, self.group_ids, self.batch_size = sampler, list(group_ids), batch_size

    def __iter__(self):
        buffers: dict[int, list[int]] = defaultdict(list)
        seen: dict[int, list[int]] = defaultdict(list)
        made = 0
        for index in self.sampler:
            group = self.group_ids[index]
            buffers[group].append(index)
            seen[group].append(index)
            if len(buffers[group]) == self.batch_size:
                batch = buffers.pop(group)
                buffers[group] = []  # re-entered last, as torchvision's buffers are
                made += 1
                yield batch
        remaining = len(self) - made
        for group, buffer in sorted(buffers.items(), key=lambda item: len(item[1]),
                                    reverse=True):
            if remaining <= 0:
                break
            missing = self.batch_size - len(buffer)
            pool = seen[group] * math.ceil(missing / len(seen[group]))
            remaining -= 1
            yield buffer + pool[:missing]

    def __len__(self) -> int:
        return len(self.sampler) // self.batch_size


# -- model -----------------------------------------------------------------------------------

def load_resnet_state(path: Path) -> dict[str, torch.Tensor]:
    """A ResNet state dict saved with ``torch.save`` (torchvision's ``resnet50-0676ba61.pth``,
    or the cpu profile's), read without unpickling code (``weights_only``).

    Raises:
        FileNotFoundError: no such file.
        ValueError: the file is not a state dict of tensors.
    """
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such backbone checkpoint (init_checkpoint)")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # torch raises RuntimeError, UnpicklingError, zipfile errors
        raise ValueError(f"{path}: not a torch.save'd state dict ({error})") from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ValueError(f"{path}: not a state dict of tensors")
    return state


def resnet_fpn_backbone(config: Mapping[str, Any], data_dir: Path | None,
                        retinanet: bool = False) -> BackboneWithFPN:
    """The ResNet-FPN backbone as torchvision's ``*_resnet50_fpn`` builders make it with an
    ImageNet backbone: ``FrozenBatchNorm2d`` (``frozen_batchnorm``), the first
    ``5 - trainable_backbone_layers`` of conv1, layer1..layer4 frozen, an FPN of
    ``fpn_channels`` over ``returned_layers`` (with a max-pool level; RetinaNet: P6 and P7 from
    the FPN's last output instead). The ResNet weights come from ``init_checkpoint`` under
    ``data_dir`` before the stages are cut: every weight of the kept stages must be in it
    (the classifier ``fc`` and unused stages may be).

    Output: ``OrderedDict`` of feature maps ``[B, fpn_channels, H / 2^(k+1), W / 2^(k+1)]``.

    Raises:
        ValueError: an unknown ``backbone_block``, a checkpoint missing weights of the model,
            or one of another shape.
        FileNotFoundError: see :func:`load_resnet_state`.
    """
    block = str(setting(config, "backbone_block", "bottleneck"))
    if block not in BLOCKS:
        raise ValueError(f"config backbone_block: {block!r}, expected one of {', '.join(BLOCKS)}")
    layers = [int(n) for n in setting(config, "backbone_layers", [3, 4, 6, 3])]
    frozen = bool(setting(config, "frozen_batchnorm", True))
    norm = misc_ops.FrozenBatchNorm2d if frozen else torch.nn.BatchNorm2d
    resnet = torchvision.models.resnet.ResNet(BLOCKS[block], layers, norm_layer=norm)
    checkpoint = config.get("init_checkpoint")
    returned = [int(n) for n in setting(config, "returned_layers", [1, 2, 3, 4])]
    if checkpoint:
        path = Path(data_dir or ".") / str(checkpoint)
        state = load_resnet_state(path)
        used = ("conv1.", "bn1.", *(f"layer{n}." for n in range(1, max(returned) + 1)))
        wanted = {k for k in resnet.state_dict() if k.startswith(used)
                  and not k.endswith("num_batches_tracked")}
        missing = sorted(wanted - set(state))
        if missing:
            raise ValueError(f"{path}: lacks {len(missing)} weights of the backbone, e.g. "
                             f"{missing[0]}")
        try:
            resnet.load_state_dict(state, strict=False)
        except RuntimeError as error:
            raise ValueError(f"{path}: {error}") from None
    channels = int(setting(config, "fpn_channels", 256))
    extra = LastLevelP6P7(channels, channels) if retinanet else None
    if channels != 256:
        return _narrow_fpn(resnet, config, returned, extra, channels)
    return _resnet_fpn_extractor(resnet, int(setting(config, "trainable_backbone_layers", 3)),
                                 returned_layers=returned, extra_blocks=extra)


def _narrow_fpn(resnet, config, returned, extra, channels) -> BackboneWithFPN:
    # _resnet_fpn_extractor fixes 256 FPN channels; this is its body with another width.
    trainable = int(setting(config, "trainable_backbone_layers", 3))
    to_train = ["layer4", "layer3", "layer2", "layer1", "conv1"][:trainable]
    if trainable == 5:
        to_train.append("bn1")
    for name, parameter in resnet.named_parameters():
        if all(not name.startswith(layer) for layer in to_train):
            parameter.requires_grad_(False)
    in_channels = resnet.inplanes // 8  # layer1's output channels
    return BackboneWithFPN(resnet, {f"layer{k}": str(v) for v, k in enumerate(returned)},
                           [in_channels * 2 ** (k - 1) for k in returned], channels,
                           extra_blocks=extra)


def detector_options(config: Mapping[str, Any],
                     anchor_key: str = "rpn_anchor_generator") -> dict[str, Any]:
    """The keyword arguments of torchvision's detectors the configuration sets: ``min_size``,
    ``max_size`` and, as ``anchor_key`` (R-CNNs: ``rpn_anchor_generator``, RetinaNet:
    ``anchor_generator``), an ``AnchorGenerator`` when ``anchor_sizes`` is given (sizes in
    pixels, one list per feature map; ``aspect_ratios`` the same for all)."""
    options: dict[str, Any] = {}
    for key in ("min_size", "max_size"):
        if config.get(key) is not None:
            value = config[key]
            options[key] = tuple(int(v) for v in value) if isinstance(value, list) else int(value)
    if config.get("anchor_sizes"):
        sizes = tuple(tuple(int(s) for s in level) for level in config["anchor_sizes"])
        ratios = tuple(float(r) for r in setting(config, "aspect_ratios", [0.5, 1.0, 2.0]))
        options[anchor_key] = AnchorGenerator(sizes, (ratios,) * len(sizes))
    return options


#: R-CNN keyword arguments a configuration may set (torchvision's defaults otherwise).
RCNN_KEYS = ("rpn_pre_nms_top_n_train", "rpn_pre_nms_top_n_test", "rpn_post_nms_top_n_train",
             "rpn_post_nms_top_n_test", "rpn_batch_size_per_image", "box_batch_size_per_image",
             "box_detections_per_img")


def rcnn_options(config: Mapping[str, Any], out_channels: int, masks: bool = False) -> dict:
    """The keyword arguments of torchvision's ``FasterRCNN`` / ``MaskRCNN`` the configuration
    sets, besides :func:`detector_options`: the ``RCNN_KEYS``; RoI pooling over the FPN levels
    of ``returned_layers`` (torchvision's default reads 4); with ``representation_size``, a box
    head of that width (torchvision: 1024) and its predictor for ``num_classes`` (the result's
    ``num_classes`` is then None: the predictor holds it, as torchvision requires).
    """
    num_classes = int(config["num_classes"])
    options: dict[str, Any] = {"num_classes": num_classes, **detector_options(config)}
    options.update({key: int(config[key]) for key in RCNN_KEYS if config.get(key) is not None})
    levels = [str(k) for k in range(len(setting(config, "returned_layers", [1, 2, 3, 4])))]
    if len(levels) != 4:
        options["box_roi_pool"] = MultiScaleRoIAlign(levels, 7, 2)
        if masks:
            options["mask_roi_pool"] = MultiScaleRoIAlign(levels, 14, 2)
    if config.get("representation_size"):
        size = int(config["representation_size"])
        options["box_head"] = TwoMLPHead(out_channels * 7 * 7, size)
        options["box_predictor"] = FastRCNNPredictor(size, num_classes)
        options["num_classes"] = None
    return options


# -- optimisation ----------------------------------------------------------------------------

def lr_factor(step: int, plan: TrainingPlan, config: Mapping[str, Any]) -> float:
    """The learning rate at optimizer update ``step`` (0-based) as a factor of
    ``learning_rate``: torchvision's detection references as FlagPerf runs them, a linear warmup
    from ``lr_warmup_factor`` over ``min(lr_warmup_steps, updates per epoch - 1)`` updates of the
    first epoch (``utils.warmup_lr_scheduler``), times ``lr_gamma`` once per epoch of
    ``lr_steps`` reached (``MultiStepLR`` stepped at the end of every epoch; epochs 0-based)."""
    per_epoch = max(plan.steps_per_epoch, 1e-9)
    warmup = min(int(setting(config, "lr_warmup_steps", 1000)), math.ceil(per_epoch) - 1)
    factor = 1.0
    if step < warmup:
        start = float(setting(config, "lr_warmup_factor", 0.001))
        alpha = step / warmup
        factor = start * (1 - alpha) + alpha
    epoch = math.floor(step / per_epoch)
    gamma = float(setting(config, "lr_gamma", 0.1))
    return factor * gamma ** sum(epoch >= int(m) for m in setting(config, "lr_steps", []))


# -- evaluation ------------------------------------------------------------------------------

def coco_results(image_ids: Sequence[int], outputs: Sequence[Mapping[str, torch.Tensor]],
                 iou_types: Sequence[str]) -> list[dict]:
    """Detections in COCO's result format: ``{image_id, category_id, bbox [x, y, w, h],
    score}`` (with ``segmentation``, an RLE of the mask above 0.5, for ``segm``)."""
    import pycocotools.mask as mask_util

    results = []
    for image_id, output in zip(image_ids, outputs):
        boxes = output["boxes"].float().cpu()
        boxes[:, 2:] -= boxes[:, :2]
        scores, labels = output["scores"].float().cpu().tolist(), output["labels"].cpu().tolist()
        rles = []
        if "segm" in iou_types:
            masks = (output["masks"][:, 0] > 0.5).cpu().numpy().astype(np.uint8)
            for mask in masks:
                rle = mask_util.encode(np.asfortranarray(mask))
                rle["counts"] = rle["counts"].decode("ascii")
                rles.append(rle)
        for k, box in enumerate(boxes.tolist()):
            result = {"image_id": int(image_id), "category_id": int(labels[k]), "bbox": box,
                      "score": scores[k]}
            if rles:
                result["segmentation"] = rles[k]
            results.append(result)
    return results


def coco_map(coco, results: list[dict], iou_type: str) -> float:
    """COCO AP@[.5:.95] of ``results`` (:func:`coco_results`) against the ground truth ``coco``
    (pycocotools' ``COCOeval``, ``stats[0]``), a fraction in [0, 1]; 0 without detections."""
    from pycocotools.cocoeval import COCOeval

    if not results:
        return 0.0
    # loadRes reads a result by its first key among bbox and segmentation: one kind per call.
    other = "segmentation" if iou_type == "bbox" else "bbox"
    results = [{k: v for k, v in result.items() if k != other} for result in results]
    with _quiet():
        evaluation = COCOeval(coco, coco.loadRes(results), iou_type)
        evaluation.evaluate()
        evaluation.accumulate()
        evaluation.summarize()
    return max(0.0, float(evaluation.stats[0]))  # -1: no ground truth at all


def layout_prior(train_coco, val_coco) -> list[dict]:
    """The best detector blind to the pixels, in COCO's result format: every non-crowd box of
    the training split, at its place relative to its image's size, put on every validation image
    (scaled to its size) with its category, all scored 1 (what a model learns of where objects
    lie, and nothing of what an image shows)."""
    relative = []
    for annotation in train_coco.loadAnns(train_coco.getAnnIds(iscrowd=False)):
        image = train_coco.imgs[annotation["image_id"]]
        x, y, w, h = annotation["bbox"]
        relative.append((annotation["category_id"], x / image["width"], y / image["height"],
                         w / image["width"], h / image["height"]))
    return [{"image_id": image_id, "category_id": category, "score": 1.0,
             "bbox": [x * image["width"], y * image["height"], w * image["width"],
                      h * image["height"]]}
            for image_id, image in sorted(val_coco.imgs.items())
            for category, x, y, w, h in relative]


def _gather(items: list, world_size: int) -> list:
    if world_size <= 1 or not torch.distributed.is_initialized():
        return items
    everyone: list = [None] * world_size
    torch.distributed.all_gather_object(everyone, items)
    return [item for part in everyone for item in part]


# -- the case ----------------------------------------------------------------------------------

def detection_case(config: Mapping[str, Any], data_dir: Path,
                   build_model: Callable[[], torch.nn.Module], *, metric: str,
                   config_key: str, world_size: int = 1,
                   model_info: Mapping[str, Any] | None = None) -> TrainingCase:
    """The detection case on ``<data_dir>/{train2017,val2017}`` and their annotations.

    Args:
        config: the effective configuration (keys in the module docstring).
        build_model: a torchvision detector: ``model(images, targets)`` in training returns
            its losses, ``model(images)`` in evaluation its detections.
        metric: the target metric's name (``mAP``: FINISHED ``final_mAP``), the AP of the first
            of ``iou_types``; the AP of each other type is reported as ``final_map_<type>``
            (with ``target_map_<type>`` when the config has it), without bearing on
            ``converged``.
        config_key: the config key holding the target (an AP fraction, e.g. 0.36).
        world_size: ranks evaluating shards of the validation set (detections are gathered).

    Evaluation runs through the trainer's sums: each validation batch's detections are kept on
    the rank, and the metric (called on every rank after the sums are reduced) gathers them
    from all ranks and scores them with ``COCOeval`` against the split's annotations.

    Raises:
        FileNotFoundError: a split folder or annotation file is missing.
        ValueError: an unknown ``iou_types`` entry.
    """
    iou_types = [str(t) for t in setting(config, "iou_types", ["bbox"])]
    if not iou_types or any(t not in IOU_TYPES for t in iou_types):
        raise ValueError(f"config iou_types: {iou_types}, expected a list of {IOU_TYPES}")
    masks = "segm" in iou_types
    cache = bool(setting(config, "cache_images", False))
    train_set = CocoDetection(data_dir, "train", train=True, masks=masks,
                              hflip=float(setting(config, "hflip_prob", 0.5)),
                              vflip=float(setting(config, "vflip_prob", 0.0)),
                              repeats=int(setting(config, "train_repeats", 1)), cache=cache)
    val_set = CocoDetection(data_dir, "val", train=False, masks=False, cache=cache)
    pending: list[dict] = []
    last: dict[str, float] = {}
    group_factor = int(setting(config, "aspect_ratio_group_factor", -1))
    batch_sampler = None
    if group_factor >= 0:
        images = [train_set.coco.imgs[train_set.ids[index % len(train_set.ids)]]
                  for index in range(len(train_set))]
        groups = aspect_ratio_groups([i["width"] / i["height"] for i in images], group_factor)

        def batch_sampler(sampler, batch_size):
            return GroupedBatchSampler(sampler, groups, batch_size)

    def train_loss(model, batch):
        _, images, targets = batch
        return sum(model(images, targets).values())

    def detect(model, batch):
        image_ids, images, _ = batch
        pending.extend(coco_results(image_ids.tolist(), model(images), iou_types))
        return {"images": len(images)}

    def score(sums) -> float:
        results = _gather(list(pending), world_size)
        pending.clear()
        for iou_type in iou_types:
            last[iou_type] = coco_map(val_set.coco, results, iou_type)
        return last[iou_types[0]]

    def other_figures() -> dict[str, Any]:
        # Reported beside the target's, never part of convergence (the contract has one target).
        figures: dict[str, Any] = {}
        for iou_type in iou_types[1:]:
            figures[f"final_map_{iou_type}"] = last.get(iou_type)
            if config.get(f"target_map_{iou_type}") is not None:
                figures[f"target_map_{iou_type}"] = float(config[f"target_map_{iou_type}"])
        return figures

    return TrainingCase(
        train_set=train_set, val_set=val_set, build_model=build_model,
        create_optimizer=lambda model, ctx: make_optimizer(model, config),
        train_loss=train_loss, eval_sum_names=("images",), eval_sums=detect, eval_metric=score,
        target=Target(metric, float(config[config_key]), higher_is_better=True),
        create_scheduler=lambda optimizer, plan: torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda step: lr_factor(step, plan, config)),
        model_info={"num_classes": int(config["num_classes"]),
                    "train_images": len(train_set.ids), **(model_info or {})},
        batch_sampler=batch_sampler, collate_fn=collate, eval_collate_fn=collate,
        finished_figures=other_figures if len(iou_types) > 1 else None,
        # Boxes only: a case whose target is the segm AP has no input-blind predictor here.
        input_blind=(lambda model: coco_map(val_set.coco,
                                            layout_prior(train_set.coco, val_set.coco), "bbox"))
        if iou_types[0] == "bbox" else None,
    )


#: RetinaNet keyword arguments a configuration may set (torchvision's defaults otherwise).
RETINANET_KEYS = {"topk_candidates": int, "detections_per_img": int, "score_thresh": float}


def build_detector(detector: type, config: Mapping[str, Any],
                   data_dir: Path | None) -> torch.nn.Module:
    """``detector`` (case.yml's ``model.builder``: torchvision's ``FasterRCNN``, ``MaskRCNN``
    or ``RetinaNet``) on :func:`resnet_fpn_backbone` (with P6 and P7 for RetinaNet), built as
    torchvision's ``<detector>_resnet50_fpn(weights_backbone=...)`` builds it (frozen
    BatchNorm, 3 trainable stages): images ``[3, H, W]`` in [0, 1] (a list) -> in training,
    the losses; in evaluation, per image ``boxes [N, 4]``, ``labels [N]``, ``scores [N]`` (and
    ``masks [N, 1, H, W]``, probabilities, for Mask R-CNN).

    Config: ``num_classes`` (with the background), the backbone keys of
    :func:`resnet_fpn_backbone`; for the R-CNNs those of :func:`rcnn_options` and, for Mask
    R-CNN, ``mask_head_channels`` (the mask head's four 3x3 convolutions and its
    deconvolution; null: torchvision's 256); for RetinaNet :func:`detector_options`' (the
    same number of anchor sizes per level: the head is shared) and ``RETINANET_KEYS``.

    Raises:
        FileNotFoundError, ValueError: see :func:`resnet_fpn_backbone`.
        TypeError: ``detector`` is none of the three.
    """
    from torchvision.models.detection import FasterRCNN, MaskRCNN, RetinaNet
    from torchvision.models.detection.mask_rcnn import MaskRCNNHeads, MaskRCNNPredictor

    if not (isinstance(detector, type) and issubclass(detector, (FasterRCNN, RetinaNet))):
        raise TypeError(f"model builder {detector!r}: not torchvision's FasterRCNN, MaskRCNN "
                        "or RetinaNet")
    retinanet = issubclass(detector, RetinaNet)
    backbone = resnet_fpn_backbone(config, data_dir, retinanet=retinanet)
    if retinanet:
        options = detector_options(config, anchor_key="anchor_generator")
        options.update({key: kind(config[key]) for key, kind in RETINANET_KEYS.items()
                        if config.get(key) is not None})
        return detector(backbone, num_classes=int(config["num_classes"]), **options)
    masks = issubclass(detector, MaskRCNN)
    options = rcnn_options(config, backbone.out_channels, masks=masks)
    if masks and config.get("mask_head_channels"):
        width = int(config["mask_head_channels"])
        options["mask_head"] = MaskRCNNHeads(backbone.out_channels, (width,) * 4, 1)
        options["mask_predictor"] = MaskRCNNPredictor(width, width, int(config["num_classes"]))
    return detector(backbone, **options)


def run(case) -> int:
    """The driver of a detection case (case.yml ``driver: driver.torch.detection``, ``model:
    builder:`` torchvision's detector class; ``driver.run.Case``): the trainer from the
    command line (``--config``, ``--output_dir``, ``--data_dir``) and the case of
    :func:`detection_case` with :func:`build_detector` and the case's target; returns the exit
    status (0: trained to the end)."""
    trainer = Trainer.from_command_line(case.description, model=case.name)
    config, data_dir = trainer.config, trainer.data_dir
    return trainer.fit(detection_case(
        config, data_dir, lambda: build_detector(case.model.function, config, data_dir),
        metric=case.metric, config_key=case.config_key, world_size=trainer.info.world_size))
