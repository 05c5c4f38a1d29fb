"""Base case interconnect-d2h: device to host copy bandwidth into pinned host memory, over a
sweep of sizes (driver/torch/host_link.py: GB/s = iterations x bytes / time / 1e9)."""

from __future__ import annotations

from driver.dist import exit_rank
from driver.torch.host_link import measure_copy
from driver.torch.microbench import run_base_case

if __name__ == "__main__":
    exit_rank(run_base_case(__doc__.splitlines()[0], lambda ctx: measure_copy(ctx, "d2h")))
