"""Base case main_memory-capacity: how much device memory one process can allocate.

Tensors are allocated in chunks, from ``init_mib`` MiB halving after each failure down to
1 MiB, and the allocated MiB summed (upstream FlagPerf
base/benchmarks/main_memory-capacity/main.py): GB = MiB x 2^20 / 1e9, GiB = MiB / 1024.

On the CPU, allocation is lazy and memory overcommitted (a failure would come from the OOM
killer, ending the round), so there tensors are ``torch.ones`` (every page touched) and the
total stops at ``limit_gib``; FINISHED's ``limit_reached`` then says the figure is a lower
bound. ``limit_gib`` caps a device's total too when set (0: until out of memory). After
``hold_s`` seconds with the memory held (upstream holds 300 s for the power monitor),
everything is freed before FINISHED.

Configuration: ``init_mib``, ``limit_gib``, ``hold_s``.
"""

from __future__ import annotations

import time


import torch

from driver.dist import exit_rank
from driver.torch.microbench import BenchContext, CaseError, Measured, run_base_case

MIB = 2 ** 20


def allocate(chunk_mib: int, device: torch.device) -> torch.Tensor | None:
    """A tensor of ``chunk_mib`` MiB, or None when the device is out of memory."""
    try:
        if device.type == "cpu":
            return torch.ones(chunk_mib * MIB, dtype=torch.uint8)
        return torch.empty(chunk_mib * MIB, dtype=torch.uint8, device=device)
    except torch.OutOfMemoryError:
        return None
    except RuntimeError as error:  # some vendors' allocators raise a plain RuntimeError
        if "out of memory" in str(error).lower():
            return None
        raise


def measure(ctx: BenchContext) -> Measured:
    chunk = ctx.param("init_mib")
    limit_mib = int(ctx.param("limit_gib", float) * 1024)
    if ctx.device.type == "cpu" and limit_mib <= 0:
        raise CaseError(f"{ctx.config_path}: limit_gib: set a cap on the CPU (allocation "
                        "there never fails: the OOM killer ends the process instead)")
    held, total, tensor = [], 0, None
    while chunk >= 1:
        room = limit_mib - total if limit_mib > 0 else chunk
        tensor = allocate(chunk, ctx.device) if chunk <= room else None
        if tensor is None:
            chunk //= 2
            continue
        held.append(tensor)
        total += chunk
    ctx.sync()
    time.sleep(ctx.param("hold_s", float))
    del held, tensor
    if ctx.device.type == "cuda":
        torch.cuda.empty_cache()
    figures = {"capacity": total * MIB / 1e9, "capacity_gib": total / 1024,
               "limit_reached": limit_mib > 0 and total >= limit_mib}
    return figures, {}, []


if __name__ == "__main__":
    exit_rank(run_base_case(__doc__.splitlines()[0], measure))
