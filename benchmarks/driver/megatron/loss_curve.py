"""An LLM round's loss curve against its reference curve: upstream FlagPerf's pass rule.

FlagPerf's LLM cases (``training/benchmarks/llama3_8B/megatron``) pass when, from step 21 on,
the mean relative error of every step's loss against nvidia's curve is under 2 %:

    error = mean over steps s >= from_step of |loss_s - reference_s| / |reference_s|

A curve file is JSON: ``{"steps": [1, 2, ...], "loss": [...], "source": "..."}``, one loss
per step (the global batch's mean token cross-entropy, nats). Standard library only: the
controller's tests read it too.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Sequence


def read_curve(path: str | Path) -> dict[int, float]:
    """``{step: loss}`` of a curve file.

    Raises:
        ValueError: not a curve (the message names the file), or steps and losses differ in
            length.
        OSError: the file cannot be read.
    """
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    steps, losses = data.get("steps"), data.get("loss") if isinstance(data, dict) else (None, None)
    if not isinstance(steps, list) or not isinstance(losses, list) or len(steps) != len(losses):
        raise ValueError(f"{path}: expected {{\"steps\": [...], \"loss\": [...]}} of one length")
    return {int(step): float(loss) for step, loss in zip(steps, losses)}


def write_curve(path: str | Path, steps: Sequence[int], losses: Sequence[float],
                **about: Any) -> None:
    """Write a curve file; ``about`` adds keys such as ``source``."""
    Path(path).write_text(json.dumps({**about, "steps": list(steps), "loss": list(losses)},
                                     indent=1) + "\n", encoding="utf-8")


def mean_relative_error(curve: dict[int, float], reference: dict[int, float],
                        from_step: int) -> float:
    """The mean of ``|loss - reference| / |reference|`` over the steps from ``from_step`` that
    both curves hold (a non-finite loss counts as an infinite error).

    Raises:
        ValueError: no step from ``from_step`` is in both curves, or a reference loss is 0.
    """
    steps = sorted(s for s in curve if s >= from_step and s in reference)
    if not steps:
        raise ValueError(f"no step from {from_step} on is in both the curve and its reference")
    total = 0.0
    for step in steps:
        if reference[step] == 0:
            raise ValueError(f"reference loss at step {step} is 0")
        loss = curve[step]
        total += abs(loss - reference[step]) / abs(reference[step]) if math.isfinite(loss) \
            else math.inf
    return total / len(steps)
