"""CPM-1 (Zhang et al. 2020, "CPM: A Large-scale Generative Chinese Pre-trained Language Model")
as FlagPerf's cpm case trains it: a GPT-2-style decoder (pre-LayerNorm blocks, learned positions,
tanh GELU, the output projection tied to the word embeddings), here transformers'
``GPT2LMHeadModel``, continued from ``cpm_model_states_medium.pt`` (CPM-medium: 24 layers,
width 1024, 16 heads, 30000 pieces: 334,080,000 parameters, the published 0.33 B, counting the
tied embedding once).

The checkpoint is in the Megatron layout of FlagPerf's ``model/models/gpt2_modeling.py``
(``GPT2Model``); :func:`megatron_to_gpt2` maps it onto ``GPT2LMHeadModel``'s names.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import torch
from transformers import GPT2Config, GPT2LMHeadModel

#: Megatron GPT2Model layer names -> GPT2LMHeadModel's (under ``transformer.h.<i>.``), and
#: whether the weight is transposed: Megatron's linear layers hold ``[out, in]``
#: (``F.linear``), GPT-2's ``Conv1D`` holds ``[in, out]``.
LAYER_NAMES = {
    "input_layernorm": ("ln_1", False),
    "attention.query_key_value": ("attn.c_attn", True),   # q, k, v stacked the same way
    "attention.dense": ("attn.c_proj", True),
    "post_attention_layernorm": ("ln_2", False),
    "mlp.dense_h_to_4h": ("mlp.c_fc", True),
    "mlp.dense_4h_to_h": ("mlp.c_proj", True),
}
TOP_NAMES = {"word_embeddings.weight": "transformer.wte.weight",
             "position_embeddings.weight": "transformer.wpe.weight",
             "transformer.final_layernorm.weight": "transformer.ln_f.weight",
             "transformer.final_layernorm.bias": "transformer.ln_f.bias"}


def gpt2_config(config: Mapping[str, Any]) -> GPT2Config:
    """``GPT2Config`` of the case's keys: ``num_layers``, ``hidden_size``,
    ``num_attention_heads``, ``vocab_size``, ``max_position_embeddings``, ``hidden_dropout``
    (embeddings and residual branches, as upstream's ``output_dropout_prob``),
    ``attention_dropout``, ``layernorm_epsilon`` (1e-5)."""
    hidden = int(config["hidden_size"])
    return GPT2Config(
        vocab_size=int(config["vocab_size"]), n_positions=int(config["max_position_embeddings"]),
        n_embd=hidden, n_layer=int(config["num_layers"]),
        n_head=int(config["num_attention_heads"]), n_inner=4 * hidden,
        activation_function="gelu_new",  # OpenAI's tanh GELU, as upstream's gelu_impl
        resid_pdrop=float(config["hidden_dropout"]), embd_pdrop=float(config["hidden_dropout"]),
        attn_pdrop=float(config["attention_dropout"]),
        layer_norm_epsilon=float(config.get("layernorm_epsilon") or 1e-5),
        initializer_range=0.02, tie_word_embeddings=True, use_cache=False,
        bos_token_id=None, eos_token_id=None)  # GPT-2's 50256; CPM's <eod> is the data's


def megatron_to_gpt2(state: Mapping[str, torch.Tensor], num_layers: int
                     ) -> dict[str, torch.Tensor]:
    """A Megatron-layout CPM state dict (``word_embeddings.weight [V, h]``,
    ``position_embeddings.weight [P, h]``, ``transformer.layers.<i>.<name>.{weight,bias}`` for
    the names of ``LAYER_NAMES``, ``transformer.final_layernorm.*``) as ``GPT2LMHeadModel``'s
    state dict (``lm_head.weight`` is the word embedding, tied).

    Raises:
        ValueError: a key is missing or left over (names the key).
    """
    mapped, left = {}, dict(state)
    for source, target in TOP_NAMES.items():
        if source not in left:
            raise ValueError(f"checkpoint: no {source}")
        mapped[target] = left.pop(source)
    for i in range(num_layers):
        for source, (target, transpose) in LAYER_NAMES.items():
            for kind in ("weight", "bias"):
                key = f"transformer.layers.{i}.{source}.{kind}"
                if key not in left:
                    raise ValueError(f"checkpoint: no {key}")
                tensor = left.pop(key)
                mapped[f"transformer.h.{i}.{target}.{kind}"] = (
                    tensor.t().contiguous() if transpose and kind == "weight" else tensor)
    if left:
        raise ValueError(f"checkpoint: {len(left)} keys not in a {num_layers}-layer CPM, e.g. "
                         f"{sorted(left)[0]}")
    mapped["lm_head.weight"] = mapped["transformer.wte.weight"]
    return mapped


def gpt2_to_megatron(state: Mapping[str, torch.Tensor], num_layers: int
                     ) -> dict[str, torch.Tensor]:
    """The inverse of :func:`megatron_to_gpt2` (``lm_head.weight`` dropped: it is tied)."""
    out = {source: state[target] for source, target in TOP_NAMES.items()}
    for i in range(num_layers):
        for source, (target, transpose) in LAYER_NAMES.items():
            for kind in ("weight", "bias"):
                tensor = state[f"transformer.h.{i}.{target}.{kind}"]
                out[f"transformer.layers.{i}.{source}.{kind}"] = (
                    tensor.t().contiguous() if transpose and kind == "weight" else tensor)
    return out


def load_megatron_checkpoint(model: GPT2LMHeadModel, path: Path) -> None:
    """Load a CPM checkpoint (``torch.save``'d: the state dict, or it under ``"model"`` as
    FlagPerf's trainer unwraps it, or under ``"module"`` as DeepSpeed saves it) into ``model``.

    Raises:
        FileNotFoundError: no file at ``path``.
        ValueError: keys or shapes do not match the model (names the file and the key).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such checkpoint (init_checkpoint)")
    state = torch.load(path, map_location="cpu", weights_only=True)
    for wrapper in ("model", "module"):
        if isinstance(state, dict) and isinstance(state.get(wrapper), dict):
            state = state[wrapper]
    try:
        mapped = megatron_to_gpt2(state, model.config.n_layer)
        own = model.state_dict()
        for key, tensor in mapped.items():
            if key not in own:
                raise ValueError(f"checkpoint: {key} is not a parameter of the model")
            if tuple(own[key].shape) != tuple(tensor.shape):
                raise ValueError(f"checkpoint: {key} is {tuple(tensor.shape)}, the model's "
                                 f"{tuple(own[key].shape)} (check num_layers, hidden_size, "
                                 "vocab_size, max_position_embeddings)")
        missing = sorted(set(own) - set(mapped))
        if missing:
            raise ValueError(f"checkpoint: no value for the model's {missing[0]}")
    except ValueError as err:
        raise ValueError(f"{path}: {err} (init_checkpoint)") from None
    model.load_state_dict(mapped, strict=True)
    model.tie_weights()


def build_model(config: Mapping[str, Any], data_dir: Path | None = None) -> GPT2LMHeadModel:
    """CPM as ``GPT2LMHeadModel`` (:func:`gpt2_config`): ``input_ids [B, S]`` (int64) ->
    ``.logits [B, S, vocab_size]``; started from ``init_checkpoint`` (relative to
    ``data_dir``) when both are given, else from transformers' random initialisation; with
    activation checkpointing per layer when ``checkpoint_activations`` (as upstream).

    Raises:
        FileNotFoundError, ValueError: see :func:`load_megatron_checkpoint`.
    """
    model = GPT2LMHeadModel(gpt2_config(config))
    checkpoint = config.get("init_checkpoint")
    if checkpoint and data_dir is not None:
        load_megatron_checkpoint(model, Path(data_dir) / str(checkpoint))
    if config.get("checkpoint_activations"):
        # transformers 5 renamed gradient_checkpointing_enable
        enable = (getattr(model, "activation_checkpointing_enable", None)
                  or model.gradient_checkpointing_enable)
        enable()
    return model


def lm_loss(logits: torch.Tensor, labels: torch.Tensor, loss_mask: torch.Tensor) -> torch.Tensor:
    """FlagPerf's loss: token cross-entropy (in float32) averaged over the positions where
    ``loss_mask`` is 1 (labels that are not padding). ``logits [B, S, V]``, ``labels [B, S]``,
    ``loss_mask [B, S]`` -> scalar."""
    losses = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), labels.flatten(),
                                               reduction="none")
    mask = loss_mask.flatten().float()
    return (losses * mask).sum() / mask.sum()


def embedding_average_scores(preds: torch.Tensor, labels: torch.Tensor, loss_mask: torch.Tensor,
                             embeddings: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """FlagPerf's ``embedding_average`` per sample (``train/metrics.py average_corpus_level``,
    the Embedding Average of Liu et al. 2016, "How NOT To Evaluate Your Dialogue System", sec.
    3.3): the cosine between the sum of the embeddings of the predicted tokens and the sum of
    those of the reference tokens over the sample's unmasked positions, with the model's own
    word embeddings.

    Args:
        preds, labels: ``[B, S]`` token ids (predictions: argmax of the logits).
        loss_mask: ``[B, S]``, 1 where the label counts.
        embeddings: ``[V, h]``.

    Returns:
        ``(scores [B], counted [B])``: a sample whose reference sum is ~0 is not counted (as
        upstream skips it); one whose prediction sum is ~0 scores 0.
    """
    eps = 1e-11  # upstream's _EPSILON
    table = embeddings.detach().float()
    mask = loss_mask.float().unsqueeze(-1)
    hyp = (table[preds] * mask).sum(1)
    ref = (table[labels] * mask).sum(1)
    hyp_norm, ref_norm = hyp.norm(dim=1), ref.norm(dim=1)
    counted = ref_norm >= eps
    cosine = (hyp * ref).sum(1) / (hyp_norm.clamp_min(eps) * ref_norm.clamp_min(eps))
    scores = torch.where(hyp_norm < eps, torch.zeros_like(cosine), cosine)
    return scores * counted, counted
