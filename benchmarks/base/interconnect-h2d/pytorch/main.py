"""Base case interconnect-h2d: host to device copy bandwidth from pinned host memory, over a sweep
of sizes (driver/torch/host_link.py: GB/s = iterations x bytes / time / 1e9)."""

from __future__ import annotations

from driver.dist import exit_rank
from driver.torch.host_link import measure_copy
from driver.torch.microbench import run_base_case

if __name__ == "__main__":
    exit_rank(run_base_case(__doc__.splitlines()[0], lambda ctx: measure_copy(ctx, "h2d")))
