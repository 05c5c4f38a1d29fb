"""The parallel layout of an LLM round (megatron-core's tensor, pipeline and data parallel
groups), checked by the controller before any host is touched and used by the megatron driver
(``benchmarks/driver/megatron/pretrain.py``). Standard library only."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping


@dataclass(frozen=True)
class Layout:
    """The parallel layout of a round: world = tensor x pipeline x data parallel; a step is
    ``micro_batches`` micro-batches of ``micro_batch`` sequences on each data-parallel rank."""

    world: int
    tensor: int
    pipeline: int
    data: int
    micro_batch: int
    global_batch: int
    micro_batches: int

    @classmethod
    def of(cls, config: Mapping[str, Any], world: int) -> "Layout":
        """The layout of ``config`` on ``world`` ranks.

        Raises:
            ValueError: the world, the layers, the heads, the query groups or the global batch
                do not divide
                (the message names the keys).
        """
        tensor = int(config["tensor_model_parallel_size"])
        pipeline = int(config["pipeline_model_parallel_size"])
        micro = int(config["micro_batch_size"])
        if tensor < 1 or pipeline < 1 or world % (tensor * pipeline):
            raise ValueError(f"world size {world} is not a multiple of tensor_model_parallel_size "
                             f"{tensor} x pipeline_model_parallel_size {pipeline}")
        data = world // (tensor * pipeline)
        global_batch = int(config.get("global_batch_size") or micro * data)
        if int(config["num_layers"]) % pipeline:
            raise ValueError(f"num_layers {config['num_layers']} does not divide into "
                             f"pipeline_model_parallel_size {pipeline} stages")
        if int(config["num_attention_heads"]) % tensor:
            raise ValueError(f"num_attention_heads {config['num_attention_heads']} does not "
                             f"divide by tensor_model_parallel_size {tensor}")
        groups = config.get("num_query_groups")
        if groups and int(groups) % tensor:
            raise ValueError(f"num_query_groups {groups} does not divide by "
                             f"tensor_model_parallel_size {tensor}")
        if micro < 1 or global_batch % (micro * data):
            raise ValueError(f"global_batch_size {global_batch} is not a multiple of "
                             f"micro_batch_size {micro} x data-parallel size {data}")
        return cls(world, tensor, pipeline, data, micro, global_batch,
                   global_batch // (micro * data))
