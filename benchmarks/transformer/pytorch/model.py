"""Transformer big as FlagPerf trains it (``transformer_wmt_en_de_big_t2t`` of NVIDIA's fairseq
fork): transformers' ``M2M100ForConditionalGeneration`` configured to that architecture.

Why M2M100 and not FSMT or Marian: ``_big_t2t`` is the pre-norm Transformer
(``encoder_normalize_before``/``decoder_normalize_before``: layer norm before each sublayer, and
one more after the last layer of each stack), with sinusoidal positions offset past the padding
id, embeddings scaled by sqrt(d), and one embedding matrix shared by the encoder, the decoder and
the output projection (``share_all_embeddings`` over the joined dictionary). FSMT and Marian
are post-norm and cannot express it; M2M100 (fairseq's transformer as exported for M2M-100 and
NLLB) is that architecture: pre-norm with final layer norms, fairseq's sinusoidal positions
(``padding_idx + 1`` onward), scaled embeddings, ``shared`` tied to ``lm_head``. Parameters:
per encoder layer 4d^2 + 2 d f plus biases and 2 norms, per decoder layer 8d^2 + 2 d f plus
biases and 3 norms, 2 final norms, and V d shared; d 1024, f 4096, 6 + 6 layers, V 33712 (the
joined dictionary: ``--nwordssrc 33712 --joined-dictionary`` in upstream's
``scripts/run_preprocessing.sh``) give 210,882,560, against the 213 M of Vaswani et al. (2017,
table 3: the big model with their 37 k vocabulary). Weights are initialised as fairseq does:
Xavier-uniform projections with zero biases, embeddings N(0, d^-1/2) with a zero padding row.

Shapes: ``model(input_ids [B, S], attention_mask [B, S], decoder_input_ids [B, T]).logits``
is [B, T, V]; ids are the fairseq dictionary's (``<pad>`` 1, ``</s>`` 2, decoding starts at
``</s>`` as fairseq's ``prev_output_tokens`` do).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import torch

from . import wmt


def dictionary_size(config: Mapping[str, Any], data_dir: str | Path | None = None) -> int:
    """Symbols of the joined dictionary: ``<data_dir>/dict.en.txt``'s (with the 4 specials), or
    config ``dictionary_size`` without a data folder.

    Raises:
        ValueError: a malformed dictionary (naming the file and line).
    """
    if data_dir:
        return len(wmt.Dictionary(Path(data_dir) / "dict.en.txt"))
    return int(config["dictionary_size"])


def build_model(config: Mapping[str, Any], data_dir: str | Path | None = None) -> torch.nn.Module:
    """A new Transformer from ``config`` (``encoder_layers``, ``decoder_layers``,
    ``encoder_embed_dim``, ``encoder_ffn_embed_dim``, ``encoder_attention_heads``, the decoder's
    the same, ``dropout``, ``attention_dropout``, ``relu_dropout``, ``max_source_positions``),
    its vocabulary the joined dictionary's (:func:`dictionary_size`).

    Raises:
        ValueError: the decoder's width differs from the encoder's (shared embeddings need one).
        KeyError: a missing configuration key.
    """
    from transformers import M2M100Config, M2M100ForConditionalGeneration

    width = int(config["encoder_embed_dim"])
    if int(config["decoder_embed_dim"]) != width:
        raise ValueError("config decoder_embed_dim: share_all_embeddings needs it equal to "
                         "encoder_embed_dim")
    model_config = M2M100Config(
        vocab_size=dictionary_size(config, data_dir), d_model=width,
        encoder_layers=int(config["encoder_layers"]),
        decoder_layers=int(config["decoder_layers"]),
        encoder_attention_heads=int(config["encoder_attention_heads"]),
        decoder_attention_heads=int(config["decoder_attention_heads"]),
        encoder_ffn_dim=int(config["encoder_ffn_embed_dim"]),
        decoder_ffn_dim=int(config["decoder_ffn_embed_dim"]),
        dropout=float(config["dropout"]), attention_dropout=float(config["attention_dropout"]),
        activation_dropout=float(config["relu_dropout"]), activation_function="relu",
        encoder_layerdrop=0.0, decoder_layerdrop=0.0, scale_embedding=True,
        max_position_embeddings=int(config["max_source_positions"]),
        pad_token_id=wmt.PAD, bos_token_id=0, eos_token_id=wmt.EOS,
        decoder_start_token_id=wmt.EOS, tie_word_embeddings=True, use_cache=True)
    model = M2M100ForConditionalGeneration(model_config)
    _fairseq_init(model, width)
    return model


def _fairseq_init(model: torch.nn.Module, width: int) -> None:
    # fairseq/models/transformer.py Embedding and Linear; multihead_attention.py projections.
    for module in model.modules():
        if isinstance(module, torch.nn.Linear) and module is not model.lm_head:
            torch.nn.init.xavier_uniform_(module.weight)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
    shared = model.get_input_embeddings()
    torch.nn.init.normal_(shared.weight, mean=0.0, std=width ** -0.5)
    with torch.no_grad():
        shared.weight[wmt.PAD].zero_()
