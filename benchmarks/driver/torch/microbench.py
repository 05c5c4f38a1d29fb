"""The harness of the base micro-benchmark cases (FlagPerf's ``base/benchmarks``): a case gives
one ``measure(ctx)`` function; the harness does the rest, the same way for every case.

Per rank (launched by torchrun, or alone):

* init (INIT_START..INIT_END): arguments, ``rank<R>.out.log``, configuration
  (``driver.case_io``), the device (``vendor_hooks.default_device``: the CUDA device
  ``local_rank`` when CUDA is available, else the CPU) and, above one rank, the process group
  (config ``dist_backend``, default ``nccl`` on CUDA, ``gloo`` elsewhere);
* the measurement (BENCHMARK_START..BENCHMARK_END, the monitors' window): ``measure(ctx)``
  returns ``(figures, not_measured, sweep)``;
* FINISHED, written by rank 0 once every rank's figures are gathered, then the process group
  is left (``driver.dist.shutdown``).

FINISHED's value (what the controller reads; units are those of the case's ``case.yml``):

* ``<metric>``: each measured figure. A per-device case (every rank measures its own device:
  GEMM, memory, host link) gives the mean over the ranks that measured it, and ``per_rank``
  ``{<metric>: [rank 0, rank 1, ...]}`` (None where a rank did not measure it); a collective
  case (P2P, all-reduce: the ranks measure one thing together) gives rank 0's;
* ``not_measured``: ``{<metric>: reason}`` for every declared metric without a figure;
* ``sweep`` (sweep cases): rows ``{"bytes", "time_s" (per iteration), <bandwidth columns>
  (GB/s, 1e9 B/s)}`` sorted by size, the mean over ranks for a per-device case; the headline
  figures are the last row's;
* ``device`` (its name), ``world_size``, ``e2e_time``, ``init_time``, ``benchmark_time`` (s).

A fault in a rank ends its process with the traceback on stderr and status 1 (torchrun then
stops the other ranks); a configuration the case cannot run (:class:`CaseError`) with one line
on stderr and status 2.
"""

from __future__ import annotations

import statistics
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import torch

from driver import dist, perflog
from driver.case_io import load_config, parse_case_args, redirect_rank_output
from driver.finished import RoundClock
from driver.torch.vendor_hooks import default_device, default_synchronize

#: ``measure``'s result: ``(figures, not_measured, sweep rows)``.
Measured = tuple[dict[str, Any], dict[str, str], list[dict[str, float]]]


class CaseError(Exception):
    """The case cannot run with this configuration or layout; the message is the one line
    written to stderr."""


@dataclass(frozen=True)
class BenchContext:
    """What ``measure`` works with: the configuration (and its file, for messages), the
    distributed layout, the device, and the device's synchronisation."""

    config: Mapping[str, Any]
    config_path: Path
    info: dist.DistInfo
    device: torch.device

    def sync(self) -> None:
        default_synchronize(self.device)

    def barrier(self) -> None:
        if self.info.world_size > 1:
            torch.distributed.barrier()

    def param(self, key: str, cast: Callable[[Any], Any] = int) -> Any:
        """Config ``key`` through ``cast``.

        Raises:
            CaseError: missing, or ``cast`` rejects it (naming the file and key).
        """
        if key not in self.config:
            raise CaseError(f"{self.config_path}: {key}: missing")
        try:
            return cast(self.config[key])
        except (TypeError, ValueError) as error:
            raise CaseError(f"{self.config_path}: {key}: {error}") from None

    def timed(self, fn: Callable[[], Any], warmup: int, iterations: int) -> float:
        """:func:`timed` with this rank's synchronisation and barrier."""
        return timed(fn, warmup, iterations, self.sync, self.barrier)

    def sweep_sizes(self, multiple: int = 1) -> list[int]:
        """:func:`sweep_sizes` from config ``min_bytes``, ``max_bytes``, ``factor``."""
        try:
            return sweep_sizes(self.param("min_bytes"), self.param("max_bytes"),
                               self.param("factor"), multiple)
        except ValueError as error:
            raise CaseError(f"{self.config_path}: {error}") from None


def timed(fn: Callable[[], Any], warmup: int, iterations: int, sync: Callable[[], None],
          barrier: Callable[[], None]) -> float:
    """Seconds that ``iterations`` calls of ``fn`` take, after ``warmup`` untimed calls.

    The device is synchronised and the ranks meet (``barrier``) before the clock starts and
    before it stops (``time.perf_counter``), as upstream FlagPerf's base cases time their loops
    (``host_device_sync`` then ``multi_device_sync``), so asynchronous work is charged in full
    and every rank's clock covers the slowest rank.
    """
    for _ in range(warmup):
        fn()
    sync()
    barrier()
    start = time.perf_counter()
    for _ in range(iterations):
        fn()
    sync()
    barrier()
    return time.perf_counter() - start


def sweep_sizes(min_bytes: int, max_bytes: int, factor: int, multiple: int = 1) -> list[int]:
    """Message sizes (bytes) from ``min_bytes`` up, times ``factor`` each step, ending with
    ``max_bytes`` itself (nccl-tests' ``-b``/``-e``/``-f``), each rounded up to a multiple of
    ``multiple`` (``max_bytes`` down), ascending and distinct.

    Raises:
        ValueError: ``min_bytes`` < 1, ``max_bytes`` < ``min_bytes``, ``factor`` < 2, or no
            multiple of ``multiple`` up to ``max_bytes``.
    """
    if min_bytes < 1 or max_bytes < min_bytes or factor < 2:
        raise ValueError(f"min_bytes {min_bytes}, max_bytes {max_bytes}, factor {factor}: "
                         "expected 1 <= min_bytes <= max_bytes and factor >= 2")
    top = max_bytes // multiple * multiple
    if top < 1:
        raise ValueError(f"max_bytes {max_bytes}: below one message of {multiple} bytes")
    sizes, size = set(), min_bytes
    while size < max_bytes:
        sizes.add(min(-(-size // multiple) * multiple, top))
        size *= factor
    sizes.add(top)
    return sorted(sizes)


def device_name(device: torch.device) -> str:
    """``torch.cuda.get_device_name`` on CUDA, ``cpu: <model name>`` on the CPU."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    if device.type == "cpu":
        try:
            for line in Path("/proc/cpuinfo").read_text().splitlines():
                if line.startswith("model name"):
                    return "cpu: " + line.split(":", 1)[1].strip()
        except OSError:
            pass
    return str(device)


def _setup(info: dist.DistInfo, config: Mapping[str, Any]) -> torch.device:
    device = default_device(info.local_rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    backend = config.get("dist_backend") or ("nccl" if device.type == "cuda" else "gloo")
    dist.init_distributed(backend)
    return device


def _merge(gathered: list[tuple[dict, dict, list]], per_device: bool) -> dict[str, Any]:
    """FINISHED's figures from every rank's ``measure`` result (see the module docstring)."""
    figures, not_measured, sweep = gathered[0]
    if not per_device or len(gathered) == 1:
        return {**figures, "not_measured": dict(not_measured), "sweep": sweep}
    merged: dict[str, Any] = {}
    per_rank: dict[str, list[Any]] = {}
    for key in dict.fromkeys(k for f, _, _ in gathered for k in f):
        values = [f.get(key) for f, _, _ in gathered]
        present = [v for v in values if v is not None]
        if all(isinstance(v, bool) for v in present):
            merged[key] = any(present)  # e.g. limit_reached: some rank's figure is a bound
        elif all(isinstance(v, (int, float)) for v in present):
            merged[key] = statistics.fmean(present)
            per_rank[key] = values
        else:
            merged[key] = present[0]
    reasons = {k: r for _, n, _ in reversed(gathered) for k, r in n.items() if k not in merged}
    rows = []
    for cells in zip(*(s for _, _, s in gathered)):  # the same sizes on every rank
        rows.append({k: (cells[0][k] if k == "bytes" else statistics.fmean(c[k] for c in cells))
                     for k in cells[0]})
    return {**merged, "per_rank": per_rank, "not_measured": reasons, "sweep": rows}


def _print_sweep(rows: list[dict[str, float]]) -> None:
    """The sweep as a table on stdout, nccl-tests' way, for a person reading the rank log."""
    if not rows:
        return
    columns = list(rows[0])
    print("  ".join(f"{c:>14}" for c in columns))
    for row in rows:
        print("  ".join(f"{row[c]:>14d}" if c == "bytes" else f"{row[c]:>14.6g}"
                        for c in columns))


def _run(description: str, measure: Callable[[BenchContext], Measured], per_device: bool,
         clock: RoundClock) -> int:
    args = parse_case_args(description)
    info = dist.dist_info()
    redirect_rank_output(args.output_dir, info.rank)
    log = perflog.PerfLogger(rank=info.rank)
    log.log(perflog.INIT_START)
    clock.mark_init_start()
    config = load_config(args.config)
    device = _setup(info, config)
    clock.sync = lambda: default_synchronize(device)
    ctx = BenchContext(config, args.config, info, device)
    clock.mark_init_end()
    log.log(perflog.INIT_END, {"device": device_name(device), "world_size": info.world_size})

    log.log(perflog.BENCHMARK_START)
    # RoundClock's train marks time the measurement: BENCHMARK_START..BENCHMARK_END.
    clock.mark_train_start()
    figures, not_measured, sweep = measure(ctx)
    clock.mark_train_end()
    log.log(perflog.BENCHMARK_END)

    mine = (figures, not_measured, sorted(sweep, key=lambda row: row["bytes"]))
    if info.world_size > 1:
        gathered: list[Any] = [None] * info.world_size
        torch.distributed.all_gather_object(gathered, mine)
    else:
        gathered = [mine]
    if info.is_main:
        value = _merge(gathered, per_device)
        if not value["sweep"]:
            del value["sweep"]
        else:
            _print_sweep(value["sweep"])
        value.update(device=device_name(device), world_size=info.world_size,
                     e2e_time=time.time() - clock.process_start,
                     init_time=clock.init_end - clock.init_start,
                     benchmark_time=clock.train_end - clock.train_start)
        log.log(perflog.FINISHED, value)
    dist.shutdown(info)
    return 0


def run_base_case(description: str, measure: Callable[[BenchContext], Measured], *,
                  per_device: bool = True) -> int:
    """A base case's entry point; returns the exit status for ``dist.exit_rank``.

    Args:
        description: the case's one-line description (``--help``).
        measure: ``(ctx) -> (figures, not_measured, sweep)``: ``{metric: number}`` in the
            case's units, ``{metric: reason}`` for the declared metrics it did not measure, and
            the sweep's rows (``[]`` for a case without a sweep).
        per_device: every rank measures its own device (FINISHED: the mean over ranks and
            ``per_rank``); False: the ranks measure together and rank 0's figures stand.

    Returns 0 once FINISHED is written, 2 after a :class:`CaseError` (its message on stderr),
    1 after any other exception (its traceback on stderr). Nothing is raised, so that the
    caller ends the process with ``exit_rank`` and no native destructor can hang it.
    """
    clock = RoundClock()
    try:
        return _run(description, measure, per_device, clock)
    except CaseError as error:
        print(f"error: {error}", file=sys.stderr, flush=True)
        return 2
    except Exception:
        traceback.print_exc()
        return 1
