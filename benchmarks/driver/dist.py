"""Distributed setup from torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_*)."""

from __future__ import annotations

import os
from dataclasses import dataclass


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
    if info.world_size > 1:
        import torch.distributed as torch_dist

        torch_dist.destroy_process_group()
