"""Base case interconnect-all_reduce: torch.distributed all_reduce (SUM, float32) over every
rank of the round, over a sweep of sizes.

Per size (nccl-tests doc/PERFORMANCE.md, the all-reduce section):
algbw = bytes / time per iteration / 1e9 (GB/s), busbw = algbw x 2(n-1)/n with n the world
size (every rank of every node), the figure comparable with the hardware's link bandwidth per
direction. Upstream FlagPerf's interconnect-MPI_intraserver/interserver took n as the GPUs per
node and doubled busbw within a server to compare it with NVLink's bidirectional sum. Sizes are
rounded to whole float32 elements, a multiple of the world size.

Configuration: ``min_bytes``, ``max_bytes``, ``factor`` (the sweep), ``warmup``,
``iterations`` (per size).
"""

from __future__ import annotations

import torch
import torch.distributed as torch_dist

from driver.dist import exit_rank
from driver.torch.microbench import BenchContext, CaseError, Measured, run_base_case


def bus_factor(world_size: int) -> float:
    """busbw / algbw for all-reduce: 2(n-1)/n (nccl-tests doc/PERFORMANCE.md)."""
    return 2 * (world_size - 1) / world_size


def measure(ctx: BenchContext) -> Measured:
    n = ctx.info.world_size
    if n < 2:
        raise CaseError("interconnect-all_reduce needs at least 2 ranks (world size 1)")
    warmup, iterations = ctx.param("warmup"), ctx.param("iterations")
    sizes = ctx.sweep_sizes(multiple=4 * n)
    # Zeros: a sum of zeros stays finite over any number of iterations.
    buffer = torch.zeros(sizes[-1] // 4, dtype=torch.float32, device=ctx.device)
    rows = []
    for size in sizes:
        tensor = buffer[:size // 4]  # each size: a prefix of one buffer
        seconds = ctx.timed(lambda: torch_dist.all_reduce(tensor, op=torch_dist.ReduceOp.SUM),
                            warmup, iterations)
        algbw = size / (seconds / iterations) / 1e9
        rows.append({"bytes": size, "time_s": seconds / iterations, "algbw": algbw,
                     "busbw": algbw * bus_factor(n)})
    return {"algbw": rows[-1]["algbw"], "busbw": rows[-1]["busbw"]}, {}, rows


if __name__ == "__main__":
    exit_rank(run_base_case(__doc__.splitlines()[0], measure, per_device=False))
