"""The measurement of the base cases interconnect-h2d and interconnect-d2h: copies between host
and device memory over a sweep of sizes.

GB/s = iterations x bytes / time / 1e9, one direction (upstream FlagPerf
base/benchmarks/interconnect-h2d/main.py). The host buffer is pinned (page-locked), so the copy
is one DMA transfer, as CUDA's bandwidthTest measures it; pinning needs an accelerator's
driver, so on the CPU the host buffer is ordinary memory and the "device" is the CPU too: the
figure is then a host-to-host copy. Both buffers are allocated once, at the largest size, and
each size copies their first bytes (upstream's ``.to(device)`` allocated the destination in
every iteration). Every rank measures its own device.

Configuration: ``min_bytes``, ``max_bytes``, ``factor`` (the sweep), ``warmup``,
``iterations`` (per size).
"""

from __future__ import annotations

import torch

from driver.torch.microbench import BenchContext, Measured


def measure_copy(ctx: BenchContext, direction: str) -> Measured:
    """``direction`` ``h2d`` or ``d2h``: FINISHED's ``bandwidth`` (GB/s) at the largest size
    and the sweep's rows ``{bytes, time_s, bandwidth}``."""
    if direction not in ("h2d", "d2h"):
        raise ValueError(f"direction {direction!r}: h2d or d2h")
    warmup, iterations = ctx.param("warmup"), ctx.param("iterations")
    pinned = ctx.device.type != "cpu"
    sizes = ctx.sweep_sizes()
    host = torch.ones(sizes[-1], dtype=torch.uint8, pin_memory=pinned)
    device = torch.ones(sizes[-1], dtype=torch.uint8, device=ctx.device)
    src, dst = (host, device) if direction == "h2d" else (device, host)
    rows = []
    for size in sizes:
        dst_part, src_part = dst[:size], src[:size]
        seconds = ctx.timed(lambda: dst_part.copy_(src_part, non_blocking=pinned), warmup,
                            iterations)
        rows.append({"bytes": size, "time_s": seconds / iterations,
                     "bandwidth": iterations * size / seconds / 1e9})
    return {"bandwidth": rows[-1]["bandwidth"]}, {}, rows
