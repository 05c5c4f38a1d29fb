"""Base case main_memory-bandwidth: the device memory's copy bandwidth (tensor.clone()).

GB/s = iterations x 2 x bytes / time / 1e9: each clone reads and writes ``bytes`` (upstream
FlagPerf base/benchmarks/main_memory-bandwidth/main.py). Every rank measures its own device.

Configuration: ``size_mib`` (the float32 tensor cloned, MiB), ``warmup``, ``iterations``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # benchmarks/ (driver)

import torch  # noqa: E402

from driver.dist import exit_rank  # noqa: E402
from driver.torch.microbench import BenchContext, Measured, run_base_case  # noqa: E402


def measure(ctx: BenchContext) -> Measured:
    size = ctx.param("size_mib") * 2 ** 20
    iterations = ctx.param("iterations")
    tensor = torch.rand(size // 4, dtype=torch.float32, device=ctx.device)
    seconds = ctx.timed(tensor.clone, ctx.param("warmup"), iterations)
    return {"bandwidth": iterations * 2 * size / seconds / 1e9}, {}, []


if __name__ == "__main__":
    exit_rank(run_base_case(__doc__.splitlines()[0], measure))
