"""GLM as FlagPerf fine-tunes it on ReCoRD: ``GLMForMultiTokenCloze`` over a ``GLMModel``
(Du et al. 2022, "GLM: General Language Model Pretraining with Autoregressive Blank
Infilling", ACL; THUDM/GLM ``model/modeling_glm.py`` and FlagPerf's copy in
``training/benchmarks/glm/pytorch/model/``), written out here because no kept library has it.

The architecture, as THUDM/GLM builds it for GLM-large (``blocklm-large-blank``):

* word embeddings ``[vocab, h]`` (BERT-uncased WordPiece, 30522 pieces and GLM's
  ``<|startofpiece|>``/``<|endofpiece|>``, padded to 30592 = 239 x 128), tied with the output
  projection: logits = hidden @ word_embeddings^T;
* 2D positions: each token has a position (where its span stands in the text; every token of a
  blank's answer has the [MASK]'s position) and a block position (0 in the text, 1, 2, ... inside
  the answer), each with its own learnt embedding of ``max_position_embeddings + 1`` rows,
  added to the word embedding;
* ``num_layers`` pre-LayerNorm transformer layers (LayerNorm, self-attention with one fused
  ``query_key_value`` projection ``[3h, h]`` and an output ``dense``, residual; LayerNorm, MLP
  ``h -> 4h -> h`` with GELU (tanh approximation), residual), then a final LayerNorm;
* the attention mask of blank infilling: the first ``sep`` tokens (Part A: the text with the
  [MASK]) attend to each other in both directions, every later token (Part B: the answer) to
  Part A and causally to Part B.

Parameters of GLM-large (24 layers, h 1024, 16 heads, vocab 30592, 512 positions):
word embeddings 30592 x 1024 = 31,326,208; two position tables 2 x 513 x 1024 = 1,050,624;
per layer 12 h^2 + 13 h = 12,596,224 (qkv 3h^2 + 3h, dense h^2 + h, MLP 8h^2 + 5h, two
LayerNorms 4h), x 24 = 302,309,376; final LayerNorm 2,048: 334,688,256 in all, the "335M" of the
GLM paper's table 1 for GLM-Large (tests/test_glm_case.py checks it on the meta device).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint


def blank_infilling_mask(sep: torch.Tensor, length: int) -> torch.Tensor:
    """GLM's self-attention mask: ``sep`` ``[N]`` (Part A's length per sequence) -> a boolean
    ``[N, 1, length, length]``, True where query i may attend to key j: ``j <= i`` or
    ``j < sep`` (THUDM/GLM ``GLMTransformer.forward``, ``build_mask_matrix``)."""
    ids = torch.arange(length, device=sep.device)
    causal = ids.view(1, length, 1) >= ids.view(1, 1, length)
    part_a = ids.view(1, 1, length) < sep.view(-1, 1, 1)
    return (causal | part_a).unsqueeze(1)


class SelfAttention(nn.Module):
    """Multi-head self-attention, ``[N, T, h]`` -> ``[N, T, h]``; scores q.k / sqrt(h / heads)
    (GLM's ``attention_scale`` 1), masked where ``mask`` is False."""

    def __init__(self, hidden_size: int, num_heads: int, attention_dropout: float,
                 output_dropout: float) -> None:
        super().__init__()
        if hidden_size % num_heads:
            raise ValueError(f"config hidden_size {hidden_size} is not a multiple of "
                             f"num_attention_heads {num_heads}")
        self.num_heads = num_heads
        self.query_key_value = nn.Linear(hidden_size, 3 * hidden_size)
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.attention_dropout = attention_dropout
        self.output_dropout = nn.Dropout(output_dropout)

    def forward(self, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        batch, length, width = hidden.shape
        # [N, T, 3h] -> three [N, heads, T, h / heads], split as GLM splits its fused projection.
        qkv = self.query_key_value(hidden).view(batch, length, 3, self.num_heads, -1)
        query, key, value = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        context = F.scaled_dot_product_attention(
            query, key, value, attn_mask=mask,
            dropout_p=self.attention_dropout if self.training else 0.0)
        context = context.transpose(1, 2).reshape(batch, length, width)
        return self.output_dropout(self.dense(context))


class MLP(nn.Module):
    """``h -> 4h``, GELU (tanh approximation, as GLM's ``gelu_impl``), ``4h -> h``, dropout."""

    def __init__(self, hidden_size: int, dropout: float) -> None:
        super().__init__()
        self.dense_h_to_4h = nn.Linear(hidden_size, 4 * hidden_size)
        self.dense_4h_to_h = nn.Linear(4 * hidden_size, hidden_size)
        self.dropout = nn.Dropout(dropout)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.dense_4h_to_h(F.gelu(self.dense_h_to_4h(hidden),
                                                      approximate="tanh")))


class TransformerLayer(nn.Module):
    """One pre-LayerNorm layer: x + attention(LN(x)), then y + MLP(LN(y))."""

    def __init__(self, hidden_size: int, num_heads: int, attention_dropout: float,
                 hidden_dropout: float, eps: float) -> None:
        super().__init__()
        self.input_layernorm = nn.LayerNorm(hidden_size, eps=eps)
        self.attention = SelfAttention(hidden_size, num_heads, attention_dropout, hidden_dropout)
        self.post_attention_layernorm = nn.LayerNorm(hidden_size, eps=eps)
        self.mlp = MLP(hidden_size, hidden_dropout)

    def forward(self, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        hidden = hidden + self.attention(self.input_layernorm(hidden), mask)
        return hidden + self.mlp(self.post_attention_layernorm(hidden))


class GLMTransformer(nn.Module):
    """Position and block-position embeddings, the layers and the final LayerNorm:
    word embeddings ``[N, T, h]``, ``position_ids`` ``[N, 2, T]``, ``sep`` ``[N]`` ->
    ``[N, T, h]``. ``checkpoint_activations`` recomputes each layer's activations in the
    backward pass (GLM's ``checkpoint_num_layers`` 1) to save memory."""

    def __init__(self, num_layers: int, hidden_size: int, num_heads: int, max_positions: int,
                 hidden_dropout: float, attention_dropout: float, eps: float,
                 checkpoint_activations: bool) -> None:
        super().__init__()
        self.position_embeddings = nn.Embedding(max_positions + 1, hidden_size)
        self.block_position_embeddings = nn.Embedding(max_positions + 1, hidden_size)
        self.embedding_dropout = nn.Dropout(hidden_dropout)
        self.layers = nn.ModuleList(
            TransformerLayer(hidden_size, num_heads, attention_dropout, hidden_dropout, eps)
            for _ in range(num_layers))
        self.final_layernorm = nn.LayerNorm(hidden_size, eps=eps)
        self.checkpoint_activations = checkpoint_activations

    def forward(self, embeddings: torch.Tensor, position_ids: torch.Tensor,
                sep: torch.Tensor) -> torch.Tensor:
        hidden = (embeddings + self.position_embeddings(position_ids[:, 0])
                  + self.block_position_embeddings(position_ids[:, 1]))
        hidden = self.embedding_dropout(hidden)
        mask = blank_infilling_mask(sep, hidden.shape[1])
        for layer in self.layers:
            if self.checkpoint_activations and self.training and torch.is_grad_enabled():
                hidden = checkpoint(layer, hidden, mask, use_reentrant=False)
            else:
                hidden = layer(hidden, mask)
        return self.final_layernorm(hidden)


class GLMModel(nn.Module):
    """GLM's language model: token ids ``[N, T]``, ``position_ids`` ``[N, 2, T]`` (positions,
    block positions), ``sep`` ``[N]`` -> logits ``[N, T, vocab]`` over the tied word
    embeddings. Its ``state_dict`` keys are THUDM/GLM's (``word_embeddings.weight``,
    ``transformer.layers.<i>.attention.query_key_value.weight``, ...)."""

    def __init__(self, *, num_layers: int, vocab_size: int, hidden_size: int, num_heads: int,
                 max_positions: int, hidden_dropout: float = 0.1, attention_dropout: float = 0.1,
                 eps: float = 1e-5, checkpoint_activations: bool = False) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab_size, hidden_size)
        self.transformer = GLMTransformer(num_layers, hidden_size, num_heads, max_positions,
                                          hidden_dropout, attention_dropout, eps,
                                          checkpoint_activations)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """GLM's initialisation: weights N(0, 0.02), the attention's and MLP's output
        projections N(0, 0.02 / sqrt(2 num_layers)) (THUDM/GLM ``scaled_init_method``), biases
        0, LayerNorms 1 and 0."""
        scaled = 0.02 / math.sqrt(2.0 * max(1, len(self.transformer.layers)))
        for name, module in self.named_modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                std = scaled if name.endswith(("attention.dense", "dense_4h_to_h")) else 0.02
                module.weight.normal_(0.0, std)
                if getattr(module, "bias", None) is not None:
                    module.bias.zero_()
            elif isinstance(module, nn.LayerNorm):
                module.reset_parameters()

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor,
                sep: torch.Tensor) -> torch.Tensor:
        hidden = self.transformer(self.word_embeddings(input_ids), position_ids, sep)
        return F.linear(hidden, self.word_embeddings.weight)


class GLMForMultiTokenCloze(nn.Module):
    """Scores of candidate answers to a blank (THUDM/GLM ``GLMForMultiTokenCloze``,
    ``take_softmax`` on, no length penalty): each candidate is its own sequence (the text with
    the [MASK], then ``<|startofpiece|>`` and the candidate's tokens but the last), and its
    score is the sum over its tokens of log p(token | text, earlier tokens).

    Input: ``input_ids`` ``[B, C, T]`` (C candidates), ``position_ids`` ``[B, C, 2, T]``,
    ``sep`` ``[B, C]``, ``target_ids`` ``[B, C, T]`` (the candidate's tokens where
    ``logit_mask`` is 1), ``logit_mask`` ``[B, C, T]`` -> scores ``[B, C]`` (log-probabilities,
    <= 0).
    """

    def __init__(self, language_model: GLMModel) -> None:
        super().__init__()
        self.model = language_model

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor, sep: torch.Tensor,
                target_ids: torch.Tensor, logit_mask: torch.Tensor) -> torch.Tensor:
        batch, choices, length = input_ids.shape
        logits = self.model(input_ids.reshape(-1, length), position_ids.reshape(-1, 2, length),
                            sep.reshape(-1))
        log_probs = torch.log_softmax(logits.float(), dim=-1)
        picked = log_probs.gather(-1, target_ids.reshape(-1, length, 1)).squeeze(-1)
        return (picked * logit_mask.reshape(-1, length)).sum(-1).view(batch, choices)


def build_model(config: Mapping[str, Any], data_dir: Path | None = None) -> GLMForMultiTokenCloze:
    """GLM for multi-token cloze from the configuration, randomly initialised (the case's entry
    loads ``init_checkpoint`` into ``.model`` afterwards: ``checkpoint.load_glm_checkpoint``).

    Config: ``num_layers``, ``hidden_size``, ``num_attention_heads``, ``vocab_size``,
    ``max_position_embeddings`` (GLM-large: 24, 1024, 16, 30592, 512), ``hidden_dropout``,
    ``attention_dropout`` (0.1), ``layernorm_epsilon`` (1e-5), ``checkpoint_activations``.

    Raises:
        KeyError: a size key is missing.
        ValueError: ``hidden_size`` is not a multiple of ``num_attention_heads``.
    """
    return GLMForMultiTokenCloze(GLMModel(
        num_layers=int(config["num_layers"]), vocab_size=int(config["vocab_size"]),
        hidden_size=int(config["hidden_size"]), num_heads=int(config["num_attention_heads"]),
        max_positions=int(config["max_position_embeddings"]),
        hidden_dropout=float(config.get("hidden_dropout", 0.1)),
        attention_dropout=float(config.get("attention_dropout", 0.1)),
        eps=float(config.get("layernorm_epsilon", 1e-5)),
        checkpoint_activations=bool(config.get("checkpoint_activations", False))))


def load_glm_checkpoint(model: GLMModel, path: Path, full_pickle: bool = False) -> list[str]:
    """Load a GLM checkpoint in THUDM/GLM's (DeepSpeed's) format, ``torch.save`` of
    ``{"module": state_dict, ...}`` (``mp_rank_00_model_states.pt``), into ``model``, as
    FlagPerf's ``Trainer._init_model`` does: position tables shorter than the model's fill its
    first rows (the rest keep their initialisation). Returns the checkpoint's keys the model
    does not have (FlagPerf loads with ``strict=False`` and prints them).

    ``full_pickle``: unpickle everything, code included; else only tensors, containers and the
    ``argparse.Namespace`` of the run's arguments that DeepSpeed saves beside the weights
    (``weights_only`` with that one class allowed).

    Raises:
        FileNotFoundError: no file at ``path``.
        ValueError: not a ``{"module": state_dict}`` checkpoint, a weight of the model missing
            from it, or one of another shape.
    """
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such GLM checkpoint (init_checkpoint)")
    try:
        with torch.serialization.safe_globals([argparse.Namespace]):
            saved = torch.load(path, map_location="cpu", weights_only=not full_pickle)
    except Exception as error:  # torch raises RuntimeError, UnpicklingError, zipfile errors
        hint = "" if full_pickle else " (init_checkpoint_full_pickle: true reads Python objects)"
        raise ValueError(f"{path}: not a GLM checkpoint readable by torch.load{hint}: "
                         f"{str(error).splitlines()[0]}") from None
    state = saved.get("module") if isinstance(saved, dict) else None
    if not isinstance(state, dict):
        raise ValueError(f"{path}: no 'module' state dict (GLM's mp_rank_00_model_states.pt "
                         "layout)")
    own = model.state_dict()
    missing = sorted(set(own) - set(state))
    if missing:
        raise ValueError(f"{path}: lacks {len(missing)} weights of the model, e.g. {missing[0]}")
    for key in ("transformer.position_embeddings.weight",
                "transformer.block_position_embeddings.weight"):
        rows = state[key].shape[0]
        if rows < own[key].shape[0]:
            extended = own[key].clone()
            extended[:rows] = state[key]
            state[key] = extended
    for key, value in own.items():
        if tuple(state[key].shape) != tuple(value.shape):
            raise ValueError(f"{path}: {key} has shape {list(state[key].shape)}, the model "
                             f"{list(value.shape)}")
    model.load_state_dict({key: state[key] for key in own})
    return sorted(set(state) - set(own))
