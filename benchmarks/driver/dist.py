"""Distributed setup from torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_*)."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import NoReturn


@dataclass(frozen=True)
class DistInfo:
    rank: int
    world_size: int
    local_rank: int

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def dist_info() -> DistInfo:
    """Rank, world size and local rank as set by torchrun (0, 1, 0 when run directly)."""
    return DistInfo(
        rank=int(os.environ.get("RANK", "0")),
        world_size=int(os.environ.get("WORLD_SIZE", "1")),
        local_rank=int(os.environ.get("LOCAL_RANK", "0")),
    )


def init_distributed(backend: str) -> DistInfo:
    """Join the process group when the world size is above 1 (``gloo`` on CPU, ``nccl`` on GPU)."""
    info = dist_info()
    if info.world_size > 1:
        import torch.distributed as torch_dist

        torch_dist.init_process_group(backend=backend)
    return info


def all_reduce_sum(values: list[float], info: DistInfo) -> list[float]:
    """Sum ``values`` over every rank (returns them unchanged in a single process)."""
    if info.world_size == 1:
        return list(values)
    import torch
    import torch.distributed as torch_dist

    tensor = torch.tensor(values, dtype=torch.float64)
    torch_dist.all_reduce(tensor)
    return tensor.tolist()


def shutdown(info: DistInfo) -> None:
    """Leave the process group (no-op in a single process)."""
    if info.world_size > 1:
        import torch.distributed as torch_dist

        torch_dist.destroy_process_group()


def exit_rank(status: int) -> NoReturn:
    """End the rank's process with ``status`` now, once its output is flushed.

    After the process group is destroyed, a rank can still hang at interpreter exit in native
    destructors (gloo's pairs, DDP's reducer) freed with the case's objects; torchrun then waits
    for it until the round's timeout although the rank wrote FINISHED. Everything the case
    writes is on stdout/stderr (PerfLog) or already closed, so skipping those destructors loses
    nothing. Call it only with the case's status, after ``main()`` returned: an exception
    still ends the process the normal way, with its traceback.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
