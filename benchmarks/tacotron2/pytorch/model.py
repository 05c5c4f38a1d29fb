"""Tacotron 2 as FlagPerf trains it (Shen et al. 2018, "Natural TTS Synthesis by Conditioning
WaveNet on Mel Spectrogram Predictions"; NVIDIA DeepLearningExamples' implementation, which
FlagPerf copies): torchaudio's ``Tacotron2``, a port of that implementation (dropout instead of
zoneout, location-sensitive attention, a 5-layer postnet), built from upstream's
``model_params.py`` keys. As upstream's ``init_bn`` (unless
``disable_uniform_initialize_bn_weight``), BatchNorm weights start uniform in [0, 1)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import torch
from torchaudio.models import Tacotron2

from driver.case_io import setting

#: Upstream's ``model_params.py`` keys and values (the standard model: 28,193,153 parameters).
MODEL_DEFAULTS = {
    "mask_padding": False, "n_mel_channels": 80, "n_symbols": 148, "symbols_embedding_dim": 512,
    "encoder_kernel_size": 5, "encoder_n_convolutions": 3, "encoder_embedding_dim": 512,
    "n_frames_per_step": 1, "decoder_rnn_dim": 1024, "prenet_dim": 256,
    "max_decoder_steps": 2000, "gate_threshold": 0.5, "p_attention_dropout": 0.1,
    "p_decoder_dropout": 0.1, "decoder_no_early_stopping": False, "postnet_embedding_dim": 512,
    "postnet_kernel_size": 5, "postnet_n_convolutions": 5, "attention_rnn_dim": 1024,
    "attention_dim": 128, "attention_location_n_filters": 32,
    "attention_location_kernel_size": 31, "disable_uniform_initialize_bn_weight": False,
}


def model_settings(config: Mapping[str, Any]) -> dict[str, Any]:
    """The model keys of ``config`` (missing or null: upstream's value).

    Raises:
        ValueError: ``n_frames_per_step`` is not 1 (torchaudio decodes one frame a step, as the
            recipe), or ``symbols_embedding_dim`` differs from ``encoder_embedding_dim`` (the
            encoder's first convolution takes the embedding).
    """
    value = {key: setting(config, key, default) for key, default in MODEL_DEFAULTS.items()}
    if int(value["n_frames_per_step"]) != 1:
        raise ValueError(f"config n_frames_per_step: {value['n_frames_per_step']}, only 1 is "
                         "supported (torchaudio's Tacotron2, the recipe's value)")
    if int(value["symbols_embedding_dim"]) != int(value["encoder_embedding_dim"]):
        raise ValueError("config symbols_embedding_dim: must equal encoder_embedding_dim ("
                         f"{value['symbols_embedding_dim']} != {value['encoder_embedding_dim']})")
    return value


def build_model(config: Mapping[str, Any], data_dir: Path | None = None) -> torch.nn.Module:
    """torchaudio's ``Tacotron2`` of the config's sizes. Forward (teacher forcing):
    ``(tokens [B, T_in] int64, token_lengths [B] sorted descending, mel [B, n_mel_channels,
    T_out] the targets, mel_lengths [B])`` -> ``(mel_out [B, n_mel_channels, T_out],
    mel_out_postnet [B, n_mel_channels, T_out], gate_out [B, T_out] logits, alignments [B,
    T_out, T_in])``. ``data_dir`` is unused (no checkpoint: trained from scratch).

    Raises:
        ValueError: see :func:`model_settings`.
    """
    v = model_settings(config)
    model = Tacotron2(
        mask_padding=bool(v["mask_padding"]), n_mels=int(v["n_mel_channels"]),
        n_symbol=int(v["n_symbols"]), n_frames_per_step=int(v["n_frames_per_step"]),
        symbol_embedding_dim=int(v["symbols_embedding_dim"]),
        encoder_embedding_dim=int(v["encoder_embedding_dim"]),
        encoder_n_convolution=int(v["encoder_n_convolutions"]),
        encoder_kernel_size=int(v["encoder_kernel_size"]),
        decoder_rnn_dim=int(v["decoder_rnn_dim"]), decoder_max_step=int(v["max_decoder_steps"]),
        decoder_dropout=float(v["p_decoder_dropout"]),
        decoder_early_stopping=not v["decoder_no_early_stopping"],
        attention_rnn_dim=int(v["attention_rnn_dim"]),
        attention_hidden_dim=int(v["attention_dim"]),
        attention_location_n_filter=int(v["attention_location_n_filters"]),
        attention_location_kernel_size=int(v["attention_location_kernel_size"]),
        attention_dropout=float(v["p_attention_dropout"]), prenet_dim=int(v["prenet_dim"]),
        postnet_n_convolution=int(v["postnet_n_convolutions"]),
        postnet_kernel_size=int(v["postnet_kernel_size"]),
        postnet_embedding_dim=int(v["postnet_embedding_dim"]),
        gate_threshold=float(v["gate_threshold"]))
    if not v["disable_uniform_initialize_bn_weight"]:
        for module in model.modules():
            if isinstance(module, torch.nn.modules.batchnorm._BatchNorm) and module.affine:
                torch.nn.init.uniform_(module.weight)
    return model


def tacotron2_loss(outputs, mel_target: torch.Tensor, gate_target: torch.Tensor) -> torch.Tensor:
    """NVIDIA's ``Tacotron2Loss``: ``MSE(mel_out, mel) + MSE(mel_out_postnet, mel) +
    BCEWithLogits(gate_out, gate)``, each a mean over every element of the padded batch (with
    ``mask_padding`` false, as the recipe, padded frames count: their targets are zero mels
    and gate 1). ``outputs``: the model's forward; ``mel_target [B, M, T]``, ``gate_target
    [B, T]``; returns a scalar."""
    mel_out, mel_out_postnet, gate_out = outputs[0], outputs[1], outputs[2]
    mse = torch.nn.functional.mse_loss
    gate = torch.nn.functional.binary_cross_entropy_with_logits(
        gate_out.reshape(-1, 1), gate_target.reshape(-1, 1))
    return mse(mel_out, mel_target) + mse(mel_out_postnet, mel_target) + gate
