"""Parse PerfLog lines from rank logs (ours and FlagPerf's own).

A PerfLog line is ``[PerfLog] {"event": ..., "value": {...}, "metadata": {...}}`` anywhere in a
line (FlagPerf prefixes some with logging fields). Lines that do not parse are counted, never
fatal: a crashed rank leaves a truncated log that must still yield what it has.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

PREFIX = "[PerfLog]"
_RANK_LOG = re.compile(r"^rank(\d+)\.out\.log$")

#: FINISHED keys of real FlagPerf logs mapped to ours. The original key is kept too.
FINISHED_ALIASES = {
    "training_sequences_per_second": "p_whole",
    "training_images_per_second": "p_whole",
    "training_samples_per_second": "p_whole",
    "throughput": "p_whole",
}


@dataclass
class RankLog:
    """Events of one rank's log."""

    rank: int | None
    events: list[dict[str, Any]] = field(default_factory=list)
    bad_lines: int = 0

    def last(self, name: str) -> dict[str, Any] | None:
        """The last event called ``name``, or None."""
        return next((e for e in reversed(self.events) if e.get("event") == name), None)

    @property
    def finished(self) -> dict[str, Any] | None:
        """The FINISHED values with aliases mapped (``None`` when the rank never finished)."""
        event = self.last("FINISHED")
        if event is None:
            return None
        return normalize_finished(event.get("value") or {})


def normalize_finished(value: dict[str, Any]) -> dict[str, Any]:
    """Copy of a FINISHED value with FlagPerf's aliases added under our names."""
    out = dict(value)
    for alias, name in FINISHED_ALIASES.items():
        if alias in value and name not in value:
            out[name] = value[alias]
    return out


def parse_lines(lines: Iterable[str]) -> tuple[list[dict[str, Any]], int]:
    """Events found in ``lines`` and the number of PerfLog lines that did not parse."""
    events: list[dict[str, Any]] = []
    bad = 0
    for line in lines:
        start = line.find(PREFIX)
        if start < 0:
            continue
        text = line[start + len(PREFIX):].strip()
        try:
            record = json.loads(text)
        except json.JSONDecodeError:
            bad += 1
            continue
        if isinstance(record, dict) and isinstance(record.get("event"), str):
            events.append(record)
        else:
            bad += 1
    return events, bad


def parse_rank_log(path: Path) -> RankLog:
    """Parse one ``rank<R>.out.log``; the rank comes from the file name, else the metadata."""
    with open(path, encoding="utf-8", errors="replace") as handle:
        events, bad = parse_lines(handle)
    match = _RANK_LOG.match(path.name)
    rank = int(match.group(1)) if match else None
    if rank is None and events:
        rank = (events[0].get("metadata") or {}).get("rank")
    return RankLog(rank=rank, events=events, bad_lines=bad)


def find_rank_logs(directory: Path) -> list[Path]:
    """Every ``rank<R>.out.log`` below ``directory``, sorted by path."""
    return sorted(p for p in directory.rglob("rank*.out.log") if _RANK_LOG.match(p.name))
