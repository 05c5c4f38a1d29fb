"""The GPT-style model of an LLM case, built by megatron-core from configuration keys that
carry Megatron-LM's argument names (``num_layers``, ``hidden_size``, ``swiglu``, ...).

GPT-2 (Radford et al. 2019, Megatron's ``pretrain_gpt.py`` defaults): learned absolute
positions, LayerNorm, GELU, biases, tied input and output embeddings. Llama 3 (Meta 2024):
rotary positions, RMSNorm, SwiGLU, no biases, grouped-query attention, untied embeddings.
"""

from __future__ import annotations

from typing import Any, Mapping

import torch
import torch.nn.functional as F


def padded_vocab_size(vocab_size: int, divisible_by: int, tensor_parallel: int) -> int:
    """Megatron-LM's padding of the vocabulary: up to a multiple of ``divisible_by x
    tensor_parallel`` (so that each tensor-parallel rank holds an equal, aligned slice)."""
    multiple = divisible_by * tensor_parallel
    return -(-vocab_size // multiple) * multiple


def precision_dtype(precision: str) -> torch.dtype:
    """The parameters' dtype of a precision (fp32, fp16, bf16).

    Raises:
        ValueError: another precision.
    """
    dtypes = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
    if precision not in dtypes:
        raise ValueError(f"config precision: {precision!r} is not one of {', '.join(dtypes)}")
    return dtypes[precision]


def transformer_config(config: Mapping[str, Any], *, on_cpu: bool) -> Any:
    """megatron-core's ``TransformerConfig`` of the case. On CPU the fused kernels (apex,
    Transformer Engine, CUDA) are off and the weights are initialised on the CPU."""
    from megatron.core.transformer.transformer_config import TransformerConfig

    precision = str(config["precision"])
    dtype = precision_dtype(precision)
    swiglu = bool(config.get("swiglu"))
    return TransformerConfig(
        num_layers=int(config["num_layers"]),
        hidden_size=int(config["hidden_size"]),
        num_attention_heads=int(config["num_attention_heads"]),
        num_query_groups=config.get("num_query_groups"),
        ffn_hidden_size=int(config["ffn_hidden_size"]),
        normalization=str(config.get("normalization", "LayerNorm")),
        layernorm_epsilon=float(config.get("norm_epsilon", 1e-5)),
        gated_linear_unit=swiglu,
        activation_func=F.silu if swiglu else F.gelu,
        add_bias_linear=bool(config.get("add_bias_linear", True)),
        hidden_dropout=float(config.get("hidden_dropout", 0.1)),
        attention_dropout=float(config.get("attention_dropout", 0.1)),
        init_method_std=float(config.get("init_method_std", 0.02)),
        tensor_model_parallel_size=int(config["tensor_model_parallel_size"]),
        pipeline_model_parallel_size=int(config["pipeline_model_parallel_size"]),
        pipeline_dtype=dtype,
        params_dtype=dtype,
        fp16=precision == "fp16",
        bf16=precision == "bf16",
        # Sequence parallelism splits the norms and dropout along the sequence over the
        # tensor-parallel ranks: nothing to split without tensor parallelism.
        sequence_parallel=bool(config.get("sequence_parallel"))
        and int(config["tensor_model_parallel_size"]) > 1,
        recompute_granularity=config.get("recompute_granularity"),
        recompute_method="uniform" if config.get("recompute_granularity") == "full" else None,
        recompute_num_layers=1 if config.get("recompute_granularity") == "full" else None,
        use_cpu_initialization=on_cpu,
        perform_initialization=True,
        bias_activation_fusion=not on_cpu and not swiglu and bool(config.get("add_bias_linear", True)),
        masked_softmax_fusion=not on_cpu,
        bias_dropout_fusion=not on_cpu,
        apply_rope_fusion=False,
        persist_layer_norm=not on_cpu,
        gradient_accumulation_fusion=False,
    )


def layer_spec(config: Mapping[str, Any]) -> Any:
    """The transformer layer's modules: Transformer Engine's (``transformer_impl:
    transformer_engine``, as upstream runs) or megatron-core's local ones (``local``)."""
    from megatron.core.models.gpt import gpt_layer_specs

    if config.get("transformer_impl", "transformer_engine") == "transformer_engine":
        return gpt_layer_specs.get_gpt_layer_with_transformer_engine_spec()
    return gpt_layer_specs.get_gpt_layer_local_spec(
        normalization=str(config.get("normalization", "LayerNorm")))


def build_gpt(config: Mapping[str, Any], transformer: Any, *, pre_process: bool,
              post_process: bool) -> torch.nn.Module:
    """This pipeline stage's part of the model (``pre_process``: it holds the embedding;
    ``post_process``: the output layer and the loss)."""
    from megatron.core.models.gpt.gpt_model import GPTModel

    vocab = padded_vocab_size(int(config["vocab_size"]),
                              int(config.get("make_vocab_size_divisible_by", 128)),
                              int(config["tensor_model_parallel_size"]))
    return GPTModel(
        config=transformer,
        transformer_layer_spec=layer_spec(config),
        vocab_size=vocab,
        max_sequence_length=int(config.get("max_position_embeddings") or config["seq_length"]),
        pre_process=pre_process,
        post_process=post_process,
        share_embeddings_and_output_weights=not config.get("untie_embeddings_and_output_weights"),
        position_embedding_type=str(config.get("position_embedding_type", "learned_absolute")),
        rotary_base=int(config.get("rotary_base", 10000)),
    )


def parameter_count(model: torch.nn.Module) -> int:
    """This rank's parameters (its tensor-parallel shard of its pipeline stage)."""
    return sum(p.numel() for p in model.parameters())
