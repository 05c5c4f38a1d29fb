"""The PerfLog emitter: one ``[PerfLog] {json}`` line per event, as FlagPerf writes them.

Line format (FlagPerf-compatible, parsed by ``flagperf_ansible.perflog``)::

    [PerfLog] {"event": NAME, "value": {...}, "metadata": {"file": ..., "lineno": ...,
               "time_ms": ..., "rank": ...}}

``value`` is omitted for events without one; ``time_ms`` is wall-clock epoch milliseconds, so it
lines up with the hardware monitors' timestamps.
"""

from __future__ import annotations

import inspect
import json
import math
import sys
import time
from typing import Any, TextIO

PREFIX = "[PerfLog]"

INIT_START = "INIT_START"
INIT_END = "INIT_END"
TRAIN_START = "TRAIN_START"
TRAIN_END = "TRAIN_END"
EPOCH_BEGIN = "EPOCH_BEGIN"
EPOCH_END = "EPOCH_END"
STEP_BEGIN = "STEP_BEGIN"
STEP_END = "STEP_END"
EVALUATE = "EVALUATE"
LAUNCH_TRAINING = "LAUNCH_TRAINING"
CONVERT_MODEL = "CONVERT_MODEL"
CREATE_OPTIMIZER = "CREATE_OPTIMIZER"
MODEL_TO_FP16 = "MODEL_TO_FP16"
MODEL_TO_DDP = "MODEL_TO_DDP"
FINISHED = "FINISHED"
SUBMIT_INFO = "SUBMIT_INFO"

EVENTS = (
    INIT_START, INIT_END, TRAIN_START, TRAIN_END, EPOCH_BEGIN, EPOCH_END, STEP_BEGIN, STEP_END,
    EVALUATE, LAUNCH_TRAINING, CONVERT_MODEL, CREATE_OPTIMIZER, MODEL_TO_FP16, MODEL_TO_DDP,
    FINISHED, SUBMIT_INFO,
)


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


class PerfLogger:
    """Writes PerfLog events for one rank.

    Args:
        rank: the global rank written in every event's metadata.
        stream: where lines go (default ``sys.stdout``, which the driver points at
            ``rank<R>.out.log``).
    """

    def __init__(self, rank: int = 0, stream: TextIO | None = None) -> None:
        self.rank = rank
        self.stream = stream

    def log(self, event: str, value: dict[str, Any] | None = None) -> dict[str, Any]:
        """Write one event line and return the record written.

        Raises:
            ValueError: ``event`` is not one of ``EVENTS``.
        """
        if event not in EVENTS:
            raise ValueError(f"unknown PerfLog event {event!r}")
        caller = inspect.stack(context=0)[1]
        record: dict[str, Any] = {"event": event}
        if value is not None:
            record["value"] = _plain(value)
        record["metadata"] = {
            "file": caller.filename,
            "lineno": caller.lineno,
            "time_ms": int(time.time() * 1000),
            "rank": self.rank,
        }
        stream = self.stream or sys.stdout
        stream.write(f"{PREFIX} {json.dumps(record, sort_keys=False)}\n")
        stream.flush()
        return record
