"""The bert case's model: transformers' ``BertForPreTraining`` configured from the case's keys,
checked against ``bert_config.json`` and started from the converted MLPerf checkpoint.

Keys (the case's configuration): ``vocab_size`` (embedding rows: bert_config.json's
vocabulary padded to a multiple of 8, as NVIDIA's modeling.py pads it: 30522 -> 30528),
``hidden_size``, ``num_hidden_layers``, ``num_attention_heads``, ``intermediate_size``,
``max_position_embeddings``, ``type_vocab_size``, ``hidden_act``, ``hidden_dropout_prob``,
``attention_probs_dropout_prob``, ``initializer_range``; ``bert_config_path`` and
``init_checkpoint`` (relative to data_dir; null: not read).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import torch

from ..common import check_bert_config

#: Model keys a converted checkpoint need not hold: transformers ties the decoder's bias to
#: ``cls.predictions.bias`` and keeps position ids as a buffer.
NOT_IN_CHECKPOINT = ("cls.predictions.decoder.bias", "bert.embeddings.position_ids")


def load_converted_checkpoint(model: torch.nn.Module, path: Path) -> None:
    """Load a converted MLPerf checkpoint (``torch.save({"model": state_dict})`` of NVIDIA's
    BertForPreTraining, TF names: ``bert.*``, ``cls.*``; FlagPerf's segmented names
    ``bert_model_segment.``/``heads_only_segment.`` are accepted too) into ``model``. A
    vocabulary of bert_config.json's size (30522 rows) is padded with zero rows to the model's.

    Raises:
        FileNotFoundError: no such file; ValueError: not a checkpoint, or keys or shapes that
            differ from the model's.
    """
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such checkpoint (init_checkpoint)")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises several types for a file that is not one
        raise ValueError(f"{path}: not a torch checkpoint ({err})") from None
    state = state.get("model", state) if isinstance(state, dict) else state
    if not isinstance(state, dict):
        raise ValueError(f"{path}: not a state dict (or a dict with 'model')")
    state = {k.removeprefix("bert_model_segment.").removeprefix("heads_only_segment."): v
             for k, v in state.items()}
    rows = model.config.vocab_size
    for key in ("bert.embeddings.word_embeddings.weight", "cls.predictions.decoder.weight",
                "cls.predictions.bias"):
        if key in state and state[key].shape[0] < rows:
            tensor = state[key]
            state[key] = torch.cat([tensor, tensor.new_zeros(rows - tensor.shape[0],
                                                             *tensor.shape[1:])])
    own = model.state_dict()
    missing = sorted(set(own) - set(state) - set(NOT_IN_CHECKPOINT))
    unexpected = sorted(set(state) - set(own))
    wrong = sorted(f"{k} {list(state[k].shape)} (model {list(own[k].shape)})"
                   for k in set(state) & set(own) if state[k].shape != own[k].shape)
    if missing or unexpected or wrong:
        raise ValueError(f"{path}: does not fit the configured BERT: "
                         + "; ".join(f"{what}: {', '.join(keys[:4])}"
                                     + (f" (+{len(keys) - 4})" if len(keys) > 4 else "")
                                     for what, keys in (("missing", missing),
                                                        ("unexpected", unexpected),
                                                        ("shapes", wrong)) if keys))
    model.load_state_dict(state, strict=False)


class BertPreTrainingDense(torch.nn.Module):
    """transformers' BertForPreTraining's ``bert`` and ``cls`` (the same modules, so the same
    state-dict keys and tied weights), with a forward that runs the masked-LM head on the
    gathered masked positions only (NVIDIA's dense_seq_output) instead of every position; a
    forward of its own, so that DDP wraps it.

    Forward: ``input_ids``, ``token_type_ids``, ``attention_mask`` [batch, seq] and
    ``masked_lm_positions`` [batch, predictions] -> masked-LM scores [batch, predictions,
    vocab_size] and NSP scores [batch, 2].
    """

    def __init__(self, pretraining) -> None:
        super().__init__()
        self.config = pretraining.config
        self.bert, self.cls = pretraining.bert, pretraining.cls

    def forward(self, input_ids, token_type_ids, attention_mask, masked_lm_positions):
        sequence, pooled = self.bert(input_ids=input_ids, token_type_ids=token_type_ids,
                                     attention_mask=attention_mask, return_dict=False)[:2]
        index = masked_lm_positions.unsqueeze(-1).expand(-1, -1, sequence.shape[-1])
        return self.cls.predictions(sequence.gather(1, index)), self.cls.seq_relationship(pooled)


def build_model(config: Mapping[str, Any], data_dir: str | Path | None = None):
    """:class:`BertPreTrainingDense` over a ``BertForPreTraining`` of the configured size; with
    ``data_dir``, its bert_config.json checked and its initial checkpoint loaded (else randomly
    initialised, e.g. on the meta device for counting). BERT-large (standard, 30528 rows): 336,232,258 parameters, the decoder
    weight tied to the word embeddings: BertModel (embeddings, 24 layers, pooler; the
    published "335 M") 335,148,032 (335,141,888 with 30522 rows) and the pre-training heads
    1,084,226.

    Raises:
        FileNotFoundError, ValueError: see :func:`check_bert_config`,
            :func:`load_converted_checkpoint`.
    """
    from transformers import BertConfig, BertForPreTraining

    hf = BertConfig(
        vocab_size=int(config["vocab_size"]), hidden_size=int(config["hidden_size"]),
        num_hidden_layers=int(config["num_hidden_layers"]),
        num_attention_heads=int(config["num_attention_heads"]),
        intermediate_size=int(config["intermediate_size"]), hidden_act=config["hidden_act"],
        hidden_dropout_prob=float(config["hidden_dropout_prob"]),
        attention_probs_dropout_prob=float(config["attention_probs_dropout_prob"]),
        max_position_embeddings=int(config["max_position_embeddings"]),
        type_vocab_size=int(config["type_vocab_size"]),
        initializer_range=float(config["initializer_range"]), layer_norm_eps=1e-12)
    model = BertPreTrainingDense(BertForPreTraining(hf))
    if data_dir is not None:
        root = Path(data_dir)
        if config.get("bert_config_path"):
            check_bert_config(config, root / str(config["bert_config_path"]))
        if config.get("init_checkpoint"):
            load_converted_checkpoint(model, root / str(config["init_checkpoint"]))
    return model
