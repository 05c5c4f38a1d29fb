"""Image classification on ImageNet-layout folders, shared by the vision training cases
(resnet50, mobilenetv2, efficientnet, vit, swin_transformer, bigtransfer): data and its
augmentation, the optimizer, the per-update learning-rate schedule and top-1 accuracy. A case
names its model in case.yml; :func:`classification_case` returns the trainer's
``TrainingCase``, :func:`run` is the cases' driver.

The recipe is torchvision's classification references (``pytorch/vision``
``references/classification``: ``train.py``, ``presets.py``, ``sampler.py``), which FlagPerf's
vision cases follow; the building blocks are torchvision's (``datasets.ImageFolder``,
``transforms``, ``transforms.v2.MixUp``/``CutMix``).

Configuration keys (a case's ``config/standard.yaml`` lists those it sets; defaults here):

* data: ``train_crop_size``; ``train_transform`` ``random_resized_crop`` (Inception crop, scale
  0.08-1), ``resize_crop`` (resize to ``train_resize_size`` square, random crop: BiT) or
  ``random_shift`` (resize to the crop, pad by ``random_shift`` pixels, random crop);
  ``hflip_prob`` (0.5); ``auto_augment`` (none, ``ta_wide``, ``ra`` with ``ra_magnitude``,
  ``augmix`` with ``augmix_severity``, ``imagenet``); ``random_erase`` (probability, 0);
  ``val_resize_size`` and ``val_crop_size`` (resize the short side, centre crop; with
  ``val_resize_square`` the whole image to a square instead); ``interpolation`` (bilinear,
  bicubic); ``normalize_mean``/``normalize_std``; ``cache_images`` (keep decoded images in
  memory: small data sets only);
* batches: ``mixup_alpha``, ``cutmix_alpha`` (0: off; one of the two per batch, as torchvision's
  references), ``label_smoothing``; ``ra_reps`` (repeated augmentation, DeiT: each image
  ``ra_reps`` times per epoch spread over ranks; 0 or 1: off);
* optimizer: ``optimizer`` (``sgd``: ``momentum``, ``nesterov``; ``adamw``: ``adam_betas``,
  ``adam_eps``), ``learning_rate``, ``weight_decay``, ``norm_weight_decay`` (weight decay of
  one-dimensional parameters, normalisation weights and biases; null: ``weight_decay``);
* schedule, per optimizer update: ``lr_scheduler`` ``cosine`` (to ``lr_min`` at the planned
  end), ``step`` (times ``lr_gamma`` every ``lr_step_size`` epochs), ``multistep`` (times
  ``lr_gamma`` at each of ``lr_milestones`` updates) or ``constant``; warmup over
  ``lr_warmup_epochs`` or ``lr_warmup_steps`` (``lr_warmup_method`` ``linear`` from
  ``lr_warmup_decay`` x lr, or ``constant`` at it); ``lr_schedule_per_epoch``: the schedule
  restarts every epoch (FlagPerf's bigtransfer counts its steps per epoch);
  ``lr_schedule_step``: ``update`` (the rate moves every update) or ``epoch`` (it moves once per
  epoch, held at the value of the epoch's start, as a scheduler stepped at each epoch's end:
  FlagPerf's vit);
  ``lr_scale_batch``: ``learning_rate`` (and so ``lr_min``) is for this global batch and
  scales linearly with the real one (Goyal et al. 2017; Swin's ``base_lr x batch / 512``);
* evaluation: top-1 in % (``final_acc1``) against ``target_acc1``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable, Mapping

import torch
import torch.nn.functional as F
import torchvision
from torchvision.transforms import InterpolationMode
from torchvision.transforms import v2 as T

from driver.case_io import setting
from driver.convergence import Target, majority_share
from driver.torch.optimizers import make_optimizer
from driver.torch.trainer import Trainer, TrainingCase, TrainingPlan

INTERPOLATIONS = {"bilinear": InterpolationMode.BILINEAR, "bicubic": InterpolationMode.BICUBIC}


# -- data ------------------------------------------------------------------------------------

def _auto_augment(config: Mapping[str, Any], interpolation: InterpolationMode) -> list:
    policy = str(setting(config, "auto_augment", "none"))
    if policy == "none":
        return []
    if policy == "ta_wide":
        return [T.TrivialAugmentWide(interpolation=interpolation)]
    if policy == "ra":
        return [T.RandAugment(magnitude=int(setting(config, "ra_magnitude", 9)),
                              interpolation=interpolation)]
    if policy == "augmix":
        return [T.AugMix(severity=int(setting(config, "augmix_severity", 3)),
                         interpolation=interpolation)]
    if policy == "imagenet":
        return [T.AutoAugment(T.AutoAugmentPolicy.IMAGENET, interpolation=interpolation)]
    raise ValueError(f"config auto_augment: {policy!r}, expected none, ta_wide, ra, augmix "
                     "or imagenet")


def train_transform(config: Mapping[str, Any]) -> Callable:
    """The training transform: PIL image -> normalised float tensor ``[3, crop, crop]``.

    Raises:
        ValueError: an unknown ``train_transform``, ``interpolation`` or ``auto_augment``.
    """
    crop = int(config["train_crop_size"])
    interpolation = INTERPOLATIONS[str(setting(config, "interpolation", "bilinear"))]
    kind = str(setting(config, "train_transform", "random_resized_crop"))
    if kind == "random_resized_crop":
        steps = [T.RandomResizedCrop(crop, interpolation=interpolation, antialias=True)]
    elif kind == "resize_crop":
        size = int(config["train_resize_size"])
        steps = [T.Resize((size, size), interpolation=interpolation, antialias=True),
                 T.RandomCrop(crop)]
    elif kind == "random_shift":
        steps = [T.Resize((crop, crop), interpolation=interpolation, antialias=True),
                 T.RandomCrop(crop, padding=int(setting(config, "random_shift", 0)))]
    else:
        raise ValueError(f"config train_transform: {kind!r}, expected random_resized_crop, "
                         "resize_crop or random_shift")
    hflip = float(setting(config, "hflip_prob", 0.5))
    if hflip > 0:
        steps.append(T.RandomHorizontalFlip(hflip))
    steps += _auto_augment(config, interpolation)
    steps += [T.PILToTensor(), T.ToDtype(torch.float32, scale=True),
              T.Normalize(config["normalize_mean"], config["normalize_std"])]
    erase = float(setting(config, "random_erase", 0.0))
    if erase > 0:
        steps.append(T.RandomErasing(p=erase))
    return T.Compose(steps)


def eval_transform(config: Mapping[str, Any]) -> Callable:
    """The evaluation transform: resize, centre crop, normalise (deterministic)."""
    interpolation = INTERPOLATIONS[str(setting(config, "interpolation", "bilinear"))]
    resize, crop = int(config["val_resize_size"]), int(config["val_crop_size"])
    size = (resize, resize) if setting(config, "val_resize_square", False) else resize
    return T.Compose([T.Resize(size, interpolation=interpolation, antialias=True),
                      T.CenterCrop(crop), T.PILToTensor(), T.ToDtype(torch.float32, scale=True),
                      T.Normalize(config["normalize_mean"], config["normalize_std"])])


class CachedLoader:
    """``ImageFolder``'s loader keeping each decoded RGB image in memory (small data sets)."""

    def __init__(self) -> None:
        self.images: dict[str, Any] = {}

    def __call__(self, path: str):
        image = self.images.get(path)
        if image is None:
            image = self.images[path] = torchvision.datasets.folder.pil_loader(path)
        return image


def image_folder(split_dir: Path, transform: Callable,
                 cache: bool) -> torchvision.datasets.ImageFolder:
    """``<split_dir>/<class>/<image>`` as ``(tensor, class index)`` pairs, classes sorted.

    Raises:
        FileNotFoundError: the folder is missing or holds no images.
    """
    if not split_dir.is_dir():
        raise FileNotFoundError(f"{split_dir}: no such data folder")
    loader = CachedLoader() if cache else torchvision.datasets.folder.default_loader
    return torchvision.datasets.ImageFolder(str(split_dir), transform=transform, loader=loader)


class RepeatedAugmentationSampler(torch.utils.data.Sampler):
    """Repeated augmentation (Hoffer et al. 2020; DeiT, Touvron et al. 2021, as torchvision's
    references ``RASampler``): each epoch every image appears ``reps`` times, the copies spread
    over the ranks so that each rank sees different augmentations of the same images; each rank
    takes ``floor(len // 256 * 256 / world_size)`` of them, so an epoch is as long as without.
    """

    def __init__(self, size: int, world_size: int, rank: int, reps: int, seed: int) -> None:
        self.size, self.world, self.rank, self.reps, self.seed = size, world_size, rank, reps, seed
        self.num_samples = math.ceil(size * reps / world_size)
        self.num_selected = max(1, math.floor(size // 256 * 256 / world_size)) if size >= 256 \
            else math.ceil(size / world_size)
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.num_selected

    def __iter__(self):
        generator = torch.Generator()
        generator.manual_seed(self.seed + self.epoch)
        order = torch.randperm(self.size, generator=generator).tolist()
        indices = [i for i in order for _ in range(self.reps)]
        total = self.num_samples * self.world
        indices += indices[: total - len(indices)]
        return iter(indices[self.rank:total:self.world][: self.num_selected])


def mixup_collate(config: Mapping[str, Any], num_classes: int) -> Callable | None:
    """A collate function applying MixUp or CutMix (one at random) to each batch, labels
    becoming class probabilities ``[batch, num_classes]``; None when both alphas are 0."""
    choices = []
    if float(setting(config, "mixup_alpha", 0.0)) > 0:
        choices.append(T.MixUp(alpha=float(config["mixup_alpha"]), num_classes=num_classes))
    if float(setting(config, "cutmix_alpha", 0.0)) > 0:
        choices.append(T.CutMix(alpha=float(config["cutmix_alpha"]), num_classes=num_classes))
    if not choices:
        return None
    mix = T.RandomChoice(choices)

    def collate(batch: list) -> tuple[torch.Tensor, torch.Tensor]:
        return mix(*torch.utils.data.default_collate(batch))
    return collate


# -- optimisation ----------------------------------------------------------------------------

def lr_factor(step: int, plan: TrainingPlan, config: Mapping[str, Any]) -> float:
    """The learning rate at optimizer update ``step`` (0-based) as a factor of the peak.

    Raises:
        ValueError: an unknown ``lr_scheduler`` or ``lr_warmup_method``.
    """
    scale = 1.0
    if setting(config, "lr_scale_batch", 0):
        scale = plan.global_batch_size / float(config["lr_scale_batch"])
    return scale * _schedule(step, plan, config)


def _schedule(step: int, plan: TrainingPlan, config: Mapping[str, Any]) -> float:
    total = plan.total_steps
    unit = str(setting(config, "lr_schedule_step", "update"))
    if unit == "epoch":
        step = math.floor(step / plan.steps_per_epoch + 1e-9) * plan.steps_per_epoch
    elif unit != "update":
        raise ValueError(f"config lr_schedule_step: {unit!r}, expected update or epoch")
    if setting(config, "lr_schedule_per_epoch", False):
        period = max(1, int(plan.steps_per_epoch))
        step, total = step % period, period
    warmup = int(setting(config, "lr_warmup_steps", 0)) or round(
        float(setting(config, "lr_warmup_epochs", 0)) * plan.steps_per_epoch)
    if step < warmup:
        method = str(setting(config, "lr_warmup_method", "linear"))
        start = float(setting(config, "lr_warmup_decay", 0.01))
        if method == "linear":
            return start + (1.0 - start) * step / warmup
        if method == "constant":
            return start
        raise ValueError(f"config lr_warmup_method: {method!r}, expected linear or constant")
    kind = str(setting(config, "lr_scheduler", "cosine"))
    gamma = float(setting(config, "lr_gamma", 0.1))
    if kind == "cosine":
        floor = float(setting(config, "lr_min", 0.0)) / float(config["learning_rate"])
        progress = min(1.0, (step - warmup) / max(1, total - warmup))
        return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))
    if kind == "step":
        epochs = step / max(plan.steps_per_epoch, 1e-9)
        return gamma ** math.floor(epochs / float(config["lr_step_size"]))
    if kind == "multistep":
        return gamma ** sum(step >= int(m) for m in config["lr_milestones"])
    if kind == "constant":
        return 1.0
    raise ValueError(f"config lr_scheduler: {kind!r}, expected cosine, step, multistep or constant")


def make_scheduler(optimizer: torch.optim.Optimizer, plan: TrainingPlan,
                   config: Mapping[str, Any]) -> torch.optim.lr_scheduler.LambdaLR:
    """The per-update schedule of :func:`lr_factor` (checked once before training starts)."""
    lr_factor(0, plan, config)
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: lr_factor(step, plan, config))


# -- the case ----------------------------------------------------------------------------------

def classification_case(config: Mapping[str, Any], data_dir: Path,
                        build_model: Callable[[int], torch.nn.Module],
                        model_info: Mapping[str, Any] | None = None) -> TrainingCase:
    """The image-classification case on ``<data_dir>/train`` and ``<data_dir>/val``.

    Args:
        config: the effective configuration (keys in the module docstring).
        build_model: ``(num_classes) -> model`` mapping images ``[batch, 3, H, W]`` to logits
            ``[batch, num_classes]``.
        model_info: more figures for the CONVERT_MODEL event.

    Raises:
        FileNotFoundError: a split folder is missing or empty.
        ValueError: an unknown transform, augmentation, optimizer or schedule.
    """
    cache = bool(setting(config, "cache_images", False))
    train_set = image_folder(data_dir / "train", train_transform(config), cache)
    val_set = image_folder(data_dir / "val", eval_transform(config), cache)
    num_classes = len(train_set.classes)
    smoothing = float(setting(config, "label_smoothing", 0.0))
    reps = int(setting(config, "ra_reps", 0))

    def train_loss(model, batch):
        images, labels = batch
        return F.cross_entropy(model(images), labels, label_smoothing=smoothing)

    def correct_and_count(model, batch):
        images, labels = batch
        return {"correct": int((model(images).argmax(1) == labels).sum()), "count": len(labels)}

    def repeated(world_size: int, rank: int, seed: int) -> torch.utils.data.Sampler:
        return RepeatedAugmentationSampler(len(train_set), world_size, rank, reps, seed)

    return TrainingCase(
        train_set=train_set, val_set=val_set,
        build_model=lambda: build_model(num_classes),
        create_optimizer=lambda model, ctx: make_optimizer(model, config),
        train_loss=train_loss,
        eval_sum_names=("correct", "count"), eval_sums=correct_and_count,
        eval_metric=lambda sums: 100.0 * sums["correct"] / max(sums["count"], 1),
        target=Target("acc1", float(config["target_acc1"]), higher_is_better=True),
        create_scheduler=lambda optimizer, plan: make_scheduler(optimizer, plan, config),
        model_info={"num_labels": num_classes, **(model_info or {})},
        train_sampler=repeated if reps > 1 else None,
        collate_fn=mixup_collate(config, num_classes),
        # Always the most frequent training class, in %.
        input_blind=lambda model: 100.0 * majority_share(train_set.targets, val_set.targets),
    )


def run(case) -> int:
    """The driver of a vision case (case.yml ``driver: driver.torch.classification``;
    ``driver.run.Case``): the trainer from the command line (``--config``, ``--output_dir``,
    ``--data_dir``) and the case of :func:`classification_case` with case.yml's model, built
    with the data's ``num_classes``; returns the exit status (0: trained to the end)."""
    trainer = Trainer.from_command_line(case.description, model=case.name)
    config, data_dir = trainer.config, trainer.data_dir
    return trainer.fit(classification_case(
        config, data_dir,
        lambda num_classes: case.build_model(config, data_dir, num_classes=num_classes)))
