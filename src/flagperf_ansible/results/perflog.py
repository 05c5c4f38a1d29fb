"""Parse PerfLog lines from rank logs (ours and FlagPerf's own).

A PerfLog line is ``[PerfLog] {"event": ..., "value": {...}, "metadata": {...}}`` anywhere in a
line (FlagPerf prefixes some with logging fields). Lines that do not parse are counted, never
fatal: a crashed rank leaves a truncated log that must still yield what it has.

A rank log is read line by line. ``summarize`` and ``ingest`` keep only the events they use
(``parse_rank_log(path, keep=...)``: the monitoring window's, the last FINISHED), so memory
does not grow with the log, and a line that names none of those events is not decoded: it is
checked for completeness only (a line cut short, as a crashed rank leaves it, lacks its
closing brace). ``bench/perflog_parse.py`` measures both.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Collection, Iterable

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


def parse_lines(lines: Iterable[str], keep: Collection[str] | None = None
                ) -> tuple[list[dict[str, Any]], int]:
    """Events found in ``lines`` and the number of PerfLog lines that did not parse.

    Args:
        lines: the log's lines, read one at a time (a file object streams).
        keep: the event names to return; None keeps every event. Of FINISHED, which a rank
            writes once, only the last is kept. A line that names none of them (as a JSON
            string anywhere in it) is not decoded, and counts as bad only when it lacks its
            closing brace.
    """
    events: list[dict[str, Any]] = []
    bad = 0
    finished: dict[str, Any] | None = None
    # A kept event's line holds its name as a JSON string: a substring test, at C speed,
    # passes over the STEP_END lines that make up most of a log without decoding them.
    needles = tuple(f'"{name}"' for name in {*keep, "FINISHED"}) if keep is not None else ()
    for line in lines:
        if PREFIX not in line:
            continue
        for needle in needles:
            if needle in line:
                break
        else:
            if needles:
                if line[-2:] != "}\n" and not line.rstrip().endswith("}"):
                    bad += 1
                continue
        try:
            record = json.loads(line[line.find(PREFIX) + len(PREFIX):])
        except json.JSONDecodeError:
            bad += 1
            continue
        if not (isinstance(record, dict) and isinstance(record.get("event"), str)):
            bad += 1
        elif keep is None:
            events.append(record)
        elif record["event"] == "FINISHED":
            finished = record
        elif record["event"] in keep:
            events.append(record)
    return events + ([finished] if finished is not None else []), bad


def parse_rank_log(path: Path, keep: Collection[str] | None = None) -> RankLog:
    """Parse one ``rank<R>.out.log`` line by line (``parse_lines``: every event, or those in
    ``keep`` and the last FINISHED); the rank comes from the file name, else the metadata."""
    with open(path, encoding="utf-8", errors="replace") as handle:
        events, bad = parse_lines(handle, keep)
    match = _RANK_LOG.match(path.name)
    rank = int(match.group(1)) if match else None
    if rank is None and events:
        rank = (events[0].get("metadata") or {}).get("rank")
    return RankLog(rank=rank, events=events, bad_lines=bad)


def find_rank_logs(directory: Path) -> list[Path]:
    """Every ``rank<R>.out.log`` below ``directory``, sorted by path."""
    return sorted(p for p in directory.rglob("rank*.out.log") if _RANK_LOG.match(p.name))
