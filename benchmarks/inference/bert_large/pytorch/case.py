"""BERT-large masked-LM inference (FlagPerf inference/benchmarks/bertLarge): transformers'
``BertForMaskedLM`` of bert-large-uncased on MLPerf BERT's ``eval.txt`` with a tenth of its
tokens masked, framework validation in PyTorch, then the vendor's compiler.

Data (upstream's ``dataloader.py``): ``eval.txt`` tokenised whole by the weights folder's
``BertTokenizer``; each token replaced by ``[MASK]`` with probability ``mask_ratio``, drawn by
``random.Random(random_seed)`` one draw per token in order (upstream seeds Python's ``random``
and draws the same way, so the same positions are masked); ``[CLS] tokens [SEP]`` cut into
chunks of ``seq_length`` tokens, a last partial chunk dropped. A chunk is one item: inputs
``(input_ids,)`` int32 ``[B, seq_length]`` (upstream passes no attention mask: every position
is text), labels int64 ``[B, seq_length]``, the original id where masked and :data:`IGNORE`
elsewhere.

Metric (upstream's ``evaluator.py``): the accuracy of the top-1 predicted id over the masked
positions only. Upstream starts both of its sums at 1 (``correct = 1; whole = 1``); here they
start at 0. The forwards reduce the logits ``[B, seq_length, vocab]`` to predicted ids on the
device, as upstream takes the argmax before moving anything (the logits of a batch of 32 are
1 GB in fp16); the argmax is in the core time here (a few ms on a GPU).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any, Callable, Mapping

import torch
from torch.utils.data import DataLoader, TensorDataset
from transformers import BertForMaskedLM, BertTokenizer
from transformers.utils import logging as transformers_logging

from driver.torch import inference

#: The seed's six functions (the driver calls them by name).
__all__ = ["build_dataloader", "create_model", "evaluator", "model_forward", "export_model",
           "engine_forward"]
#: The label of a position that is not masked (PyTorch's cross-entropy ``ignore_index``).
IGNORE = -100


def _folder(config: Mapping[str, Any], data_dir: Path) -> Path:
    """``<data_dir>/<weight_dir>``: the save_pretrained folder with the tokenizer's vocab.txt.

    Raises:
        inference.InferenceError: ``weight_dir`` is not set, or the folder has no config.json.
    """
    if not config.get("weight_dir"):
        raise inference.InferenceError("weight_dir: not set; this case reads its model and "
                                       "tokenizer from <data_dir>/<weight_dir>")
    folder = Path(data_dir) / str(config["weight_dir"])
    if not (folder / "config.json").is_file():
        raise inference.InferenceError(f"weight_dir: {folder} holds no config.json (a "
                                       "save_pretrained folder of BertForMaskedLM)")
    return folder


def masked_chunks(config: Mapping[str, Any], data_dir: Path) -> tuple[torch.Tensor, torch.Tensor]:
    """``eval_file`` as masked chunks (module docstring): ``(input_ids, labels)``, int32 and
    int64 ``[chunks, seq_length]``, ``chunks = (tokens + 2) // seq_length``.

    Raises:
        inference.InferenceError: ``eval_file`` or the weights folder is missing, or the text
            is shorter than one chunk.
    """
    path = Path(data_dir) / str(config["eval_file"])
    if not path.is_file():
        raise inference.InferenceError(f"eval_file: no such file {path}")
    tokenizer = BertTokenizer.from_pretrained(_folder(config, data_dir))
    original = tokenizer.convert_tokens_to_ids(tokenizer.tokenize(path.read_text(encoding="utf-8")))
    draw, ratio = random.Random(int(config["random_seed"])), float(config["mask_ratio"])
    special = set(tokenizer.all_special_ids)
    masked = [tokenizer.mask_token_id if token not in special and draw.random() < ratio
              else token for token in original]
    cls, sep = [tokenizer.cls_token_id], [tokenizer.sep_token_id]
    labels = [IGNORE] + [o if m != o else IGNORE for o, m in zip(original, masked)] + [IGNORE]
    input_ids = cls + masked + sep
    length = int(config["seq_length"])
    chunks = len(input_ids) // length
    if chunks == 0:
        raise inference.InferenceError(f"eval_file: {path} holds {len(input_ids)} tokens, fewer "
                                       f"than one chunk of seq_length {length}")
    return (torch.tensor(input_ids[:chunks * length], dtype=torch.int32).view(chunks, length),
            torch.tensor(labels[:chunks * length], dtype=torch.int64).view(chunks, length))


def _batch(items: list[tuple[torch.Tensor, torch.Tensor]]
           ) -> tuple[tuple[torch.Tensor], torch.Tensor]:
    """DataLoader collation: ``((input_ids [B, S],), labels [B, S])``."""
    input_ids, labels = zip(*items)
    return (torch.stack(input_ids),), torch.stack(labels)


def build_dataloader(config: Mapping[str, Any], data_dir: Path) -> DataLoader:
    """Batches of ``batch_size`` chunks in order, the last one short (``drop_last`` false; every
    chunk counts), ``num_workers`` loader processes.

    Raises:
        inference.InferenceError: see :func:`masked_chunks`.
    """
    input_ids, labels = masked_chunks(config, data_dir)
    return DataLoader(TensorDataset(input_ids, labels), batch_size=int(config["batch_size"]),
                      shuffle=False, drop_last=False, num_workers=int(config["num_workers"]),
                      collate_fn=_batch, pin_memory=inference.device(config).type == "cuda")


class MaskedLMLogits(torch.nn.Module):
    """``BertForMaskedLM`` whose forward returns the logits tensor alone, not its output object:
    ONNX export and the engines need a plain tensor. ``input_ids`` int ``[B, S]`` -> logits
    ``[B, S, vocab_size]``."""

    def __init__(self, bert: torch.nn.Module) -> None:
        super().__init__()
        self.bert = bert

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.bert(input_ids=input_ids).logits


def create_model(config: Mapping[str, Any], data_dir: Path) -> torch.nn.Module:
    """``BertForMaskedLM.from_pretrained(<data_dir>/<weight_dir>)`` (nothing downloaded) as
    :class:`MaskedLMLogits`, in eval mode on the driver's device, fp16 when ``fp16`` and on
    CUDA (upstream: ``model.half()``). The cpu profile's folder is the tiny data's stand-in
    (data format ``bert_eval_text``): a 2-layer BERT with random weights.

    Raises:
        inference.InferenceError: see :func:`_folder`; the folder's positions are fewer than
            ``seq_length``.
    """
    folder = _folder(config, data_dir)
    transformers_logging.disable_progress_bar()  # one bar per load would fill the rank log
    bert = BertForMaskedLM.from_pretrained(folder, local_files_only=True)
    if bert.config.max_position_embeddings < int(config["seq_length"]):
        raise inference.InferenceError(
            f"seq_length: {config['seq_length']} tokens, but {folder}'s model has "
            f"{bert.config.max_position_embeddings} positions")
    where = inference.device(config)
    model = MaskedLMLogits(bert).eval().to(where)
    return model.half() if config.get("fp16") and where.type == "cuda" else model


def predicted_ids(outputs: Any, input_ids: torch.Tensor) -> torch.Tensor:
    """The top-1 id per position, ``[B, S]``, from the logits ``[B, S, vocab]``: a tensor, or an
    engine's list of outputs whose first is the logits, possibly flat (TensorRT bindings)."""
    logits = outputs[0] if isinstance(outputs, (list, tuple)) else outputs
    return torch.as_tensor(logits).reshape(*input_ids.shape, -1).argmax(-1)


def evaluator(outputs: torch.Tensor, labels: torch.Tensor) -> tuple[int, int]:
    """Masked-LM accuracy of one batch over the masked positions only: ``(correct, counted)``.

    Args:
        outputs: predicted ids ``[B, S]``, or logits ``[B, S, vocab]`` (their argmax is taken).
        labels: ``[B, S]``, the original id where masked, :data:`IGNORE` elsewhere.
    """
    if outputs.dim() == labels.dim() + 1:
        outputs = outputs.argmax(-1)
    masked = labels != IGNORE
    correct = outputs.reshape(labels.shape)[masked] == labels[masked]
    return int(correct.sum()), int(masked.sum())


def model_forward(model: torch.nn.Module, dataloader: DataLoader,
                  evaluator: Callable[[torch.Tensor, torch.Tensor], tuple[int, int]],
                  config: Mapping[str, Any]) -> inference.PathResult:
    """Framework validation: the PyTorch model over the data, predicted ids to the evaluator."""
    def call(inputs: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, float]:
        with torch.no_grad():
            return predicted_ids(model(*inputs), inputs[0]), 0.0
    return inference.timed_forward(call, dataloader, evaluator, config)


def export_model(model: torch.nn.Module, config: Mapping[str, Any], onnx_path: Path) -> Path:
    """``model`` as ONNX at ``onnx_path`` (torch.export-based exporter): input ``input_ids``
    int32 ``[batch, seq_length]``, output ``logits`` ``[batch, seq_length, vocab]``, the batch
    axis dynamic (the last batch is short). Returns ``onnx_path``."""
    where = next(model.parameters()).device
    # torch.export specialises a dimension of size 1: the example batch has at least 2.
    example = torch.ones(max(2, int(config["batch_size"])), int(config["seq_length"]),
                         dtype=torch.int32, device=where)
    onnx_path = Path(onnx_path)
    onnx_path.parent.mkdir(parents=True, exist_ok=True)
    with torch.no_grad():
        torch.onnx.export(model, (example,), onnx_path, input_names=["input_ids"],
                          output_names=["logits"], verbose=False,
                          dynamic_shapes={"input_ids": {0: torch.export.Dim("batch")}})
    return onnx_path


def engine_forward(engine: Callable[[tuple[torch.Tensor, ...]], tuple[Any, float]],
                   dataloader: DataLoader,
                   evaluator: Callable[[torch.Tensor, torch.Tensor], tuple[int, int]],
                   config: Mapping[str, Any]) -> inference.PathResult:
    """The vendor's engine over the data, predicted ids to the evaluator; its ``foo_time``
    passed on."""
    def call(inputs: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, float]:
        outputs, foo_time = engine(inputs)
        return predicted_ids(outputs, inputs[0]), foo_time
    return inference.timed_forward(call, dataloader, evaluator, config)
