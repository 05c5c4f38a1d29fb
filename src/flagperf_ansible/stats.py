"""Statistics over rounds."""

from __future__ import annotations

import math
from typing import Iterable


def describe(values: Iterable[float]) -> dict[str, float | int]:
    """``{n, mean, std, min, max}`` of ``values``; ``std`` is the sample standard deviation
    (n - 1 in the denominator), 0.0 for a single value.

    Raises:
        ValueError: ``values`` is empty.
    """
    data = [float(v) for v in values]
    if not data:
        raise ValueError("no values to describe")
    n = len(data)
    mean = math.fsum(data) / n
    var = math.fsum((v - mean) ** 2 for v in data) / (n - 1) if n > 1 else 0.0
    return {"n": n, "mean": mean, "std": math.sqrt(var), "min": min(data), "max": max(data)}


def numeric_fields(records: Iterable[dict]) -> list[str]:
    """Keys whose values are numbers (bools excluded) in any record, in first-seen order."""
    keys: list[str] = []
    for record in records:
        for key, value in record.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool) and key not in keys:
                keys.append(key)
    return keys
