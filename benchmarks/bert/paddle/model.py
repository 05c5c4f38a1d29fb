"""The bert case's model on PaddlePaddle: BERT (Devlin et al. 2019, "BERT: Pre-training of Deep
Bidirectional Transformers for Language Understanding", section 3 and appendix A) written with
``paddle.nn`` in the layout of transformers' ``BertForPreTraining`` that the pytorch case runs,
so that the converted MLPerf checkpoint's names (the TF checkpoint's: ``bert.*``, ``cls.*``) are
its parameter names:

* ``bert.embeddings``: word, position and token-type embeddings summed, LayerNorm, dropout;
* ``bert.encoder.layer.<i>``: post-LN Transformer layers (self-attention ``attention.self``
  query/key/value and ``attention.output`` dense + LayerNorm around a residual; FFN
  ``intermediate.dense`` with GELU (erf), ``output.dense`` + LayerNorm around a residual);
* ``bert.pooler``: dense + tanh on the first token ([CLS]);
* ``cls.predictions``: transform (dense, GELU, LayerNorm) and a decoder tied to the word
  embeddings with its own bias ``cls.predictions.bias``; ``cls.seq_relationship``: the NSP head.

LayerNorm epsilon 1e-12 and the attention mask's additive -10000 are google-research/bert's
modeling.py. Paddle's ``Linear`` keeps its weight as [in, out], the transpose of PyTorch's and
the checkpoint's [out, in]: :func:`load_converted_checkpoint` transposes those.

Keys (the case's configuration): ``vocab_size`` (embedding rows: bert_config.json's vocabulary
padded to a multiple of 8, as NVIDIA's modeling.py pads it: 30522 -> 30528), ``hidden_size``,
``num_hidden_layers``, ``num_attention_heads``, ``intermediate_size``,
``max_position_embeddings``, ``type_vocab_size``, ``hidden_act``, ``hidden_dropout_prob``,
``attention_probs_dropout_prob``, ``initializer_range``; ``bert_config_path`` and
``init_checkpoint`` (relative to data_dir; null: not read).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import paddle
from paddle import nn
from paddle.nn import functional as F

from ..common import check_bert_config
from . import torch_checkpoint

#: Activations by bert_config.json's ``hidden_act`` (transformers' ACT2FN names): "gelu" is the
#: exact (erf) GELU of BERT's TF code, "gelu_new" the tanh approximation.
ACTIVATIONS = {"gelu": F.gelu, "relu": F.relu,
               "gelu_new": lambda x: F.gelu(x, approximate=True)}
#: Checkpoint keys tied to another one (must hold the same values) or not parameters.
TIED = {"cls.predictions.decoder.weight": "bert.embeddings.word_embeddings.weight",
        "cls.predictions.decoder.bias": "cls.predictions.bias"}
NOT_PARAMETERS = ("bert.embeddings.position_ids",)
#: Rows that follow the vocabulary (padded with zero rows to the model's).
VOCABULARY_ROWS = ("bert.embeddings.word_embeddings.weight", "cls.predictions.decoder.weight",
                   "cls.predictions.bias", "cls.predictions.decoder.bias")
LAYER_NORM_EPS = 1e-12


def _normal(std: float) -> paddle.ParamAttr:
    return paddle.ParamAttr(initializer=nn.initializer.Normal(mean=0.0, std=std))


def _linear(d_in: int, d_out: int, std: float) -> nn.Linear:
    """BERT's dense layer: weight ~ N(0, std) (truncated in TF; transformers' normal), bias 0."""
    return nn.Linear(d_in, d_out, weight_attr=_normal(std),
                     bias_attr=paddle.ParamAttr(initializer=nn.initializer.Constant(0.0)))


class _Settings:
    """The configuration's model keys, typed."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        self.vocab_size = int(config["vocab_size"])
        self.hidden_size = int(config["hidden_size"])
        self.num_hidden_layers = int(config["num_hidden_layers"])
        self.num_attention_heads = int(config["num_attention_heads"])
        self.intermediate_size = int(config["intermediate_size"])
        self.max_position_embeddings = int(config["max_position_embeddings"])
        self.type_vocab_size = int(config["type_vocab_size"])
        self.hidden_dropout_prob = float(config["hidden_dropout_prob"])
        self.attention_probs_dropout_prob = float(config["attention_probs_dropout_prob"])
        self.initializer_range = float(config["initializer_range"])
        act = str(config["hidden_act"])
        if act not in ACTIVATIONS:
            raise ValueError(f"config hidden_act: {act!r}, expected one of "
                             + ", ".join(ACTIVATIONS))
        self.act = ACTIVATIONS[act]
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(f"config hidden_size {self.hidden_size} is not a multiple of "
                             f"num_attention_heads {self.num_attention_heads}")


class BertEmbeddings(nn.Layer):
    def __init__(self, s: _Settings) -> None:
        super().__init__()
        std = s.initializer_range
        self.word_embeddings = nn.Embedding(s.vocab_size, s.hidden_size, weight_attr=_normal(std))
        self.position_embeddings = nn.Embedding(s.max_position_embeddings, s.hidden_size,
                                                weight_attr=_normal(std))
        self.token_type_embeddings = nn.Embedding(s.type_vocab_size, s.hidden_size,
                                                  weight_attr=_normal(std))
        self.LayerNorm = nn.LayerNorm(s.hidden_size, epsilon=LAYER_NORM_EPS)
        self.dropout = nn.Dropout(s.hidden_dropout_prob)

    def forward(self, input_ids, token_type_ids):
        positions = paddle.arange(input_ids.shape[1], dtype="int64").unsqueeze(0)
        embeddings = (self.word_embeddings(input_ids) + self.position_embeddings(positions)
                      + self.token_type_embeddings(token_type_ids))
        return self.dropout(self.LayerNorm(embeddings))


class BertSelfAttention(nn.Layer):
    def __init__(self, s: _Settings) -> None:
        super().__init__()
        self.heads = s.num_attention_heads
        self.head_size = s.hidden_size // s.num_attention_heads
        std = s.initializer_range
        self.query = _linear(s.hidden_size, s.hidden_size, std)
        self.key = _linear(s.hidden_size, s.hidden_size, std)
        self.value = _linear(s.hidden_size, s.hidden_size, std)
        self.dropout = nn.Dropout(s.attention_probs_dropout_prob)

    def _split(self, x):  # [batch, seq, hidden] -> [batch, heads, seq, head_size]
        return x.reshape([x.shape[0], x.shape[1], self.heads, self.head_size]).transpose(
            [0, 2, 1, 3])

    def forward(self, hidden, mask_add):
        q, k, v = (self._split(layer(hidden)) for layer in (self.query, self.key, self.value))
        scores = paddle.matmul(q, k, transpose_y=True) / math.sqrt(self.head_size) + mask_add
        probs = self.dropout(F.softmax(scores, axis=-1))
        context = paddle.matmul(probs, v).transpose([0, 2, 1, 3])
        return context.reshape([context.shape[0], context.shape[1], -1])


class BertSelfOutput(nn.Layer):
    """Dense, dropout, residual, LayerNorm (post-LN): used after attention and after the FFN."""

    def __init__(self, d_in: int, s: _Settings) -> None:
        super().__init__()
        self.dense = _linear(d_in, s.hidden_size, s.initializer_range)
        self.LayerNorm = nn.LayerNorm(s.hidden_size, epsilon=LAYER_NORM_EPS)
        self.dropout = nn.Dropout(s.hidden_dropout_prob)

    def forward(self, hidden, residual):
        return self.LayerNorm(self.dropout(self.dense(hidden)) + residual)


class BertAttention(nn.Layer):
    def __init__(self, s: _Settings) -> None:
        super().__init__()
        self.self = BertSelfAttention(s)
        self.output = BertSelfOutput(s.hidden_size, s)

    def forward(self, hidden, mask_add):
        return self.output(self.self(hidden, mask_add), hidden)


class BertIntermediate(nn.Layer):
    def __init__(self, s: _Settings) -> None:
        super().__init__()
        self.dense = _linear(s.hidden_size, s.intermediate_size, s.initializer_range)
        self.act = s.act

    def forward(self, hidden):
        return self.act(self.dense(hidden))


class BertLayer(nn.Layer):
    def __init__(self, s: _Settings) -> None:
        super().__init__()
        self.attention = BertAttention(s)
        self.intermediate = BertIntermediate(s)
        self.output = BertSelfOutput(s.intermediate_size, s)

    def forward(self, hidden, mask_add):
        attended = self.attention(hidden, mask_add)
        return self.output(self.intermediate(attended), attended)


class BertEncoder(nn.Layer):
    def __init__(self, s: _Settings) -> None:
        super().__init__()
        self.layer = nn.LayerList([BertLayer(s) for _ in range(s.num_hidden_layers)])

    def forward(self, hidden, mask_add):
        for layer in self.layer:
            hidden = layer(hidden, mask_add)
        return hidden


class BertPooler(nn.Layer):
    def __init__(self, s: _Settings) -> None:
        super().__init__()
        self.dense = _linear(s.hidden_size, s.hidden_size, s.initializer_range)

    def forward(self, hidden):
        return paddle.tanh(self.dense(hidden[:, 0]))


class BertModel(nn.Layer):
    """Embeddings, encoder and pooler: ``(input_ids, token_type_ids, attention_mask)``
    [batch, seq] -> sequence output [batch, seq, hidden], pooled output [batch, hidden]."""

    def __init__(self, s: _Settings) -> None:
        super().__init__()
        self.embeddings = BertEmbeddings(s)
        self.encoder = BertEncoder(s)
        self.pooler = BertPooler(s)

    def forward(self, input_ids, token_type_ids, attention_mask):
        hidden = self.embeddings(input_ids, token_type_ids)
        # google-research/bert modeling.py: adder = (1.0 - mask) * -10000.0 on the scores.
        mask_add = ((1.0 - attention_mask.astype(hidden.dtype)) * -10000.0).unsqueeze([1, 2])
        sequence = self.encoder(hidden, mask_add)
        return sequence, self.pooler(sequence)


class BertPredictionHeadTransform(nn.Layer):
    def __init__(self, s: _Settings) -> None:
        super().__init__()
        self.dense = _linear(s.hidden_size, s.hidden_size, s.initializer_range)
        self.act = s.act
        self.LayerNorm = nn.LayerNorm(s.hidden_size, epsilon=LAYER_NORM_EPS)

    def forward(self, hidden):
        return self.LayerNorm(self.act(self.dense(hidden)))


class BertLMPredictionHead(nn.Layer):
    """Transform, then scores against the word embeddings (``decoder_weight``, tied: passed
    in, not a parameter of its own) plus ``bias`` [vocab]."""

    def __init__(self, s: _Settings) -> None:
        super().__init__()
        self.transform = BertPredictionHeadTransform(s)
        self.bias = self.create_parameter(
            [s.vocab_size], is_bias=True,
            attr=paddle.ParamAttr(initializer=nn.initializer.Constant(0.0)))

    def forward(self, hidden, decoder_weight):
        return paddle.matmul(self.transform(hidden), decoder_weight, transpose_y=True) + self.bias


class BertPreTrainingHeads(nn.Layer):
    def __init__(self, s: _Settings) -> None:
        super().__init__()
        self.predictions = BertLMPredictionHead(s)
        self.seq_relationship = _linear(s.hidden_size, 2, s.initializer_range)


class BertForPreTraining(nn.Layer):
    """BERT with its pre-training heads, the masked-LM head run on the gathered masked
    positions only (NVIDIA's dense_seq_output, as the pytorch case's BertPreTrainingDense).

    Forward: ``input_ids``, ``token_type_ids``, ``attention_mask`` [batch, seq] (int64) and
    ``masked_lm_positions`` [batch, predictions] -> masked-LM scores [batch, predictions,
    vocab_size] and NSP scores [batch, 2].
    """

    def __init__(self, config: Mapping[str, Any]) -> None:
        super().__init__()
        s = _Settings(config)
        self.vocab_size = s.vocab_size
        self.bert = BertModel(s)
        self.cls = BertPreTrainingHeads(s)

    def forward(self, input_ids, token_type_ids, attention_mask, masked_lm_positions):
        sequence, pooled = self.bert(input_ids, token_type_ids, attention_mask)
        index = masked_lm_positions.unsqueeze(-1).expand(
            [-1, -1, sequence.shape[-1]])
        masked = paddle.take_along_axis(sequence, index, axis=1, broadcast=False)
        scores = self.cls.predictions(masked, self.bert.embeddings.word_embeddings.weight)
        return scores, self.cls.seq_relationship(pooled)


def pretraining_loss(mlm, nsp, masked_lm_labels, next_sentence_labels, ignore: int = -100):
    """MLPerf's loss: mean masked-LM cross entropy over the masked positions plus mean NSP cross
    entropy over the sequences (a scalar, float32), from the scores ``mlm`` [batch,
    predictions, vocab] and ``nsp`` [batch, 2], ``masked_lm_labels`` [batch, predictions]
    (``ignore`` where no prediction) and ``next_sentence_labels`` [batch]. Paddle's
    ``cross_entropy(reduction="mean", ignore_index=...)`` divides by every position, ignored
    ones included: the masked-LM sum is divided by the masked count here instead."""
    labels = masked_lm_labels.reshape([-1])
    used = (labels != ignore).astype("float32")
    per_position = F.cross_entropy(mlm.astype("float32").reshape([-1, mlm.shape[-1]]),
                                   labels.unsqueeze(-1), ignore_index=ignore,
                                   reduction="none").reshape([-1])
    mlm_loss = (per_position * used).sum() / paddle.clip(used.sum(), min=1.0)
    return mlm_loss + F.cross_entropy(nsp.astype("float32"), next_sentence_labels.unsqueeze(-1))


def linear_weights(model: nn.Layer) -> set[str]:
    """Names of the model's ``Linear`` weights (kept [in, out] by paddle)."""
    return {f"{name}.weight" for name, layer in model.named_sublayers()
            if isinstance(layer, nn.Linear)}


def converted_state(model: nn.Layer, path: Path) -> dict[str, np.ndarray]:
    """The converted MLPerf checkpoint at ``path`` (``torch.save({"model": state_dict})`` of
    NVIDIA's BertForPreTraining, TF names; FlagPerf's segmented names
    ``bert_model_segment.``/``heads_only_segment.`` and TF's LayerNorm ``gamma``/``beta``
    accepted too), read without torch (:mod:`torch_checkpoint`), as the model's state: by its
    parameter names, ``Linear`` weights transposed to paddle's [in, out], a vocabulary of
    bert_config.json's size (30522 rows) padded with zero rows to the model's.

    Raises:
        FileNotFoundError: no such file.
        ValueError: not a checkpoint, or keys or shapes that differ from the model's, or tied
            weights that differ (the message names the file).
    """
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such checkpoint (init_checkpoint)")
    saved = torch_checkpoint.load(path)
    state = saved.get("model", saved) if isinstance(saved, dict) else saved
    if not isinstance(state, dict) or not all(isinstance(v, np.ndarray) for v in state.values()):
        raise ValueError(f"{path}: not a state dict of tensors (or a dict with 'model')")
    renamed = {}
    for key, value in state.items():
        key = key.removeprefix("bert_model_segment.").removeprefix("heads_only_segment.")
        if key.endswith("LayerNorm.gamma"):
            key = key[: -len("gamma")] + "weight"
        elif key.endswith("LayerNorm.beta"):
            key = key[: -len("beta")] + "bias"
        renamed[key] = value
    rows = model.vocab_size
    for key in VOCABULARY_ROWS:
        if key in renamed and 0 < renamed[key].shape[0] < rows:
            value = renamed[key]
            renamed[key] = np.concatenate(
                [value, np.zeros((rows - value.shape[0], *value.shape[1:]), value.dtype)])
    for key, tie in TIED.items():
        if key in renamed and tie in renamed and not np.array_equal(renamed.pop(key),
                                                                     renamed[tie]):
            raise ValueError(f"{path}: {key} differs from {tie}, to which the model ties it")
        renamed.pop(key, None)
    for key in NOT_PARAMETERS:
        renamed.pop(key, None)
    transposed = linear_weights(model)
    renamed = {key: value.T if key in transposed and value.ndim == 2 else value
               for key, value in renamed.items()}
    own = {name: list(param.shape) for name, param in model.named_parameters()}
    missing = sorted(set(own) - set(renamed))
    unexpected = sorted(set(renamed) - set(own))
    wrong = sorted(f"{k} {list(renamed[k].shape)} (model {own[k]})"
                   for k in set(renamed) & set(own) if list(renamed[k].shape) != own[k])
    if missing or unexpected or wrong:
        raise ValueError(f"{path}: does not fit the configured BERT: "
                         + "; ".join(f"{what}: {', '.join(keys[:4])}"
                                     + (f" (+{len(keys) - 4})" if len(keys) > 4 else "")
                                     for what, keys in (("missing", missing),
                                                        ("unexpected", unexpected),
                                                        ("shapes", wrong)) if keys))
    return renamed


def load_converted_checkpoint(model: nn.Layer, path: Path) -> None:
    """Set ``model``'s parameters from the converted checkpoint (:func:`converted_state`).

    Raises:
        FileNotFoundError, ValueError: see :func:`converted_state`.
    """
    state = converted_state(model, path)
    for name, param in model.named_parameters():
        param.set_value(np.ascontiguousarray(state[name], dtype=np.float32))


def parameter_count(model: nn.Layer) -> int:
    """Parameters of ``model``, each once (the tied decoder is the word embeddings)."""
    return sum(int(np.prod(p.shape)) for p in model.parameters())


def build_model(config: Mapping[str, Any],
                data_dir: str | Path | None = None) -> BertForPreTraining:
    """A :class:`BertForPreTraining` of the configured size; with ``data_dir``, its
    bert_config.json checked and its initial checkpoint loaded (else randomly initialised, or
    not materialised at all under ``paddle.LazyGuard``, e.g. for counting). BERT-large
    (standard, 30528 rows): 336,232,258 parameters, as the pytorch case's model counts them.

    Raises:
        FileNotFoundError, ValueError: see :func:`check_bert_config`, :func:`converted_state`.
    """
    model = BertForPreTraining(config)
    if data_dir is not None:
        root = Path(data_dir)
        if config.get("bert_config_path"):
            check_bert_config(config, root / str(config["bert_config_path"]))
        if config.get("init_checkpoint"):
            load_converted_checkpoint(model, root / str(config["init_checkpoint"]))
    return model
