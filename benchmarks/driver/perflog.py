"""The PerfLog emitter: one ``[PerfLog] {json}`` line per event, as FlagPerf writes them.

Line format (FlagPerf-compatible, parsed by ``flagperf_ansible.results.perflog``)::

    [PerfLog] {"event": NAME, "value": {...}, "metadata": {"file": ..., "lineno": ...,
               "time_ms": ..., "rank": ...}}

``value`` is omitted for events without one; ``time_ms`` is wall-clock epoch milliseconds, so it
lines up with the hardware monitors' timestamps; ``file`` and ``lineno`` name the line that
logged the event.

Event names: every member of upstream FlagPerf's ``training/benchmarks/driver/event.py``
``Event`` enum (same spelling, so its logs and ours read alike), the inference suite's
phases and the base micro-benchmarks' window. Upstream's inference runner (``inference/run_inference.py``) writes its phases as loguru
levels ("Init Begin", "Model Forward Begin", ...), not PerfLog lines; here they are PerfLog
events, named in ``FLAGPERF_INFERENCE_PHASES``.
"""

from __future__ import annotations

import json
import math
import sys
import time
from typing import Any, TextIO

PREFIX = "[PerfLog]"

# Training (upstream FlagPerf's Event enum, in its order).
INIT_START = "INIT_START"
INIT_END = "INIT_END"
TRAIN_START = "TRAIN_START"
TRAIN_END = "TRAIN_END"
EPOCH_BEGIN = "EPOCH_BEGIN"
EPOCH_END = "EPOCH_END"
STEP_BEGIN = "STEP_BEGIN"
STEP_END = "STEP_END"
BACKWARD = "BACKWARD"
INIT_EVALUATION = "INIT_EVALUATION"
EVALUATE = "EVALUATE"
LAUNCH_TRAINING = "LAUNCH_TRAINING"
CONVERT_MODEL = "CONVERT_MODEL"
CREATE_OPTIMIZER = "CREATE_OPTIMIZER"
MODEL_TO_FP16 = "MODEL_TO_FP16"
MODEL_TO_DDP = "MODEL_TO_DDP"
FINISHED = "FINISHED"
SUBMIT_INFO = "SUBMIT_INFO"

# Inference (seed 004: framework validation, then export, vendor compile and inference).
# INIT_START/INIT_END open the run and FINISHED ends it, as in training.
VALIDATION_START = "VALIDATION_START"   # the framework's own forward over the data set
VALIDATION_END = "VALIDATION_END"
EXPORT_START = "EXPORT_START"           # e.g. to ONNX
EXPORT_END = "EXPORT_END"
COMPILE_START = "COMPILE_START"         # the vendor's compiler builds its engine
COMPILE_END = "COMPILE_END"
INFERENCE_START = "INFERENCE_START"     # the compiled engine over the data set
INFERENCE_END = "INFERENCE_END"
FORWARD = "FORWARD"                     # one batch of validation or inference (optional)

TRAINING_EVENTS = (
    INIT_START, INIT_END, TRAIN_START, TRAIN_END, EPOCH_BEGIN, EPOCH_END, STEP_BEGIN, STEP_END,
    BACKWARD, INIT_EVALUATION, EVALUATE, LAUNCH_TRAINING, CONVERT_MODEL, CREATE_OPTIMIZER,
    MODEL_TO_FP16, MODEL_TO_DDP, FINISHED, SUBMIT_INFO,
)
INFERENCE_EVENTS = (
    VALIDATION_START, VALIDATION_END, EXPORT_START, EXPORT_END, COMPILE_START, COMPILE_END,
    INFERENCE_START, INFERENCE_END, FORWARD,
)

# Base micro-benchmarks (FlagPerf's base/: bandwidths, FLOP/s of one operation): the measured
# loop, the window the monitors cover.
BENCHMARK_START = "BENCHMARK_START"
BENCHMARK_END = "BENCHMARK_END"
BASE_EVENTS = (BENCHMARK_START, BENCHMARK_END)

EVENTS = TRAINING_EVENTS + INFERENCE_EVENTS + BASE_EVENTS
_KNOWN = frozenset(EVENTS)

#: Upstream inference/run_inference.py's phase labels and the events they are here.
FLAGPERF_INFERENCE_PHASES = {
    "Init Begin": INIT_START,
    "Init End": INIT_END,
    "Model Forward Begin": VALIDATION_START,
    "Model Forward End": VALIDATION_END,
    "Export Begin": EXPORT_START,
    "Export End": EXPORT_END,
    "Vendor Compile Begin": COMPILE_START,
    "Vendor Compile End": COMPILE_END,
    "Vendor Inference Begin": INFERENCE_START,
    "Vendor Inference End": INFERENCE_END,
    "Finish Info": FINISHED,
}


def _plain(value: Any) -> Any:
    """JSON-safe copy: tensors and numpy scalars become numbers, NaN/inf become null."""
    if hasattr(value, "item") and callable(value.item):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _item(value: Any) -> Any:
    """``json.dumps``'s ``default``: a one-element tensor or a numpy scalar as a Python number."""
    item = getattr(value, "item", None)
    if callable(item):
        return item()
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _dumps(record: dict[str, Any]) -> str:
    # Most values are plain numbers: encode them as they are, and walk the record (``_plain``)
    # only when it holds a non-finite float (strict JSON has no literal for it) or a key that
    # is not a string or number.
    try:
        return json.dumps(record, allow_nan=False, default=_item)
    except (ValueError, TypeError):
        return json.dumps(_plain(record), allow_nan=False)


class PerfLogger:
    """Writes PerfLog events for one rank.

    Args:
        rank: the global rank written in every event's metadata.
        stream: where lines go (default ``sys.stdout`` at each event, which the driver points
            at ``rank<R>.out.log``).
    """

    def __init__(self, rank: int = 0, stream: TextIO | None = None) -> None:
        self.rank = rank
        self.stream = stream

    def log(self, event: str, value: dict[str, Any] | None = None, *,
            stacklevel: int = 1) -> dict[str, Any]:
        """Write one event line, flushed; return its record (``value`` as given, ``metadata``
        as written).

        Args:
            event: one of ``EVENTS``.
            value: the event's figures (tensors and numpy scalars are written as numbers,
                NaN and infinities as null).
            stacklevel: whose line the metadata names: 1 the caller of ``log``, 2 its caller
                (for a helper that logs on behalf of its caller), and so on.

        Raises:
            ValueError: ``event`` is not one of ``EVENTS``, or ``stacklevel`` is deeper than
                the stack.
            TypeError: ``value`` holds something JSON cannot encode (e.g. a ``Path``).
        """
        if event not in _KNOWN:
            raise ValueError(f"unknown PerfLog event {event!r}")
        # One frame lookup (well under a microsecond); ``inspect.stack`` built a FrameInfo,
        # with a file lookup, for every frame of the stack at each event.
        caller = sys._getframe(stacklevel)
        record: dict[str, Any] = {"event": event}
        if value is not None:
            record["value"] = value
        record["metadata"] = {
            "file": caller.f_code.co_filename,
            "lineno": caller.f_lineno,
            "time_ms": int(time.time() * 1000),
            "rank": self.rank,
        }
        stream = self.stream or sys.stdout
        stream.write(f"{PREFIX} {_dumps(record)}\n")
        stream.flush()
        return record
