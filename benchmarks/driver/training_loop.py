"""The training loop of every case on any framework: the PerfLog events, phase times, counting,
termination and convergence check that make every framework's figures the same figures.

A case written for TensorFlow, PaddlePaddle or MindSpore (no torch in its environment) gives
the loop its framework's work as plain callables; the PyTorch trainer (``driver/torch/
trainer.py``) gives it its micro-batches the same way, so FINISHED carries the same keys
(``driver.finished.RoundClock``) and summary, statistics and compare treat every framework
alike::

    start = start_case(__doc__)                      # args, config, rank log, INIT_START
    settings = LoopSettings.from_config(start.config)
    ... build data and model ...
    loop = TrainingLoop(settings, Target("acc1", 90.0), start)
    loop.init_done()                                 # INIT_END
    progress = loop.run(epoch_batches=..., train_step=..., batch_samples=..., evaluate=...)
    loop.finish(progress)                            # FINISHED

Events, in order: INIT_START, (the case's own CONVERT_MODEL, CREATE_OPTIMIZER, ...), INIT_END,
TRAIN_START, then per epoch EPOCH_BEGIN, STEP_END every ``log_freq`` updates, EVALUATE after
each evaluation, EPOCH_END; TRAIN_END and FINISHED.

Configuration keys (the case's effective configuration): ``train_batch_size`` and
``eval_batch_size`` (per process), at least one of ``epochs``/``max_steps``/``max_samples``
(0 or absent: no limit; samples over all ranks), and optionally ``eval_interval_samples``
(0: evaluate at the end of every epoch), ``eval_interval_steps`` (0: off; not with
``eval_interval_samples``), ``stop_at_target`` (true), ``log_freq`` (50), ``seed`` (0),
``evaluate_baselines`` (false: see ``driver.convergence``; then an EVALUATE of the model as
built, ``"untrained": true`` at step 0, comes between INIT_END and TRAIN_START), and for a case
that trains in micro-batches (``run(train_micro_batch=...)``): ``gradient_accumulation_steps``
(1: micro-batches per optimizer update), ``step_unit`` (``update``; ``micro_batch``:
``max_steps`` and ``eval_interval_steps`` count micro-batches, as FlagPerf's bert trainer
does) and ``max_samples_scope`` (``world``; ``process``: ``max_samples`` counts one process's
samples, as FlagPerf's bert does).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from driver import perflog
from driver.case_io import load_config, parse_case_args, redirect_rank_output
from driver.convergence import EVALUATE_BASELINES, Target, all_reached, as_figures, \
    baseline_figures
from driver.finished import RoundClock

#: What ``max_steps`` and ``eval_interval_steps`` count.
STEP_UNITS = ("update", "micro_batch")
#: Whose samples ``max_samples`` counts: all ranks' or one process's.
SAMPLE_SCOPES = ("world", "process")

#: Where each launcher puts a process's rank and the number of processes, in the order looked
#: up: torchrun and the one-process-per-node launchers (``RANK``, ``WORLD_SIZE``),
#: ``paddle.distributed.launch`` (``PADDLE_TRAINER_ID``, ``PADDLE_TRAINERS_NUM``), MindSpore's
#: msrun (``RANK_ID``, ``MS_WORKER_NUM``).
RANK_VARIABLES = ("RANK", "PADDLE_TRAINER_ID", "RANK_ID")
WORLD_SIZE_VARIABLES = ("WORLD_SIZE", "PADDLE_TRAINERS_NUM", "MS_WORKER_NUM")


def _first_int(names: tuple[str, ...], default: int) -> int:
    for name in names:
        value = os.environ.get(name, "")
        if value.strip():
            return int(value)
    return default


def launched_rank() -> tuple[int, int]:
    """``(rank, world_size)`` as this process's launcher set them (``RANK_VARIABLES``,
    ``WORLD_SIZE_VARIABLES``); ``(0, 1)`` when run directly.

    Raises:
        ValueError: a variable is set to something other than an integer.
    """
    return _first_int(RANK_VARIABLES, 0), _first_int(WORLD_SIZE_VARIABLES, 1)


def config_count(config: Mapping[str, Any], key: str, default: int) -> int:
    """``config[key]`` as a count (``default`` where missing or null).

    Raises:
        ValueError: a negative value (the message names the key), or not an integer.
    """
    value = config.get(key)
    value = default if value is None else int(value)
    if value < 0:
        raise ValueError(f"config {key}: {value} is negative")
    return value


@dataclass(frozen=True)
class LoopSettings:
    """The loop's part of a case's configuration (see the module docstring)."""

    train_batch_size: int
    eval_batch_size: int
    epochs: int = 0
    max_steps: int = 0
    max_samples: int = 0
    eval_interval_samples: int = 0
    stop_at_target: bool = True
    log_freq: int = 50
    seed: int = 0
    evaluate_baselines: bool = False
    gradient_accumulation_steps: int = 1
    step_unit: str = "update"
    eval_interval_steps: int = 0
    max_samples_scope: str = "world"

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> "LoopSettings":
        """Read the settings from ``config``; other keys are the case's and left alone.

        Raises:
            ValueError: a batch size is missing or not positive, no termination is set, a
                count is negative (the message names the key), ``step_unit`` or
                ``max_samples_scope`` is not one of its values, or both evaluation intervals
                are set.
        """
        def count(key: str, default: int) -> int:
            return config_count(config, key, default)

        for key in ("train_batch_size", "eval_batch_size"):
            if int(config.get(key) or 0) <= 0:
                raise ValueError(f"config {key}: a positive batch size per process is required")
        settings = cls(
            train_batch_size=int(config["train_batch_size"]),
            eval_batch_size=int(config["eval_batch_size"]),
            epochs=count("epochs", 0), max_steps=count("max_steps", 0),
            max_samples=count("max_samples", 0),
            eval_interval_samples=count("eval_interval_samples", 0),
            stop_at_target=bool(config.get("stop_at_target", True)),
            log_freq=max(1, count("log_freq", 50)), seed=int(config.get("seed") or 0),
            evaluate_baselines=bool(config.get(EVALUATE_BASELINES, False)),
            gradient_accumulation_steps=max(1, count("gradient_accumulation_steps", 1)),
            step_unit=str(config.get("step_unit") or "update"),
            eval_interval_steps=count("eval_interval_steps", 0),
            max_samples_scope=str(config.get("max_samples_scope") or "world"))
        if not (settings.epochs or settings.max_steps or settings.max_samples):
            raise ValueError("config: set at least one of epochs, max_steps, max_samples")
        for key, allowed in (("step_unit", STEP_UNITS), ("max_samples_scope", SAMPLE_SCOPES)):
            if getattr(settings, key) not in allowed:
                raise ValueError(f"config {key}: {getattr(settings, key)!r}, expected one of "
                                 + ", ".join(allowed))
        if settings.eval_interval_steps and settings.eval_interval_samples:
            raise ValueError("config: set one of eval_interval_samples, eval_interval_steps")
        return settings

    @property
    def micro_batches_per_step(self) -> int:
        """Micro-batches one step of ``max_steps``/``eval_interval_steps`` stands for."""
        return 1 if self.step_unit == "micro_batch" else self.gradient_accumulation_steps

    def total_steps(self, batches_per_epoch: int, world_size: int) -> int:
        """Optimizer updates the run is planned for (for a learning-rate schedule): the first
        of the limits that applies, as the loop counts them (``step_unit``,
        ``max_samples_scope``); ``batches_per_epoch`` is this rank's (micro-)batches per
        epoch, ``gradient_accumulation_steps`` of them an update."""
        accumulation = self.gradient_accumulation_steps
        limits = []
        if self.epochs:
            limits.append(batches_per_epoch * self.epochs // accumulation)
        if self.max_steps:
            limits.append(self.max_steps * self.micro_batches_per_step // accumulation)
        if self.max_samples:
            scope = world_size if self.max_samples_scope == "world" else 1
            limits.append(-(-self.max_samples // (self.train_batch_size * accumulation * scope)))
        return max(1, min(limits))


@dataclass(frozen=True)
class CaseStart:
    """What a case's entry point starts from (``start_case``): its arguments (``config``,
    ``output_dir``, ``data_dir``), the effective configuration, its rank and world size as
    launched, its PerfLog writer and its clock (started at process start)."""

    args: Any
    config: dict[str, Any]
    rank: int
    world_size: int
    log: perflog.PerfLogger
    clock: RoundClock

    @property
    def data_dir(self) -> Path:
        return Path(self.args.data_dir)


def start_case(description: str, clock: RoundClock | None = None) -> CaseStart:
    """Open a case's process: read ``--config/--output_dir/--data_dir``, send this rank's
    output to ``<output_dir>/rank<R>.out.log``, load the configuration and write INIT_START.

    Raises:
        SystemExit: bad arguments, or a configuration that is not a mapping.
        ValueError: a rank variable that is not an integer.
    """
    clock = clock or RoundClock()
    args = parse_case_args(description)
    rank, world_size = launched_rank()
    redirect_rank_output(args.output_dir, rank)
    config = load_config(args.config)
    log = perflog.PerfLogger(rank=rank)
    log.log(perflog.INIT_START)
    clock.mark_init_start()
    return CaseStart(args=args, config=config, rank=rank, world_size=world_size, log=log,
                     clock=clock)


@dataclass
class Progress:
    """Where training stands: ``steps`` are optimizer updates, ``samples`` and ``units`` this
    rank's (those of micro-batches whose update is still to come are pending), ``metric`` the
    target's in the last evaluation and ``figures`` all of that evaluation's."""

    epoch: int = 0
    steps: int = 0
    micro_batches: int = 0
    samples: int = 0
    pending_samples: int = 0
    units: int = 0
    pending_units: int = 0
    metric: float | None = None
    figures: dict[str, float] = field(default_factory=dict)
    converged: bool = False
    evaluated_at_step: int = -1
    next_eval_samples: int = 0
    next_eval_step: int = 0
    #: What ``evaluate`` gave for the model as built (``evaluate_baselines``), else None.
    untrained: float | Mapping[str, float] | None = None


def log_untrained(log: perflog.PerfLogger, target: Target,
                  value: float | Mapping[str, float]) -> None:
    """The EVALUATE event of the model as built: step 0, its metric (or figures,
    ``driver.convergence.as_figures``), marked ``untrained``."""
    log.log(perflog.EVALUATE, {"epoch": 0, "global_steps": 0, **as_figures(target, value),
                               "untrained": True})


class TrainingLoop:
    """One rank's training loop. ``all_reduce_sum`` sums a list of numbers over the ranks (the
    framework's collective; identity on one rank), used for the trained samples in FINISHED.

    Args:
        settings: see :class:`LoopSettings`.
        target: the convergence target (``target.metric`` names the FINISHED keys).
        start: the case's start (its log, clock, rank and world size).
        all_reduce_sum: ``[numbers] -> [sums over ranks]``; None: the numbers times the world
            size is never assumed, so it is required when ``start.world_size > 1``.
        also: further targets convergence needs as well, their metrics among those
            ``evaluate`` gives.

    Raises:
        ValueError: ``world_size > 1`` and no ``all_reduce_sum``.
    """

    def __init__(self, settings: LoopSettings, target: Target, start: CaseStart, *,
                 all_reduce_sum: Callable[[list[float]], list[float]] | None = None,
                 also: tuple[Target, ...] = ()) -> None:
        if start.world_size > 1 and all_reduce_sum is None:
            raise ValueError("a run over several ranks needs the framework's all_reduce_sum")
        self.settings = settings
        self.target = target
        self.also = also
        self.start = start
        self.log = start.log
        self.clock = start.clock
        self.all_reduce_sum = all_reduce_sum or (lambda values: list(values))

    def init_done(self) -> None:
        """Close the init phase (INIT_END): data and model are ready."""
        self.clock.mark_init_end()
        self.log.log(perflog.INIT_END)

    def run(self, *, epoch_batches: Callable[[int], Iterable[Any]],
            batch_samples: Callable[[Any], int], evaluate: Callable[[], Any],
            train_step: Callable[[Any], Any] | None = None,
            train_micro_batch: Callable[[Any, bool], Any] | None = None,
            on_update: Callable[[], None] | None = None,
            batch_units: Callable[[Any], int] | None = None,
            learning_rate: Callable[[], float] | None = None) -> Progress:
        """Train until a limit or the target is reached.

        Args:
            epoch_batches: ``epoch -> this rank's training batches`` for epoch 1, 2, ...
                (re-shuffled by the case as it sees fit).
            batch_samples: the samples in a batch (this rank's).
            evaluate: the metric over the whole validation set (the same on every rank; the
                case reduces over ranks), or ``{name: value}`` with the target's metric, the
                further targets' and any other figure to report; charged to evaluation time.
            train_step: one optimizer update on a batch (forward, backward, step); returns the
                loss (charged to pure compute time).
            train_micro_batch: instead of ``train_step``, one micro-batch's forward and
                backward, the optimizer stepped when the flag is true (every
                ``gradient_accumulation_steps`` micro-batches); returns its loss, summed over
                the update for STEP_END (charged to pure compute time).
            on_update: called after each update (e.g. the learning-rate schedule's step).
            batch_units: a batch's units, when the throughput counts another unit than samples.
            learning_rate: the current learning rate for STEP_END, or None.

        Returns:
            The progress at the end (epochs, updates, this rank's samples, last figures).

        Raises:
            ValueError: not exactly one of ``train_step`` and ``train_micro_batch``.
        """
        if (train_step is None) == (train_micro_batch is None):
            raise ValueError("give one of train_step, train_micro_batch")
        s, log, clock = self.settings, self.log, self.clock
        world = self.start.world_size
        accumulation = s.gradient_accumulation_steps if train_micro_batch else 1
        state = Progress(next_eval_samples=s.eval_interval_samples,
                         next_eval_step=s.eval_interval_steps)
        if s.evaluate_baselines:
            value = evaluate()
            state.untrained = value if isinstance(value, Mapping) else float(value)
            log_untrained(log, self.target, state.untrained)
        update_loss = None
        stop = False
        log.log(perflog.TRAIN_START)
        clock.mark_train_start()
        while not stop:
            state.epoch += 1
            log.log(perflog.EPOCH_BEGIN, {"epoch": state.epoch})
            for batch in epoch_batches(state.epoch):
                state.micro_batches += 1
                update = state.micro_batches % accumulation == 0
                with clock.compute():  # a case's own step returns a number (its sync)
                    loss = (float(train_step(batch)) if train_step is not None
                            else train_micro_batch(batch, update))
                state.pending_samples += int(batch_samples(batch))
                if batch_units is not None:
                    state.pending_units += int(batch_units(batch))
                update_loss = loss if update_loss is None else update_loss + loss
                if not update:
                    continue
                state.steps += 1
                state.samples += state.pending_samples
                state.units += state.pending_units
                state.pending_samples = state.pending_units = 0
                if on_update is not None:
                    on_update()
                if state.steps % s.log_freq == 0:
                    step = {"epoch": state.epoch, "global_steps": state.steps,
                            "loss": float(update_loss),
                            "num_trained_samples": state.samples * world}
                    if learning_rate is not None:
                        step["learning_rate"] = float(learning_rate())
                    log.log(perflog.STEP_END, step)
                update_loss = None
                if s.eval_interval_samples and state.samples * world >= state.next_eval_samples:
                    self._evaluate(evaluate, state)
                    state.next_eval_samples = ((state.samples * world // s.eval_interval_samples
                                                + 1) * s.eval_interval_samples)
                if s.eval_interval_steps and self.step_count(state) >= state.next_eval_step:
                    self._evaluate(evaluate, state)
                    state.next_eval_step = ((self.step_count(state) // s.eval_interval_steps
                                             + 1) * s.eval_interval_steps)
                if self.limit_reached(state) or (s.stop_at_target and state.converged):
                    stop = True
                    break
            stop = stop or bool(s.epochs and state.epoch >= s.epochs)
            per_epoch = not (s.eval_interval_samples or s.eval_interval_steps)
            if per_epoch or (stop and state.evaluated_at_step != state.steps):
                self._evaluate(evaluate, state)
            log.log(perflog.EPOCH_END, {"epoch": state.epoch})
            stop = stop or (s.stop_at_target and state.converged)
        clock.mark_train_end()
        log.log(perflog.TRAIN_END)
        return state

    def finish(self, state: Progress, *, input_blind: Callable[[], float] | None = None,
               **figures: Any) -> dict[str, Any]:
        """Write FINISHED (``RoundClock.finished``'s figures, the target's, ``epochs``,
        ``global_steps``, ``world_size`` and ``figures``) and return its value; with
        ``evaluate_baselines``, also the untrained model's metric and ``input_blind()``'s, the
        metric of the case's best input-blind predictor (``driver.convergence``).

        Raises:
            ValueError: ``evaluate_baselines`` is set and the case gives no ``input_blind``.
        """
        if self.settings.evaluate_baselines:
            if input_blind is None:
                raise ValueError(f"config {EVALUATE_BASELINES}: the case has no input-blind "
                                 "predictor to score")
            figures.update(baseline_figures(self.target, state.untrained, input_blind()))
        (num_trained_samples,) = self.all_reduce_sum([float(state.samples)])
        value = self.clock.finished(
            int(num_trained_samples), state.converged,
            **self.target.finished_figures(state.metric), epochs=state.epoch,
            global_steps=state.steps, world_size=self.start.world_size, **figures)
        self.log.log(perflog.FINISHED, value)
        return value

    def step_count(self, state: Progress) -> int:
        """Steps as ``max_steps`` and ``eval_interval_steps`` count them (``step_unit``)."""
        return state.micro_batches if self.settings.step_unit == "micro_batch" else state.steps

    def limit_reached(self, state: Progress) -> bool:
        """Whether ``max_steps`` or ``max_samples`` is reached (``step_unit``,
        ``max_samples_scope``)."""
        s = self.settings
        scope = self.start.world_size if s.max_samples_scope == "world" else 1
        return bool((s.max_steps and self.step_count(state) >= s.max_steps)
                    or (s.max_samples and state.samples * scope >= s.max_samples))

    def _evaluate(self, evaluate: Callable[[], Any], state: Progress) -> None:
        with self.clock.evaluation():
            value = evaluate()
        figures = as_figures(self.target, value if isinstance(value, Mapping) else float(value))
        state.figures = figures
        state.metric = figures[self.target.metric]
        state.converged = all_reached((self.target, *self.also), figures)
        state.evaluated_at_step = state.steps
        self.log.log(perflog.EVALUATE, {"epoch": state.epoch, "global_steps": state.steps,
                                        **figures})
