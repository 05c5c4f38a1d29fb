"""wav2vec 2.0 for self-supervised pretraining: transformers' ``Wav2Vec2ForPreTraining`` built
from the case's configuration in fairseq's key names (FlagPerf wav2vec2's ``model_config.py``,
NVIDIA DeepLearningExamples' copy of fairseq ``Wav2Vec2Model``).

Shapes: the model takes ``input_values`` [batch, samples] (raw 16 kHz audio, float32),
``mask_time_indices`` [batch, frames] (bool) and ``sampled_negative_indices``
[batch, frames, num_negatives] (int, into the flattened batch x frames), with
``frames = feature_frames(config, samples)`` (one frame per 320 samples, 20 ms, for the BASE
feature encoder); it returns ``projected_states`` and ``projected_quantized_states``
[batch, frames, final_dim], the summed contrastive loss and the diversity loss.

What fairseq has and transformers' model lacks is added with one forward hook on the feature
encoder (:func:`build_model`): fairseq's ``feature_grad_mult`` (the encoder's gradient scaled by
0.1) and its ``features_pen`` (the mean square of the encoder's output, weighted by
``loss_weights[1]`` in the loss), read back through ``model.features_pen``.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any, Mapping

import torch
from transformers import Wav2Vec2Config, Wav2Vec2ForPreTraining


def conv_layers(spec: str) -> list[tuple[int, int, int]]:
    """fairseq's ``conv_feature_layers`` string, e.g. ``'[(512,10,5)]+[(512,3,2)]*4'``, as a list
    of ``(channels, kernel, stride)``. Only list and tuple literals of integers joined by ``+``
    and repeated by ``* int`` are read (fairseq ``eval``s the string).

    Raises:
        ValueError: anything else, or not three integers a layer.
    """
    def value(node: ast.AST) -> Any:
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, (ast.List, ast.Tuple)):
            items = [value(item) for item in node.elts]
            return items if isinstance(node, ast.List) else tuple(items)
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mult)):
            left, right = value(node.left), value(node.right)
            return left + right if isinstance(node.op, ast.Add) else left * right
        raise ValueError(f"conv_feature_layers: {ast.unparse(node)!r} is not a list of "
                         "(channels, kernel, stride)")

    try:
        layers = value(ast.parse(str(spec), mode="eval").body)
    except SyntaxError as err:
        raise ValueError(f"conv_feature_layers: {spec!r}: {err.msg}") from None
    if (not isinstance(layers, list) or not layers
            or not all(isinstance(layer, tuple) and len(layer) == 3 for layer in layers)):
        raise ValueError(f"conv_feature_layers: {spec!r} is not a list of (channels, kernel, "
                         "stride)")
    return layers


def model_config(config: Mapping[str, Any]) -> Wav2Vec2Config:
    """transformers' ``Wav2Vec2Config`` for the case's configuration (fairseq names, FlagPerf's
    ``model_config.py``; defaults: wav2vec 2.0 BASE).

    Raises:
        ValueError: ``conv_feature_layers`` cannot be read, or ``extractor_mode`` is not
            ``default`` (group norm, fairseq BASE) or ``layer_norm`` (LARGE).
    """
    def get(key: str, default: Any) -> Any:
        value = config.get(key)
        return default if value is None else value

    layers = conv_layers(get("conv_feature_layers",
                             "[(512,10,5)]+[(512,3,2)]*4+[(512,2,2)]+[(512,2,2)]"))
    mode = get("extractor_mode", "default")
    if mode not in ("default", "layer_norm"):
        raise ValueError(f"config extractor_mode: {mode!r}, expected default or layer_norm")
    final_dim = int(get("final_dim", 256))
    return Wav2Vec2Config(
        conv_dim=[c for c, _, _ in layers], conv_kernel=[k for _, k, _ in layers],
        conv_stride=[s for _, _, s in layers], conv_bias=bool(get("conv_bias", False)),
        feat_extract_norm="group" if mode == "default" else "layer",
        do_stable_layer_norm=bool(get("layer_norm_first", False)),
        hidden_size=int(get("encoder_embed_dim", 768)),
        num_hidden_layers=int(get("encoder_layers", 12)),
        num_attention_heads=int(get("encoder_attention_heads", 12)),
        intermediate_size=int(get("encoder_ffn_embed_dim", 3072)),
        hidden_act=str(get("activation_fn", "gelu")),
        num_conv_pos_embeddings=int(get("conv_pos", 128)),
        num_conv_pos_embedding_groups=int(get("conv_pos_groups", 16)),
        hidden_dropout=float(get("dropout", 0.1)),
        attention_dropout=float(get("attention_dropout", 0.1)),
        activation_dropout=float(get("activation_dropout", 0.0)),
        feat_proj_dropout=float(get("dropout_input", 0.1)),
        feat_quantizer_dropout=float(get("dropout_features", 0.1)),
        layerdrop=float(get("encoder_layerdrop", 0.05)),
        num_codevector_groups=int(get("latent_groups", 2)),
        num_codevectors_per_group=int(get("latent_vars", 320)),
        # fairseq: the codebook's width is latent_dim, or final_dim when latent_dim is 0.
        codevector_dim=int(get("latent_dim", 0)) or final_dim,
        proj_codevector_dim=final_dim,
        num_negatives=int(get("num_negatives", 100)),
        contrastive_logits_temperature=float(get("logit_temp", 0.1)),
        diversity_loss_weight=float(get("loss_weights", [0.1, 10.0])[0]),
        mask_time_prob=float(get("mask_prob", 0.65)),
        mask_time_length=int(get("mask_length", 10)),
        mask_time_min_masks=2,  # fairseq compute_mask_indices(min_masks=2) in Wav2Vec2Model
        mask_feature_prob=float(get("mask_channel_prob", 0.0)),
        mask_feature_length=int(get("mask_channel_length", 10)),
        apply_spec_augment=True,
        vocab_size=32,  # the CTC head's, unused in pretraining
    )


def feature_frames(config: Wav2Vec2Config, samples: int) -> int:
    """Frames the feature encoder makes of ``samples`` audio samples (``floor((n - k) / s) + 1``
    a convolution)."""
    for kernel, stride in zip(config.conv_kernel, config.conv_stride):
        samples = (samples - kernel) // stride + 1
    return max(0, int(samples))


def build_model(config: Mapping[str, Any], data_dir: str | Path | None = None
                ) -> Wav2Vec2ForPreTraining:
    """A randomly initialised ``Wav2Vec2ForPreTraining`` (see the module docstring), with
    fairseq's ``feature_grad_mult`` applied to the feature encoder's gradient and its
    ``features_pen`` of the last forward pass in ``model.features_pen`` (a scalar tensor).
    ``data_dir`` is unused: pretraining starts from random weights.

    Raises:
        ValueError: see :func:`model_config`.
    """
    del data_dir
    model = Wav2Vec2ForPreTraining(model_config(config))
    grad_mult = config.get("feature_grad_mult")
    grad_mult = 0.1 if grad_mult is None else float(grad_mult)

    def encoder_hook(module, args, features):  # features: [batch, channels, frames]
        # fairseq Wav2Vec2Model.forward: features_pen = features.float().pow(2).mean(), then
        # GradMultiply (the value unchanged, its gradient x feature_grad_mult).
        model.features_pen = features.float().pow(2).mean()
        if grad_mult == 1.0 or not torch.is_grad_enabled():
            return features
        return features * grad_mult + features.detach() * (1.0 - grad_mult)

    model.features_pen = torch.zeros(())
    model.wav2vec2.feature_extractor.register_forward_hook(encoder_hook)
    return model
