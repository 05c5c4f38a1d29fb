"""Base case interconnect-P2P_intraserver: bandwidth of torch.distributed send/recv from rank 0
to rank 1 on one server, over a sweep of sizes.

GB/s = iterations x bytes / time / 1e9, one direction (upstream FlagPerf
base/benchmarks/interconnect-P2P_intraserver/main.py counts 2 x bytes, to compare with
NVLink's bidirectional sum; the controller compares one direction with the per-direction
datasheet figure instead). The other ranks stay idle but join the barriers. Needs one node and
at least two ranks.

Configuration: ``min_bytes``, ``max_bytes``, ``factor`` (the sweep), ``warmup``,
``iterations`` (per size).
"""

from __future__ import annotations

import os


import torch
import torch.distributed as torch_dist

from driver.dist import exit_rank
from driver.torch.microbench import BenchContext, CaseError, Measured, run_base_case


def measure(ctx: BenchContext) -> Measured:
    world = ctx.info.world_size
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    if world < 2 or local_world != world:
        raise CaseError(f"interconnect-P2P_intraserver needs one node and at least 2 ranks "
                        f"(world size {world}, {local_world} on this node)")
    warmup, iterations = ctx.param("warmup"), ctx.param("iterations")
    rank, sizes = ctx.info.rank, ctx.sweep_sizes()
    buffer = torch.ones(sizes[-1], dtype=torch.uint8, device=ctx.device)  # each size: a prefix
    rows = []
    for size in sizes:
        message = buffer[:size]
        if rank == 0:
            step = lambda: torch_dist.send(message, dst=1)  # noqa: E731
        elif rank == 1:
            step = lambda: torch_dist.recv(message, src=0)  # noqa: E731
        else:
            step = lambda: None  # noqa: E731
        seconds = ctx.timed(step, warmup, iterations)
        rows.append({"bytes": size, "time_s": seconds / iterations,
                     "bandwidth": iterations * size / seconds / 1e9})
    return {"bandwidth": rows[-1]["bandwidth"]}, {}, rows


if __name__ == "__main__":
    exit_rank(run_base_case(__doc__.splitlines()[0], measure, per_device=False))
