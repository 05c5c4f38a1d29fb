"""The PyTorch training cases on the one training loop (``driver.training_loop``): a case gives
its model, data and maths (:class:`TrainingCase`); the trainer gives the loop its micro-batches
and does the rest, the same way for every case.

What the trainer does, per rank (launched by torchrun, or alone):

* init (INIT_START..INIT_END): the vendor's hooks (``vendor_hooks``), the device they choose,
  the process group (``dist_backend``), seeds (``seed``: Python's ``random`` and numpy get
  ``seed + rank``, torch ``seed`` so that every rank starts from the same weights), the data
  loaders (a ``DistributedSampler`` over ranks, whole batches only; each rank evaluates every
  ``world_size``-th validation sample), the model through the hooks ``convert_model``,
  ``create_optimizer``, ``model_to_fp16`` and ``model_to_ddp`` (each with its PerfLog event),
  the case's learning-rate schedule and, in fp16, a ``torch.amp.GradScaler``;
* between INIT_END and TRAIN_START: the training loader's workers started (they persist
  across epochs) and its first batch read, so that neither lands in the first steps;
* training (TRAIN_START..TRAIN_END): autocast to bf16 (``precision: amp`` or ``bf16``) or fp16
  (``fp16``, with the scaler); ``gradient_accumulation_steps`` micro-batches per optimizer
  update (the loss divided by their number unless ``divide_loss_by_accumulation`` is false,
  DDP's gradient reduction only on the last one); a STEP_END event every ``log_freq`` updates;
  evaluation at the end of every epoch, or every ``eval_interval_samples`` trained samples (over
  all ranks), or every ``eval_interval_steps`` steps, and once more at the end;
* termination at the first of ``epochs``, ``max_steps`` (steps: optimizer updates, or
  micro-batches with ``step_unit: micro_batch``) and ``max_samples`` (trained samples over all
  ranks, or this process's with ``max_samples_scope: process``) that is set, or once the case's
  target is reached with ``stop_at_target``;
* FINISHED with ``driver.finished.RoundClock``'s figures, ``converged``, ``final_<metric>``,
  ``target_<metric>``, ``epochs``, ``global_steps`` and ``world_size``; then the process group
  is left cleanly (``driver.dist.shutdown``, the DDP model deleted first);
* with ``evaluate_baselines`` (a profile's baselines, ``driver.convergence``): the model as
  built evaluated between INIT_END and TRAIN_START (an EVALUATE at step 0, ``untrained``), and
  the case's input-blind predictor scored after training; both in FINISHED;
* a case with further targets (``TrainingCase.also``) converges when every target is reached;
  each evaluation's figures go into EVALUATE, the last one's into FINISHED as ``final_<name>``.

Configuration keys it reads (the case's effective configuration): ``train_batch_size`` and
``eval_batch_size`` (per process), at least one of ``epochs``/``max_steps``/``max_samples``
(0 or absent: no limit), and optionally ``precision`` (fp32), ``gradient_accumulation_steps``
(1), ``eval_interval_samples`` (0: every epoch), ``stop_at_target`` (true), ``log_freq`` (50),
``num_workers`` (0; at most the host's cores over its ranks: :func:`loader_workers`),
``seed`` (0), ``dist_backend`` (torch's default for the device),
``clip_grad_norm`` (none; read by the default ``backward`` hook) and ``evaluate_baselines``
(false); and, for recipes that count as FlagPerf's own trainers do (each case's config names
the upstream line): ``step_unit`` (``update``; ``micro_batch``: ``max_steps`` and
``eval_interval_steps`` count micro-batches, the optimizer stepping every
``gradient_accumulation_steps`` of them), ``eval_interval_steps`` (0: off; not with
``eval_interval_samples``), ``max_samples_scope`` (``world``; ``process``: ``max_samples``
counts one process's samples) and ``divide_loss_by_accumulation`` (true; false: the
micro-batches' gradients are summed, not averaged).
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import os
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import torch

from driver import dist, perflog
from driver.case_io import load_config, parse_case_args, redirect_rank_output
from driver.convergence import EVALUATE_BASELINES, Target, as_figures, baseline_figures
from driver.finished import RoundClock
from driver.training_loop import CaseStart, LoopSettings, Progress, TrainingLoop, config_count
from driver.torch.vendor_hooks import RankContext, VendorHooks, load_vendor_hooks

__all__ = ["AUTOCAST_DTYPES", "Progress", "Trainer", "TrainerSettings", "TrainingCase",
           "TrainingPlan", "batch_samples", "loader_workers", "to_device"]

#: ``precision`` values and the dtype autocast runs in (None: no autocast). ``amp`` is bf16,
#: as the cases' ``precision_peak`` maps it.
AUTOCAST_DTYPES = {"fp32": None, "amp": torch.bfloat16, "bf16": torch.bfloat16,
                   "fp16": torch.float16}

Batch = Any  # what the case's DataLoader yields: tensors, or tuples, lists or dicts of them


@dataclass(frozen=True)
class TrainerSettings(LoopSettings):
    """The trainer's part of a case's configuration (see the module docstring): the loop's
    settings every framework shares (``driver.training_loop.LoopSettings``) and PyTorch's own."""

    precision: str = "fp32"
    num_workers: int = 0
    dist_backend: str | None = None
    divide_loss_by_accumulation: bool = True

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> "TrainerSettings":
        """Read the settings from ``config``; other keys are the case's and left alone.

        Raises:
            ValueError: see :meth:`LoopSettings.from_config`; or ``precision`` is not one of
                ``AUTOCAST_DTYPES``.
        """
        settings = cls(
            **dataclasses.asdict(LoopSettings.from_config(config)),
            precision=str(config.get("precision") or "fp32"),
            num_workers=config_count(config, "num_workers", 0),
            dist_backend=config.get("dist_backend") or None,
            divide_loss_by_accumulation=bool(config.get("divide_loss_by_accumulation", True)))
        if settings.precision not in AUTOCAST_DTYPES:
            raise ValueError(f"config precision: {settings.precision!r}, expected one of "
                             + ", ".join(AUTOCAST_DTYPES))
        return settings


@dataclass(frozen=True)
class TrainingPlan:
    """What a learning-rate schedule needs: ``steps_per_epoch`` (optimizer updates per epoch,
    fractional when an epoch's batches are not a multiple of the accumulation), ``total_steps``
    (updates the run is planned for: the first limit that applies) and ``global_batch_size``
    (samples per update over all ranks)."""

    steps_per_epoch: float
    total_steps: int
    global_batch_size: int


@dataclass
class TrainingCase:
    """What a case gives the trainer.

    Attributes:
        train_set, val_set: map-style data sets yielding batches' items.
        build_model: a new, randomly initialised model (moved to the device by the trainer).
        create_optimizer: ``(model, ctx) -> Optimizer`` (a vendor's ``create_optimizer``
            hook replaces it).
        train_loss: ``(model, batch) -> scalar loss tensor``, the forward pass; ``batch`` is on
            the device, its first tensor's first dimension the number of samples.
        eval_sum_names: the sums ``eval_sums`` returns, the same on every rank.
        eval_sums: ``(model, batch) -> {name: number}`` over one validation batch (e.g.
            correct predictions and samples), summed over batches and ranks.
        eval_metric: ``(sums) -> metric value`` from the totals (e.g. top-1 in %), or
            ``{name: value}`` of several figures: the target's metric, the metrics of ``also``
            and any other figure to report (each goes into EVALUATE and, from the last
            evaluation, into FINISHED as ``final_<name>``).
        target: the convergence target; ``target.metric`` names the FINISHED keys.
        create_scheduler: ``(optimizer, plan) -> LRScheduler`` stepped once per update, or None.
        model_info: more figures for the CONVERT_MODEL event (e.g. the number of labels).
        train_sampler: ``(world_size, rank, seed) -> Sampler`` over ``train_set`` with
            ``set_epoch(epoch)`` (e.g. repeated augmentation), or None: a
            ``DistributedSampler`` over ranks (a random one on a single rank).
        batch_sampler: ``(sampler, batch_size) -> Sampler`` of batches (lists of
            ``batch_size`` indices) drawn from the sampler's order (e.g. grouped by aspect
            ratio), or None: the sampler's order cut into whole batches.
        collate_fn: how training batches are put together (e.g. with mixup), or None: the
            DataLoader's default.
        eval_collate_fn: how validation batches are put together, or None: the DataLoader's
            default (detection batches images of different sizes as lists).
        finished_figures: ``() -> {key: value}``, more FINISHED figures from the last
            evaluation besides the target's (e.g. mask_rcnn's ``final_map_segm``), or None.
        units: ``(name, count)`` when the throughput is counted in another unit than samples
            (``tokens``, ``mel_frames``, ``audio_samples``: the case's ``throughput.unit``):
            ``count(batch)`` gives a training batch's units; FINISHED then has
            ``num_trained_<name>``, ``p_*`` in ``<name>``/s and ``p_train_samples``
            (``driver.finished``). None: samples.
        input_blind: ``(model) -> metric`` of the best predictor that ignores the input, from
            the case's data (``driver.convergence``), called after training with the trained
            model in eval mode (a metric that reads the model's own embeddings needs it), or
            ``{metric: value}`` for the target's and ``also``'s metrics; required with
            ``evaluate_baselines``.
        also: further targets that convergence needs as well (e.g. a profile's target on the
            validation loss, beside a metric that cannot tell learning alone), their metrics
            among ``eval_metric``'s figures; FINISHED has their ``target_<metric>`` and, with
            ``evaluate_baselines``, their baselines.
    """

    train_set: torch.utils.data.Dataset
    val_set: torch.utils.data.Dataset
    build_model: Callable[[], torch.nn.Module]
    create_optimizer: Callable[[torch.nn.Module, RankContext], torch.optim.Optimizer]
    train_loss: Callable[[torch.nn.Module, Batch], torch.Tensor]
    eval_sum_names: tuple[str, ...]
    eval_sums: Callable[[torch.nn.Module, Batch], Mapping[str, float]]
    eval_metric: Callable[[Mapping[str, float]], float]
    target: Target
    create_scheduler: Callable[[torch.optim.Optimizer, TrainingPlan], Any] | None = None
    model_info: dict[str, Any] = field(default_factory=dict)
    train_sampler: Callable[[int, int, int], torch.utils.data.Sampler] | None = None
    batch_sampler: Callable[[torch.utils.data.Sampler, int], torch.utils.data.Sampler] | None = None
    collate_fn: Callable[[list], Batch] | None = None
    eval_collate_fn: Callable[[list], Batch] | None = None
    finished_figures: Callable[[], Mapping[str, Any]] | None = None
    units: tuple[str, Callable[[Batch], int]] | None = None
    input_blind: Callable[[torch.nn.Module], float | Mapping[str, float]] | None = None
    also: tuple[Target, ...] = ()


def loader_workers(configured: int, local_ranks: int, cores: int | None = None) -> int:
    """The DataLoader workers a rank starts: ``configured`` (the case's ``num_workers``), at
    most this host's cores shared among its ``local_ranks`` ranks (at least one each when any
    is configured). ``cores`` defaults to the cores this process may run on. FlagPerf's 32
    workers on a host of fewer cores only add processes that wait for a core."""
    if configured <= 0:
        return 0
    if cores is None:
        cores = (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                 else os.cpu_count() or 1)
    return max(1, min(configured, cores // max(local_ranks, 1)))


def to_device(batch: Batch, device: torch.device) -> Batch:
    """``batch`` with every tensor in it on ``device`` (copied asynchronously when pinned)."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, (list, tuple)):
        return type(batch)(to_device(item, device) for item in batch)
    if isinstance(batch, dict):
        return {key: to_device(item, device) for key, item in batch.items()}
    return batch


def batch_samples(batch: Batch) -> int:
    """The number of samples in ``batch``: its first tensor's first dimension."""
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0])
    items = batch.values() if isinstance(batch, dict) else batch
    for item in items:
        if isinstance(item, (torch.Tensor, list, tuple, dict)):
            return batch_samples(item)
    raise TypeError(f"cannot count the samples of a batch of type {type(batch).__name__}")


class Trainer:
    """One rank's training of one case. Constructing it opens the init phase (INIT_START):
    build the case's data sets next, then call :meth:`fit`.

    Args:
        config: the case's effective configuration (see :class:`TrainerSettings`).
        model: the case's model name, for the vendor's ``<model>-pytorch/extern/adapter.py``.
        data_dir: the data set's root folder, for the case.
        log: the PerfLog writer (default: this rank's, on stdout).
        vendor_dir: the vendor's folder (default ``$FLAGPERF_VENDOR_DIR``; none when unset).
        clock: the rank's clock, started at process start (default: started now).

    Raises:
        ValueError: see :meth:`TrainerSettings.from_config`.
        FileNotFoundError, TypeError: see :func:`driver.torch.vendor_hooks.load_vendor_hooks`.
    """

    def __init__(self, config: Mapping[str, Any], *, model: str, data_dir: str | Path = "",
                 log: perflog.PerfLogger | None = None, vendor_dir: str | Path | None = None,
                 clock: RoundClock | None = None) -> None:
        self.clock = clock or RoundClock()
        info = dist.dist_info()
        self.log = log or perflog.PerfLogger(rank=info.rank)
        self.log.log(perflog.INIT_START)
        self.clock.mark_init_start()
        self.config = config
        self.model_name = model
        self.data_dir = Path(data_dir)
        self.settings = TrainerSettings.from_config(config)
        self.hooks: VendorHooks = load_vendor_hooks(model, vendor_dir)
        self.device = self.hooks.device(info.local_rank)
        if self.device.type != "cpu" or "synchronize" in self.hooks.vendor:
            self.clock.sync = lambda: self.hooks.synchronize(self.device)
        if self.device.type != "cpu":
            set_device = getattr(getattr(torch, self.device.type, None), "set_device", None)
            if set_device is not None:  # before the group forms: its rendezvous uses it
                set_device(self.device)
        self.info = dist.init_distributed(self.settings.dist_backend)
        seed = self.settings.seed
        random.seed(seed + self.info.rank)
        with contextlib.suppress(ImportError):
            import numpy

            numpy.random.seed((seed + self.info.rank) % 2**32)
        torch.manual_seed(seed)  # the same initial weights on every rank
        self.ctx = RankContext(config=config, device=self.device, dist=self.info,
                               precision=self.settings.precision)

    @classmethod
    def from_command_line(cls, description: str, *, model: str) -> "Trainer":
        """The trainer of a case's entry point: ``--config``, ``--output_dir``, ``--data_dir``
        as the launch passes them, this rank's output sent to ``rank<R>.out.log``."""
        clock = RoundClock()
        args = parse_case_args(description)
        redirect_rank_output(args.output_dir, dist.dist_info().rank)
        return cls(load_config(args.config), model=model, data_dir=args.data_dir, clock=clock)

    # -- init ------------------------------------------------------------------------------

    def _loaders(self, case: TrainingCase):
        s, info = self.settings, self.info
        pin = self.device.type != "cpu"
        workers = loader_workers(s.num_workers, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
        if case.train_sampler is not None:
            sampler = case.train_sampler(info.world_size, info.rank, s.seed)
        elif info.world_size > 1:
            sampler = torch.utils.data.distributed.DistributedSampler(
                case.train_set, num_replicas=info.world_size, rank=info.rank, shuffle=True,
                seed=s.seed, drop_last=True)
        else:
            sampler = torch.utils.data.RandomSampler(case.train_set)
        if case.batch_sampler is not None:
            train = torch.utils.data.DataLoader(
                case.train_set, batch_sampler=case.batch_sampler(sampler, s.train_batch_size),
                num_workers=workers, pin_memory=pin, collate_fn=case.collate_fn,
                persistent_workers=workers > 0)
        else:
            train = torch.utils.data.DataLoader(
                case.train_set, batch_size=s.train_batch_size, sampler=sampler,
                num_workers=workers, drop_last=True, pin_memory=pin,
                collate_fn=case.collate_fn, persistent_workers=workers > 0)
        if len(train) == 0:
            raise ValueError(f"the train set ({len(case.train_set)} samples over "
                             f"{info.world_size} ranks) holds no whole batch of "
                             f"{s.train_batch_size}")
        shard = torch.utils.data.Subset(case.val_set,
                                        range(info.rank, len(case.val_set), info.world_size))
        val = torch.utils.data.DataLoader(shard, batch_size=s.eval_batch_size, shuffle=False,
                                          num_workers=workers, pin_memory=pin,
                                          collate_fn=case.eval_collate_fn)
        return train, sampler, val

    def _plan(self, batches_per_epoch: int) -> TrainingPlan:
        s = self.settings
        accumulation = s.gradient_accumulation_steps
        global_batch = s.train_batch_size * self.info.world_size * accumulation
        return TrainingPlan(steps_per_epoch=batches_per_epoch / accumulation,
                            total_steps=s.total_steps(batches_per_epoch, self.info.world_size),
                            global_batch_size=global_batch)

    def _prepare_model(self, case: TrainingCase):
        hooks, ctx = self.hooks, self.ctx
        model = hooks.convert_model(case.build_model().to(self.device), ctx)
        self.log.log(perflog.CONVERT_MODEL, {"model": self.model_name, **case.model_info,
                                              "hook": hooks.source("convert_model")})
        create = hooks.create_optimizer or case.create_optimizer
        optimizer = create(model, ctx)
        self.log.log(perflog.CREATE_OPTIMIZER, {
            "optimizer": type(optimizer).__name__,
            "learning_rate": optimizer.param_groups[0]["lr"],
            "hook": hooks.source("create_optimizer")})
        if self.settings.precision != "fp32":
            model = hooks.model_to_fp16(model, ctx)
            self.log.log(perflog.MODEL_TO_FP16, {"precision": self.settings.precision,
                                                  "hook": hooks.source("model_to_fp16")})
        if self.info.world_size > 1:
            model = hooks.model_to_ddp(model, ctx)
            self.log.log(perflog.MODEL_TO_DDP, {"world_size": self.info.world_size,
                                                 "hook": hooks.source("model_to_ddp")})
        return model, optimizer

    # -- training --------------------------------------------------------------------------

    def autocast(self) -> contextlib.AbstractContextManager:
        """Autocast to the configured precision's dtype; none in fp32 (a disabled autocast
        still costs each step a dozen calls into torch)."""
        dtype = AUTOCAST_DTYPES[self.settings.precision]
        if dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=dtype)

    def fit(self, case: TrainingCase) -> int:
        """Train ``case`` to its end, write FINISHED, leave the process group; returns the exit
        status (0: training ran to its end, converged or not)."""
        if self.settings.evaluate_baselines and case.input_blind is None:
            raise ValueError(f"config {EVALUATE_BASELINES}: the case has no input-blind "
                             "predictor to score")
        train_loader, sampler, val_loader = self._loaders(case)
        model, optimizer = self._prepare_model(case)
        plan = self._plan(len(train_loader))
        scheduler = case.create_scheduler(optimizer, plan) if case.create_scheduler else None
        scaler = (torch.amp.GradScaler(self.device.type)
                  if self.settings.precision == "fp16" else None)
        self.clock.mark_init_end()
        self.log.log(perflog.INIT_END)
        progress = self._train(case, model, optimizer, scheduler, scaler, train_loader, sampler,
                               val_loader)
        untrained = progress.untrained or {}
        num_trained_samples, num_trained_units = dist.all_reduce_sum(
            [progress.samples, progress.units], self.info)
        units = (case.units[0], int(num_trained_units)) if case.units else None
        # The last evaluation's figures, then each target's (its final value and target).
        figures = {f"final_{name}": value for name, value in progress.figures.items()}
        for target in (case.target, *case.also):
            figures.update(target.finished_figures(progress.figures.get(target.metric)))
        if self.settings.evaluate_baselines:
            model.eval()
            with torch.no_grad():
                blind = as_figures(case.target, case.input_blind(model))
            for target in (case.target, *case.also):
                figures.update(baseline_figures(target, untrained.get(target.metric),
                                                blind.get(target.metric)))
        if case.finished_figures:
            figures.update(case.finished_figures())
        self.log.log(perflog.FINISHED, self.clock.finished(
            int(num_trained_samples), progress.converged, units, **figures,
            epochs=progress.epoch, global_steps=progress.steps, world_size=self.info.world_size))
        # DDP's C++ Reducer holds the process group: left to be freed later, it would free the
        # group with the GIL held, which can deadlock with gloo's threads (driver.dist.shutdown).
        del model, optimizer, scheduler
        dist.shutdown(self.info)
        return 0

    def _train(self, case, model, optimizer, scheduler, scaler, loader, sampler,
               val_loader) -> Progress:
        """The loop (``driver.training_loop``) over the case's micro-batches: forward under
        autocast, the loss divided by the accumulation unless configured not to, the vendor's
        backward (the optimizer stepping on the last micro-batch of an update, DDP reducing
        only then), the schedule stepped after each update."""
        s, world = self.settings, self.info.world_size
        accumulation = s.gradient_accumulation_steps
        start = CaseStart(args=None, config=dict(self.config), rank=self.info.rank,
                          world_size=world, log=self.log, clock=self.clock)
        loop = TrainingLoop(s, case.target, start, also=case.also,
                            all_reduce_sum=lambda values: dist.all_reduce_sum(values, self.info))

        # The first epoch's loader starts before TRAIN_START: its workers fork and the first
        # batch is read outside the training time, so that neither lands in the first steps'
        # compute windows. p_core is FlagPerf's either way (no loading inside its windows);
        # the workers persist across epochs.
        if hasattr(sampler, "set_epoch"):
            sampler.set_epoch(0)
        first_epoch = iter(loader)
        first_batch = next(first_epoch, None)

        def epoch_batches(epoch: int):
            if epoch == 1:
                batches = itertools.chain([] if first_batch is None else [first_batch],
                                          first_epoch)
            else:
                if hasattr(sampler, "set_epoch"):
                    sampler.set_epoch(epoch - 1)
                batches = loader
            return (to_device(batch, self.device) for batch in batches)

        def train_micro_batch(batch, update: bool) -> torch.Tensor:
            with self._gradient_sync(model, update):
                with self.autocast():
                    loss = case.train_loss(model, batch)
                if accumulation > 1 and s.divide_loss_by_accumulation:
                    loss = loss / accumulation
                self.hooks.backward(loss=loss, optimizer=optimizer, scaler=scaler,
                                    update=update, ctx=self.ctx)
            return loss.detach()

        model.train()
        return loop.run(
            epoch_batches=epoch_batches, train_micro_batch=train_micro_batch,
            batch_samples=batch_samples, batch_units=case.units[1] if case.units else None,
            on_update=scheduler.step if scheduler is not None else None,
            learning_rate=lambda: optimizer.param_groups[0]["lr"],
            evaluate=lambda: self._score(case, model, val_loader))

    @staticmethod
    def _gradient_sync(model: torch.nn.Module, update: bool) -> contextlib.AbstractContextManager:
        # Between updates, DDP need not reduce gradients: the last micro-batch reduces the sum.
        if not update and hasattr(model, "no_sync"):
            return model.no_sync()
        return contextlib.nullcontext()

    def _score(self, case: TrainingCase, model, loader) -> dict[str, float]:
        """The case's figures over the validation set (``{metric: value}``, the target's metric
        among them): its evaluation over this rank's shard, summed over ranks (the model left
        in training mode)."""
        model.eval()
        sums = dict.fromkeys(case.eval_sum_names, 0.0)
        with torch.no_grad(), self.autocast():
            for batch in loader:
                for name, value in case.eval_sums(model, to_device(batch, self.device)).items():
                    sums[name] += float(value)
        totals = dist.all_reduce_sum(list(sums.values()), self.info)
        model.train()
        return as_figures(case.target, case.eval_metric(dict(zip(sums, totals))))
