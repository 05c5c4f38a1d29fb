"""Statistics over rounds, and the pass rule of a case (one module for every suite).

Sources:

* MLPerf Training Rules (mlcommons/training_policies, ``training_rules.adoc``, section
  "Benchmark Results"): a benchmark result is computed from several runs by dropping the fastest
  and the slowest and taking the mean of the rest ("olympic" scoring); a single run that fails to
  converge may be treated as the slowest and dropped, more than one invalidates the result.
* Sample standard deviation (n - 1 in the denominator, Bessel's correction) as Python's
  ``statistics.stdev``.
"""

from __future__ import annotations

import math
from typing import Iterable

from flagperf_ansible.config.casespec import as_number

#: Fewest rounds for olympic scoring and for MLPerf's "one non-converged run" allowance
#: (MLPerf's smallest run count per benchmark is 5, e.g. ResNet-50).
OLYMPIC_MIN_N = 5


def describe(values: Iterable[float]) -> dict[str, float | int | None]:
    """Describe one figure over rounds.

    Args:
        values: one number per round (e.g. ``p_whole`` in samples/s).

    Returns:
        ``{n, mean, std, cv, min, max, olympic_mean}`` where ``std`` is the sample standard
        deviation (0.0 for a single value), ``cv = std / |mean|`` (coefficient of variation, a
        fraction; None when the mean is 0) and ``olympic_mean`` the mean after dropping one
        smallest and one largest value (MLPerf's scoring; None when ``n < 5``). Units are those
        of ``values`` (``cv`` has none).

    Raises:
        ValueError: ``values`` is empty.
    """
    data = [float(v) for v in values]
    if not data:
        raise ValueError("no values to describe")
    n = len(data)
    mean = math.fsum(data) / n
    var = math.fsum((v - mean) ** 2 for v in data) / (n - 1) if n > 1 else 0.0
    std = math.sqrt(var)
    olympic = None
    if n >= OLYMPIC_MIN_N:
        kept = sorted(data)[1:-1]
        olympic = math.fsum(kept) / len(kept)
    return {"n": n, "mean": mean, "std": std, "cv": std / abs(mean) if mean else None,
            "min": min(data), "max": max(data), "olympic_mean": olympic}


def case_passes(planned: int, ran_to_finish: int, passed: int) -> bool:
    """The pass rule of a case over its rounds, for every suite.

    Args:
        planned: rounds asked for (the case's ``repeat``).
        ran_to_finish: rounds whose every host exited 0 and whose rank 0 wrote FINISHED.
        passed: rounds among those that passed by their suite's rule
            (``suites.round_verdict``: training converged to its target, inference within its
            accuracy bound, base reported every declared figure, diagnostic ran).

    Returns:
        True when every planned round ran to FINISHED and either all passed, or
        ``planned >= 5`` and at most one did not (MLPerf Training Rules, "Benchmark Results":
        one run that fails to converge may be dropped as the slowest).
    """
    if planned < 1 or ran_to_finish != planned:
        return False
    allowed = 1 if planned >= OLYMPIC_MIN_N else 0
    return planned - passed <= allowed


def numeric_fields(records: Iterable[dict]) -> list[str]:
    """Keys whose values are numbers (bools excluded) in any record, in first-seen order."""
    keys: list[str] = []
    for record in records:
        for key, value in record.items():
            if as_number(value) is not None and key not in keys:
                keys.append(key)
    return keys
