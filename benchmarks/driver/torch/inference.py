"""The inference suite's driver (seed 004, upstream FlagPerf's ``inference/run_inference.py``):
a case gives six functions, the driver runs the seven steps, the same way for every case.

A case (``benchmarks/inference/<model>/pytorch/case.py``) defines ``build_dataloader(config,
data_dir)``, ``create_model(config, data_dir)``, ``evaluator(outputs, labels) -> (correct,
counted)``, ``model_forward(model, dataloader, evaluator, config) -> PathResult``,
``export_model(model, config, onnx_path) -> Path`` and ``engine_forward(engine, dataloader,
evaluator, config) -> PathResult``; both forwards return :func:`timed_forward`'s result.

The steps and their PerfLog events (``driver/perflog.py``), in order:

1. init (``INIT_START``): the configuration is checked and the compiler's engine class loaded
   (``$FLAGPERF_VENDOR_DIR/inference_engine/<compiler>.py``), so that a wrong compiler fails in
   seconds, not after the validation;
2. data and model: ``build_dataloader``, ``create_model`` (not with ``no_validation``); upstream
   counts both in its init, so ``INIT_END`` closes steps 1 and 2;
3. framework validation (``VALIDATION_START``/``VALIDATION_END``): ``model_forward``, not with
   ``no_validation``;
4. ONNX export (``EXPORT_START``/``EXPORT_END``): ``export_model`` to
   ``<output_dir>/<model>_bs<batch_size>_<precision>.onnx``; skipped when ``exist_onnx_path`` is
   set (a relative path is under the data folder), and for an engine class that says it reads
   no ONNX file (``READS_ONNX = False``: inductor compiles the PyTorch model; it gets
   ``exist_onnx_path`` or None);
5. compile (``COMPILE_START``/``COMPILE_END``): ``InferModel(config, onnx_path, model)``
   (``build_time``), then one call on the first batch (``warmup_time``, :func:`warm_up`: a
   compiler that compiles lazily, as inductor does, compiles there); ``compile_time`` is
   their sum, kept out of ``p_inference_core`` as FlagPerf keeps it out of its core figure;
6. engine inference (``INFERENCE_START``/``INFERENCE_END``): ``engine_forward``;
7. summary: ``FINISHED``.

``compiler: null`` ends after step 3. ``INFERENCE_START``..``INFERENCE_END`` is the suite's
monitoring window (``flagperf_ansible.config.suites``): it covers the measured path, the one
``num_items`` counts: the engine's (step 6), or, with ``compiler: null``, the validation (it then
encloses step 3's events), so that energy per item is that path's alone.

The engine's configuration is the case's, with ``exist_compiler_path`` made absolute (a
relative path is under the data folder) and ``output_dir`` and ``data_dir`` added (folders, as
strings). An engine class has ``__call__(inputs) -> (outputs, foo_time)``; it may set ``info``
(a JSON-able dict), written in ``COMPILE_END``.

Figures (FINISHED; FlagPerf's names where it has them). Upstream's
``inference/benchmarks/resnet50/pytorch/forward.py`` defines, per path::

    whole = repeat * items / duration      duration: wall time of the whole loop (data
                                           loading and evaluation included)
    core  = repeat * items / core_time     core_time: sum over batches of sync, host-to-device
                                           copy, forward, sync

Upstream subtracts the engine's ``foo_time`` from both times; here it is summed and reported
(``foo_time``), never subtracted (issue #27): what an engine leaves out of its own timing is
still time the user waits for. ``final_acc_gap = |val_average_acc - infer_average_acc|``, the
bound being ``target_acc_gap``; beyond FlagPerf, the engine's outputs are set beside the
framework's on the first batches (``output_rel_error`` within ``target_output_rel_error``,
``top1_agreement``: :func:`output_agreement`), since an accuracy gap cannot tell a wrong
engine where the model predicts nearly one class; latencies are per batch (core time, ms),
percentiles by linear interpolation (numpy's default); ``e2e_time`` runs from :func:`main`'s
start (after the imports, as upstream's ``run_inference.py`` times it) to FINISHED.

Errors a user can fix (a configuration key, the compiler's file or class, an engine that fails
to build or run) end the run with one line on stderr and exit status 1; a case's own bug ends it
with its traceback.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Iterable, Mapping

import torch

from driver import dist, perflog
from driver.case_io import load_config, parse_case_args, redirect_rank_output, setting

VENDOR_DIR_ENV = "FLAGPERF_VENDOR_DIR"
ENGINE_FOLDER = "inference_engine"
ENGINE_CLASS = "InferModel"
_COMPILER_NAME = re.compile(r"^[A-Za-z0-9_]+$")

#: The path :func:`timed_forward` is timing, named in its FORWARD progress events (set by
#: :func:`main`; the cases' forwards call it without saying).
_current_path = {"name": "validation"}


class InferenceError(Exception):
    """A problem the user can fix, reported as one line (a configuration key, the compiler's
    engine file or class, an engine that fails)."""


def device(config: Mapping[str, Any]) -> torch.device:
    """Where the case runs: CUDA when available, unless config ``device`` is ``"cpu"``."""
    if torch.cuda.is_available() and config.get("device") != "cpu":
        return torch.device("cuda")
    return torch.device("cpu")


def synchronize(where: torch.device) -> None:
    """Wait for ``where``'s queued work (nothing to wait for on the CPU)."""
    if where.type == "cuda":
        torch.cuda.synchronize(where)


@dataclass
class PathResult:
    """One path's measurements (validation or engine inference), over all ``repeat`` passes.

    Attributes:
        items: items (images, sequences) through the path: the first input's first dimension,
            summed over batches and passes.
        batches: batches run.
        whole_s: wall time of the whole loop, data loading and evaluation included (s).
        core_s: sum of the batches' core times (s).
        batch_s: each batch's core time (s): sync, host-to-device copy, forward, sync.
        correct, counted: the evaluator's sums.
        foo_time: the engine's own ``foo_time`` summed over batches (s); reported, never
            subtracted.
        outputs: the first ``KEPT_BATCHES`` batches' outputs of the first pass (``_kept``:
            float32 on the CPU), to set the two paths' outputs side by side
            (:func:`output_agreement`).
    """

    items: int = 0
    batches: int = 0
    whole_s: float = 0.0
    core_s: float = 0.0
    batch_s: list[float] = field(default_factory=list)
    correct: int = 0
    counted: int = 0
    foo_time: float = 0.0
    outputs: list[torch.Tensor] = field(default_factory=list, repr=False)

    @property
    def whole(self) -> float | None:
        """Items/s over the whole loop (upstream's ``p_*_whole``); None without time."""
        return self.items / self.whole_s if self.whole_s > 0 else None

    @property
    def core(self) -> float | None:
        """Items/s over the core time (upstream's ``p_*_core``); None without time."""
        return self.items / self.core_s if self.core_s > 0 else None

    @property
    def accuracy(self) -> float | None:
        """``correct / counted``; None when nothing was counted."""
        return self.correct / self.counted if self.counted else None

    def latency(self, q: float) -> float | None:
        """The ``q``-th percentile (0..100) of the batches' core times, in ms, by linear
        interpolation between the nearest ranks (numpy's default); None without batches."""
        if not self.batch_s:
            return None
        ordered = sorted(self.batch_s)
        position = q / 100.0 * (len(ordered) - 1)
        low = math.floor(position)
        high = min(low + 1, len(ordered) - 1)
        value = ordered[low] + (ordered[high] - ordered[low]) * (position - low)
        return value * 1000.0

    def figures(self) -> dict[str, Any]:
        """The path's figures for its END event."""
        return {"items": self.items, "batches": self.batches, "whole_s": self.whole_s,
                "core_s": self.core_s, "throughput_whole": self.whole,
                "throughput_core": self.core, "correct": self.correct, "counted": self.counted,
                "accuracy": self.accuracy, "foo_time": self.foo_time}


#: Batches whose outputs each path keeps (of its first pass) for :func:`output_agreement`,
#: and the most values kept of each (16 MiB of float32): enough to tell a wrong engine, bounded
#: memory whatever the data set and model (BERT-large's logits are 15.6 M values a sequence).
KEPT_BATCHES = 8
KEPT_VALUES = 1 << 22


def _kept(outputs: Any) -> torch.Tensor | None:
    """The part of a batch's outputs kept: the first output tensor as rows of its last
    dimension (classes, vocabulary), the first rows up to ``KEPT_VALUES`` values; ids
    (integers) flat, the first ``KEPT_VALUES``."""
    while isinstance(outputs, (list, tuple)) and outputs:
        outputs = outputs[0]
    if not isinstance(outputs, torch.Tensor) or outputs.dim() == 0:
        return None
    if not outputs.is_floating_point():           # predicted ids already: kept as they are
        return outputs.reshape(-1)[:KEPT_VALUES].clone()
    rows = outputs.reshape(-1, outputs.shape[-1])
    return rows[: max(1, KEPT_VALUES // max(rows.shape[1], 1))].clone()


def output_agreement(validation: PathResult, inference: PathResult) -> dict[str, float | None]:
    """The engine's outputs against the framework's on the same batches (each path's kept
    ``outputs``): ``output_rel_error``, the largest over batches of ``||engine - framework||
    / ||framework||`` (L2 over the kept outputs, e.g. logits), and ``top1_agreement``, the
    fraction of rows (the last dimension's argmax) where both pick the same class or token;
    for outputs that are ids already (integers), the share of ids that differ, and that agree.
    An engine's flat outputs are read in the framework's shape; both figures are None when no
    batch pair has as many values. An engine that computes another function is far off in the
    first, even where a model with random weights predicts one class for nearly every input
    and the accuracies cannot tell."""
    errors, same, rows = [], 0, 0
    for framework, engine in zip(validation.outputs, inference.outputs):
        if framework.numel() == 0 or engine.numel() != framework.numel():
            continue
        engine = engine.reshape(framework.shape)
        if not framework.is_floating_point():     # ids: the error is the share that differ
            equal = framework == engine.to(framework.dtype)
            errors.append(1.0 - float(equal.float().mean()))
            same, rows = same + int(equal.sum()), rows + equal.numel()
            continue
        scale = float(torch.linalg.vector_norm(framework))
        errors.append(float(torch.linalg.vector_norm(engine - framework)) / max(scale, 1e-12))
        same += int((framework.argmax(-1) == engine.argmax(-1)).sum())
        rows += framework.shape[0]
    return {"output_rel_error": max(errors) if errors else None,
            "top1_agreement": same / rows if rows else None}


def _to_device(value: Any, where: torch.device) -> Any:
    if isinstance(value, torch.Tensor):
        return value.to(where, non_blocking=True)
    return value


def _to_cpu(outputs: Any) -> Any:
    """Outputs for the evaluator: tensors on the CPU, floating ones in float32 (an fp16
    engine's output, as upstream's ``pred.float()``); a list or tuple of one tensor becomes that
    tensor, a mapping (e.g. a transformers ``ModelOutput``) the list of its values."""
    if isinstance(outputs, Mapping):
        outputs = list(outputs.values())
    if isinstance(outputs, (list, tuple)):
        moved = [_to_cpu(item) for item in outputs]
        return moved[0] if len(moved) == 1 else moved
    if not isinstance(outputs, torch.Tensor):
        outputs = torch.as_tensor(outputs)
    outputs = outputs.detach().cpu()
    return outputs.float() if outputs.is_floating_point() else outputs


def _batch_items(inputs: tuple) -> int:
    for item in inputs:
        if isinstance(item, torch.Tensor) and item.dim() > 0:
            return int(item.shape[0])
    raise TypeError("a batch's inputs hold no tensor with a batch dimension")


def timed_forward(call: Callable[[tuple], tuple[Any, float]], dataloader: Iterable,
                  evaluator: Callable[[Any, torch.Tensor], tuple[int, int]],
                  config: Mapping[str, Any]) -> PathResult:
    """Run ``call`` over ``dataloader`` ``repeat`` times and time it (upstream's
    ``forward.py``: ``model_forward`` and ``engine_forward``).

    Args:
        call: ``inputs -> (outputs, foo_time)``: ``inputs`` the batch's input tensors on
            :func:`device`, ``outputs`` a tensor, a list of tensors or a mapping of them,
            ``foo_time`` seconds the call says it spent on other work than inference.
        dataloader: yields ``(inputs, labels)``: ``inputs`` a tuple of tensors (the model's
            positional inputs, batch first), ``labels`` a tensor left on the CPU.
        evaluator: ``(outputs on the CPU, labels) -> (correct, counted)`` for one batch.
        config: ``repeat`` (passes, default 1), ``log_freq`` (a FORWARD event every that many
            batches, default 1).

    Returns:
        The path's :class:`PathResult`. Each batch's core time runs from a sync before the
        host-to-device copy to a sync after ``call``; the whole time covers the loop, data
        loading and evaluation included; ``foo_time`` is summed, not subtracted.

    Raises:
        ValueError: ``repeat`` or ``log_freq`` is below 1.
        TypeError: a batch is not ``(inputs, labels)`` or its inputs hold no tensor.
    """
    where = device(config)
    repeat = int(setting(config, "repeat", 1))
    log_freq = int(setting(config, "log_freq", 1))
    if repeat < 1 or log_freq < 1:
        raise ValueError(f"repeat ({repeat}) and log_freq ({log_freq}) must be at least 1")
    log = perflog.PerfLogger(rank=dist.dist_info().rank)
    result = PathResult()
    try:
        batches_per_pass: int | None = len(dataloader)  # type: ignore[arg-type]
    except TypeError:
        batches_per_pass = None
    start = time.perf_counter()
    with torch.no_grad():
        for repetition in range(1, repeat + 1):
            for step, batch in enumerate(dataloader, start=1):
                if not isinstance(batch, (list, tuple)) or len(batch) != 2:
                    raise TypeError("a batch must be (inputs, labels)")
                inputs, labels = batch
                inputs = tuple(inputs) if isinstance(inputs, (list, tuple)) else (inputs,)
                synchronize(where)
                core_start = time.perf_counter()
                inputs = tuple(_to_device(item, where) for item in inputs)
                outputs, foo_time = call(inputs)
                synchronize(where)
                elapsed = time.perf_counter() - core_start
                result.batch_s.append(elapsed)
                result.core_s += elapsed
                result.foo_time += float(foo_time or 0.0)
                result.items += _batch_items(inputs)
                result.batches += 1
                on_cpu = _to_cpu(outputs)
                if repetition == 1 and len(result.outputs) < KEPT_BATCHES:
                    kept = _kept(on_cpu)
                    if kept is not None:
                        result.outputs.append(kept)
                correct, counted = evaluator(on_cpu, labels)
                result.correct += int(correct)
                result.counted += int(counted)
                if step % log_freq == 0:
                    log.log(perflog.FORWARD, {
                        "path": _current_path["name"], "pass": repetition, "step": step,
                        "batches": batches_per_pass, "core_ms": elapsed * 1000.0})
    result.whole_s = time.perf_counter() - start
    return result


# -- the engine ----------------------------------------------------------------------------

def warm_up(engine: Callable[[tuple], tuple[Any, float]], dataloader: Iterable,
            where: torch.device) -> float | None:
    """Call ``engine`` once on ``dataloader``'s first batch, outside the timed loop, and return
    the call's wall time (s, device synced); None when there is no batch of ``(inputs,
    labels)`` (the timed loop then reports the problem). A compiler that compiles on its
    first call (inductor) does it here: its compilation goes into ``compile_time``, not into
    ``p_inference_core``, as FlagPerf keeps it out of its core figure."""
    batch = next(iter(dataloader), None)
    if not isinstance(batch, (list, tuple)) or len(batch) != 2:
        return None
    inputs = batch[0]
    inputs = tuple(inputs) if isinstance(inputs, (list, tuple)) else (inputs,)
    with torch.no_grad():
        synchronize(where)
        start = time.perf_counter()
        engine(tuple(_to_device(item, where) for item in inputs))
        synchronize(where)
    return time.perf_counter() - start


def engine_file(compiler: str, vendor_dir: str | os.PathLike | None) -> Path:
    """``<vendor_dir>/inference_engine/<compiler>.py``.

    Raises:
        InferenceError: no vendor folder, or ``compiler`` is not a plain name.
    """
    if not vendor_dir:
        raise InferenceError(f"{VENDOR_DIR_ENV} is not set: no vendor folder to find compiler "
                             f"{compiler!r}'s engine in")
    if not _COMPILER_NAME.match(compiler):
        raise InferenceError(f"compiler {compiler!r}: expected a plain name (letters, digits, _)")
    return Path(vendor_dir) / ENGINE_FOLDER / f"{compiler}.py"


def load_engine_class(compiler: str, vendor_dir: str | os.PathLike | None = None) -> type:
    """The vendor's ``InferModel`` class for ``compiler``, loaded by file path under a private
    module name (``flagperf_inference_engine_<compiler>``), so that an engine file named like
    its package (``onnxruntime.py``) still imports the real package.

    Args:
        compiler: the configuration's ``compiler``.
        vendor_dir: the vendor's folder (default ``$FLAGPERF_VENDOR_DIR``).

    Raises:
        InferenceError: no such file, importing it failed (e.g. its package is not installed),
            or it has no ``InferModel`` class.
    """
    if vendor_dir is None:
        vendor_dir = os.environ.get(VENDOR_DIR_ENV) or None
    path = engine_file(compiler, vendor_dir)
    if not path.is_file():
        known = sorted(p.stem for p in path.parent.glob("*.py")) if path.parent.is_dir() else []
        raise InferenceError(f"compiler {compiler!r}: no engine file {path} (this vendor has: "
                             f"{', '.join(known) or 'none'})")
    name = f"flagperf_inference_engine_{compiler}"
    spec = importlib.util.spec_from_file_location(name, path)
    module: ModuleType = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as error:
        del sys.modules[name]
        raise InferenceError(f"compiler {compiler!r}: loading {path} failed: "
                             f"{_one_line(error)}") from error
    cls = getattr(module, ENGINE_CLASS, None)
    if not isinstance(cls, type):
        raise InferenceError(f"compiler {compiler!r}: {path} defines no class {ENGINE_CLASS}")
    return cls


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


# -- the seven steps -----------------------------------------------------------------------

@dataclass(frozen=True)
class _Settings:
    compiler: str | None
    no_validation: bool
    exist_onnx_path: Path | None
    exist_compiler_path: Path | None
    batch_size: int
    precision: str

    @classmethod
    def read(cls, config: Mapping[str, Any], config_file: Path, data_dir: Path) -> "_Settings":
        def fail(key: str, why: str) -> InferenceError:
            return InferenceError(f"{config_file}: {key}: {why}")

        compiler = config.get("compiler")
        if compiler is not None and (not isinstance(compiler, str) or not compiler):
            raise fail("compiler", f"{compiler!r} is not a compiler's name (or null)")
        no_validation = bool(config.get("no_validation") or False)
        onnx = config.get("exist_onnx_path")
        if no_validation and compiler is None:
            raise fail("no_validation", "with compiler null nothing would run")
        if no_validation and onnx is None:
            raise fail("no_validation", "needs exist_onnx_path: without the model there is "
                                        "nothing to export")
        try:
            batch_size = int(config["batch_size"])
        except (KeyError, TypeError, ValueError):
            raise fail("batch_size", f"{config.get('batch_size')!r} is not a number") from None

        def under_data(value: Any, key: str) -> Path | None:
            if value is None:
                return None
            if not isinstance(value, str) or not value:
                raise fail(key, f"{value!r} is not a path")
            path = Path(value)
            return path if path.is_absolute() else data_dir / path

        return cls(compiler=compiler, no_validation=no_validation,
                   exist_onnx_path=under_data(onnx, "exist_onnx_path"),
                   exist_compiler_path=under_data(config.get("exist_compiler_path"),
                                                  "exist_compiler_path"),
                   batch_size=batch_size,
                   precision="fp16" if config.get("fp16") else "fp32")


def _model_name(case: ModuleType) -> str:
    """``<model>`` of ``benchmarks/inference/<model>/pytorch/case.py``."""
    source = getattr(case, "__file__", None)
    return Path(source).resolve().parent.parent.name if source else "model"


def _parameters(model: torch.nn.Module | None) -> int | None:
    if not isinstance(model, torch.nn.Module):
        return None
    return sum(p.numel() for p in model.parameters())


def _path_result(value: Any, function: str) -> PathResult:
    if not isinstance(value, PathResult):
        raise TypeError(f"case.{function} returned {type(value).__name__}, expected "
                        "driver.torch.inference.PathResult (return timed_forward(...))")
    return value


def _latencies(prefix: str, result: PathResult | None) -> dict[str, float | None]:
    return {f"{prefix}_latency_p{q}": result.latency(q) if result else None
            for q in (50, 90, 99)}


def main(case: ModuleType, description: str) -> int:
    """A case's entry point: ``--config``, ``--output_dir``, ``--data_dir`` as the launch
    passes them; output to ``<output_dir>/rank<R>.out.log``; the seven steps (module
    docstring), ending with FINISHED.

    Returns:
        0 once FINISHED is written; 1 after one line on stderr for a problem the user can fix
        (:class:`InferenceError`). A case's own exception propagates (its traceback is logged).
    """
    e2e_start = time.time()
    args = parse_case_args(description)
    info = dist.dist_info()
    redirect_rank_output(args.output_dir, info.rank)
    log = perflog.PerfLogger(rank=info.rank)
    try:
        return _run(case, description, args, log, e2e_start)
    except InferenceError as error:
        print(f"inference: {error}", file=sys.stderr, flush=True)
        return 1


def run(case) -> int:
    """The driver of an inference case (case.yml ``driver: driver.torch.inference``;
    ``driver.run.Case``): :func:`main` with the case folder's ``case.py`` (the package module
    ``<case.package>.case``: its model, data, evaluator and forward) and case.yml's
    description."""
    return main(importlib.import_module(f"{case.package}.case"), case.description)


def _run(case: ModuleType, description: str, args: Any, log: perflog.PerfLogger,
         e2e_start: float) -> int:
    # 1. init: the configuration and the compiler's engine class, before anything slow.
    log.log(perflog.INIT_START, {"description": description})
    init_start = time.perf_counter()
    config = load_config(args.config)
    data_dir = Path(args.data_dir)
    settings = _Settings.read(config, args.config, data_dir)
    engine_class = (load_engine_class(settings.compiler) if settings.compiler else None)
    where = device(config)

    # 2. data and model.
    dataloader = case.build_dataloader(config, data_dir)
    model = None if settings.no_validation else case.create_model(config, data_dir)
    try:
        batches: int | None = len(dataloader)
    except TypeError:
        batches = None
    log.log(perflog.INIT_END, {
        "init_time": time.perf_counter() - init_start, "device": str(where),
        "compiler": settings.compiler, "precision": settings.precision,
        "batch_size": settings.batch_size, "batches": batches,
        "model": type(model).__name__ if model is not None else None,
        "parameters": _parameters(model)})

    # 3. framework validation; with compiler null it is the measured path (the window).
    validation: PathResult | None = None
    if not settings.no_validation:
        if engine_class is None:
            log.log(perflog.INFERENCE_START, {"path": "validation"})
        log.log(perflog.VALIDATION_START)
        _current_path["name"] = "validation"
        validation = _path_result(case.model_forward(model, dataloader, case.evaluator, config),
                                  "model_forward")
        log.log(perflog.VALIDATION_END, validation.figures())
        if engine_class is None:
            log.log(perflog.INFERENCE_END, {"path": "validation"})

    inference: PathResult | None = None
    export_time = compile_time = build_time = warmup_time = None
    if engine_class is not None:
        # 4. ONNX export, unless the configuration names a file or the engine reads none.
        onnx_path = settings.exist_onnx_path
        if onnx_path is None and getattr(engine_class, "READS_ONNX", True):
            target = (Path(args.output_dir) /
                      f"{_model_name(case)}_bs{settings.batch_size}_{settings.precision}.onnx")
            log.log(perflog.EXPORT_START, {"onnx_path": str(target)})
            start = time.perf_counter()
            onnx_path = Path(case.export_model(model, config, target))
            export_time = time.perf_counter() - start
            log.log(perflog.EXPORT_END, {
                "export_time": export_time, "onnx_path": str(onnx_path),
                "bytes": onnx_path.stat().st_size if onnx_path.is_file() else None})

        # 5. compile.
        engine_config = dict(config)
        engine_config.update(
            exist_compiler_path=(str(settings.exist_compiler_path)
                                 if settings.exist_compiler_path else None),
            output_dir=str(args.output_dir), data_dir=str(data_dir))
        log.log(perflog.COMPILE_START, {
            "compiler": settings.compiler,
            "engine_file": getattr(sys.modules.get(engine_class.__module__), "__file__", None),
            "onnx_path": str(onnx_path) if onnx_path is not None else None,
            "onnx_source": ("exist_onnx_path" if settings.exist_onnx_path
                            else "export" if onnx_path is not None else None),
            "exist_compiler_path": engine_config["exist_compiler_path"]})
        start = time.perf_counter()
        try:
            engine = engine_class(engine_config, onnx_path, model)
        except Exception as error:
            raise InferenceError(f"compiler {settings.compiler!r}: building the engine failed: "
                                 f"{_one_line(error)}") from error
        build_time = time.perf_counter() - start
        try:
            warmup_time = warm_up(engine, dataloader, where)
        except Exception as error:
            raise InferenceError(f"compiler {settings.compiler!r}: the engine's warm-up call "
                                 f"failed: {_one_line(error)}") from error
        compile_time = build_time + (warmup_time or 0.0)
        engine_info = getattr(engine, "info", None)
        log.log(perflog.COMPILE_END, {"compile_time": compile_time, "build_time": build_time,
                                      "warmup_time": warmup_time,
                                      **(engine_info if isinstance(engine_info, dict) else {})})

        # 6. engine inference: the measured path.
        log.log(perflog.INFERENCE_START, {"path": "inference"})
        _current_path["name"] = "inference"
        try:
            result = case.engine_forward(engine, dataloader, case.evaluator, config)
        except Exception as error:
            raise InferenceError(f"compiler {settings.compiler!r}: inference failed: "
                                 f"{_one_line(error)}") from error
        inference = _path_result(result, "engine_forward")
        log.log(perflog.INFERENCE_END, {"path": "inference", **inference.figures()})

    # 7. summary.
    measured = inference or validation
    val_acc = validation.accuracy if validation else None
    infer_acc = inference.accuracy if inference else None
    figures: dict[str, Any] = {
        "e2e_time": time.time() - e2e_start,
        "p_validation_whole": validation.whole if validation else None,
        "p_validation_core": validation.core if validation else None,
        "p_inference_whole": inference.whole if inference else None,
        "p_inference_core": inference.core if inference else None,
        "val_average_acc": val_acc,
        "infer_average_acc": infer_acc,
    }
    if val_acc is not None and infer_acc is not None:
        figures["final_acc_gap"] = abs(val_acc - infer_acc)
    if validation is not None and inference is not None:
        figures.update(output_agreement(validation, inference))
    figures.update({
        "target_acc_gap": config.get("target_acc_gap"),
        "target_output_rel_error": config.get("target_output_rel_error"),
        **_latencies("validation", validation),
        **_latencies("inference", inference),
        "foo_time": inference.foo_time if inference else None,
        "num_items": measured.items if measured else 0,
        "export_time": export_time,
        "compile_time": compile_time,
        "build_time": build_time,
        "warmup_time": warmup_time,
        "compiler": settings.compiler,
        "paths_run": [name for name, path in (("validation", validation),
                                               ("inference", inference)) if path],
        "precision": settings.precision,
        "batch_size": settings.batch_size,
        "device": str(where),
    })
    log.log(perflog.FINISHED, figures)
    return 0
