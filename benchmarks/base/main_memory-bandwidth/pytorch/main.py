"""Base case main_memory-bandwidth: the device memory's copy bandwidth.

GB/s = iterations x 2 x bytes / time / 1e9: each copy reads and writes ``bytes`` (upstream
FlagPerf base/benchmarks/main_memory-bandwidth/main.py, which times ``tensor.clone()``). The
copy goes into a tensor allocated once: on CUDA the caching allocator hands ``clone`` the same
block every time, so the two time the same work, but on the CPU each clone of a large tensor
maps fresh pages, and its first writes then cost page faults, not bandwidth (a clone of 32 MiB
measured about a quarter of the copy's GB/s on a 2-core host; tests/test_base_figures.py).
Every rank measures its own device.

Configuration: ``size_mib`` (the float32 tensor copied, MiB), ``warmup``, ``iterations``.
"""

from __future__ import annotations

import torch

from driver.dist import exit_rank
from driver.torch.microbench import BenchContext, Measured, run_base_case


def measure(ctx: BenchContext) -> Measured:
    size = ctx.param("size_mib") * 2 ** 20
    iterations = ctx.param("iterations")
    tensor = torch.rand(size // 4, dtype=torch.float32, device=ctx.device)
    copy = torch.empty_like(tensor)
    seconds = ctx.timed(lambda: copy.copy_(tensor), ctx.param("warmup"), iterations)
    return {"bandwidth": iterations * 2 * size / seconds / 1e9}, {}, []


if __name__ == "__main__":
    exit_rank(run_base_case(__doc__.splitlines()[0], measure))
