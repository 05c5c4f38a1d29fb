"""The training loop of a case on any framework: the PerfLog events, phase times, termination
and convergence check that make every framework's figures the same figures.

A case written for TensorFlow, PaddlePaddle or MindSpore (no torch in its environment) gives
the loop its framework's work as plain callables; the loop does the rest exactly as the
PyTorch trainer (``driver/torch/trainer.py``) does it, so FINISHED carries the same keys
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
(0: evaluate at the end of every epoch), ``stop_at_target`` (true), ``log_freq`` (50),
``seed`` (0) and ``evaluate_baselines`` (false: see ``driver.convergence``; then an EVALUATE of
the model as built, ``"untrained": true`` at step 0, comes between INIT_END and TRAIN_START).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from driver import perflog
from driver.case_io import load_config, parse_case_args, redirect_rank_output
from driver.convergence import EVALUATE_BASELINES, Target, as_figures, baseline_figures
from driver.finished import RoundClock

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

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> "LoopSettings":
        """Read the settings from ``config``; other keys are the case's and left alone.

        Raises:
            ValueError: a batch size is missing or not positive, no termination is set, or a
                count is negative (the message names the key).
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
            evaluate_baselines=bool(config.get(EVALUATE_BASELINES, False)))
        if not (settings.epochs or settings.max_steps or settings.max_samples):
            raise ValueError("config: set at least one of epochs, max_steps, max_samples")
        return settings

    def total_steps(self, steps_per_epoch: int, world_size: int) -> int:
        """Updates the run is planned for: the first of the limits that applies (for a
        learning-rate schedule); ``steps_per_epoch`` is this rank's batches per epoch."""
        limits = []
        if self.epochs:
            limits.append(steps_per_epoch * self.epochs)
        if self.max_steps:
            limits.append(self.max_steps)
        if self.max_samples:
            limits.append(-(-self.max_samples // (self.train_batch_size * world_size)))
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
    """Where training stands: ``samples`` are this rank's, ``metric`` the last evaluation's."""

    epoch: int = 0
    steps: int = 0
    samples: int = 0
    metric: float | None = None
    converged: bool = False
    evaluated_at_step: int = -1
    next_eval_samples: int = 0
    #: The metric of the model as built (``evaluate_baselines``), else None.
    untrained: float | None = None


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

    Raises:
        ValueError: ``world_size > 1`` and no ``all_reduce_sum``.
    """

    def __init__(self, settings: LoopSettings, target: Target, start: CaseStart, *,
                 all_reduce_sum: Callable[[list[float]], list[float]] | None = None) -> None:
        if start.world_size > 1 and all_reduce_sum is None:
            raise ValueError("a run over several ranks needs the framework's all_reduce_sum")
        self.settings = settings
        self.target = target
        self.start = start
        self.log = start.log
        self.clock = start.clock
        self.all_reduce_sum = all_reduce_sum or (lambda values: list(values))

    def init_done(self) -> None:
        """Close the init phase (INIT_END): data and model are ready."""
        self.clock.mark_init_end()
        self.log.log(perflog.INIT_END)

    def run(self, *, epoch_batches: Callable[[int], Iterable[Any]],
            train_step: Callable[[Any], float], batch_samples: Callable[[Any], int],
            evaluate: Callable[[], float], learning_rate: Callable[[], float] | None = None,
            ) -> Progress:
        """Train until a limit or the target is reached.

        Args:
            epoch_batches: ``epoch -> this rank's training batches`` for epoch 1, 2, ...
                (re-shuffled by the case as it sees fit).
            train_step: one optimizer update on a batch (forward, backward, step); returns the
                loss as a float (charged to pure compute time).
            batch_samples: the samples in a batch (this rank's).
            evaluate: the metric over the whole validation set (the same on every rank; the
                case reduces over ranks); charged to evaluation time.
            learning_rate: the current learning rate for STEP_END, or None.

        Returns:
            The progress at the end (epochs, updates, this rank's samples, last metric).
        """
        s, log, clock = self.settings, self.log, self.clock
        world = self.start.world_size
        state = Progress(next_eval_samples=s.eval_interval_samples)
        if s.evaluate_baselines:
            state.untrained = float(evaluate())
            log_untrained(log, self.target, state.untrained)
        stop = False
        log.log(perflog.TRAIN_START)
        clock.mark_train_start()
        while not stop:
            state.epoch += 1
            log.log(perflog.EPOCH_BEGIN, {"epoch": state.epoch})
            for batch in epoch_batches(state.epoch):
                with clock.compute():
                    loss = float(train_step(batch))
                state.steps += 1
                state.samples += int(batch_samples(batch))
                if state.steps % s.log_freq == 0:
                    step = {"epoch": state.epoch, "global_steps": state.steps, "loss": loss,
                            "num_trained_samples": state.samples * world}
                    if learning_rate is not None:
                        step["learning_rate"] = float(learning_rate())
                    log.log(perflog.STEP_END, step)
                if s.eval_interval_samples and state.samples * world >= state.next_eval_samples:
                    self._evaluate(evaluate, state)
                    state.next_eval_samples = ((state.samples * world // s.eval_interval_samples
                                                + 1) * s.eval_interval_samples)
                if self._limit_reached(state) or (s.stop_at_target and state.converged):
                    stop = True
                    break
            stop = stop or bool(s.epochs and state.epoch >= s.epochs)
            if not s.eval_interval_samples or (stop and state.evaluated_at_step != state.steps):
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

    def _limit_reached(self, state: Progress) -> bool:
        s = self.settings
        return bool((s.max_steps and state.steps >= s.max_steps)
                    or (s.max_samples and state.samples * self.start.world_size >= s.max_samples))

    def _evaluate(self, evaluate: Callable[[], float], state: Progress) -> None:
        with self.clock.evaluation():
            metric = float(evaluate())
        state.metric = metric
        state.converged = self.target.reached(metric)
        state.evaluated_at_step = state.steps
        self.log.log(perflog.EVALUATE, {"epoch": state.epoch, "global_steps": state.steps,
                                        self.target.metric: metric})
