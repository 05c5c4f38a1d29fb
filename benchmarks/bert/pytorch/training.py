"""BERT pre-training continued from MLPerf's checkpoint to a masked-LM accuracy target (FlagPerf
bert, the MLPerf training v1.0 recipe).

Data: MLPerf's hdf5 shards under data_dir (format ``mlperf_bert_hdf5``): every ``part*`` file
of ``2048_shards_uncompressed/`` for training, of ``eval_set_uncompressed/`` for evaluation.
Model: case.yml's, ``model.py`` (transformers' BertForPreTraining, bert_config.json checked, the converted
``init_checkpoint`` loaded). Loss: MLPerf's, masked-LM cross entropy over the masked positions
plus next-sentence cross entropy; the prediction head runs on the ``max_predictions_per_seq``
gathered positions only (NVIDIA's dense_seq_output). Metric: masked-LM accuracy, correct
predictions over masked positions of the whole evaluation set (MLPerf's ``eval_mlm_accuracy``),
a fraction. Optimizer: LAMB (``lamb.py``) with FlagPerf's no-decay groups and
LinearWarmupPolyDecay schedule over ``max_steps``. The shared loop is driver/torch/trainer.py.

Case keys besides the trainer's and model.py's: ``max_seq_length``, ``max_predictions_per_seq``,
``learning_rate``, ``weight_decay_rate``, ``opt_lamb_beta_1``, ``opt_lamb_beta_2``,
``opt_lamb_epsilon``, ``max_grad_norm``, ``warmup_proportion``, ``warmup_steps``,
``start_warmup_step``, ``target_mlm_accuracy``.
"""

from pathlib import Path

import torch

from driver.case_io import setting
from driver.convergence import Target, majority_share
from driver.torch.trainer import Trainer, TrainingCase

from .. import common
from ..common import EVAL_DIR, TRAIN_DIR, poly_warmup_factor
from .lamb import Lamb, bert_param_groups


class BertShards(torch.utils.data.Dataset):
    """``bert.common.BertShards`` (MLPerf's hdf5 shards, shared with the paddle case) as a
    torch data set: an item is a dict of int64 tensors, ``input_ids``, ``segment_ids``,
    ``input_mask`` [seq_len], ``masked_lm_positions``, ``masked_lm_ids`` [max_predictions] (0
    where unused) and ``next_sentence_labels`` [].

    Raises:
        FileNotFoundError, ValueError: see ``bert.common.BertShards``.
    """

    def __init__(self, folder: Path, seq_len: int, max_predictions: int) -> None:
        self.shards = common.BertShards(folder, seq_len, max_predictions)

    def __len__(self) -> int:
        return len(self.shards)

    def __getitem__(self, index: int) -> dict:
        return {key: torch.from_numpy(value) for key, value in self.shards[index].items()}

    def masked_lm_labels(self) -> list[int]:
        """The labels of every used masked-LM slot (position not 0) of every file, in order."""
        return self.shards.masked_lm_labels().tolist()


def collate(items: list) -> dict:
    """Stack ``items`` and cut the sequences to the batch's longest (its padding carries no
    attention and no prediction: exact, as NVIDIA's unpadding is)."""
    batch = torch.utils.data.default_collate(items)
    length = int(batch["input_mask"].sum(1).max())
    for key in ("input_ids", "segment_ids", "input_mask"):
        batch[key] = batch[key][:, :length]
    return batch


def heads(model, batch: dict) -> tuple:
    """Masked-LM scores [batch, max_predictions, vocab] at the gathered positions and NSP
    scores [batch, 2]."""
    return model(batch["input_ids"], batch["segment_ids"], batch["input_mask"],
                 batch["masked_lm_positions"])


def masked_labels(batch: dict) -> torch.Tensor:
    """``masked_lm_ids`` [batch, max_predictions] with ``IGNORE`` (-100) where unused:
    ``bert.common.masked_labels`` on the batch's tensors."""
    return batch["masked_lm_ids"].masked_fill(batch["masked_lm_positions"] == 0, common.IGNORE)


def pretraining_loss(model, batch: dict) -> torch.Tensor:
    """MLPerf's loss: mean masked-LM cross entropy over the masked positions + mean NSP cross
    entropy over the sequences (a scalar)."""
    mlm, nsp = heads(model, batch)
    loss = torch.nn.functional.cross_entropy(mlm.flatten(0, 1).float(),
                                             masked_labels(batch).flatten(), ignore_index=common.IGNORE)
    return loss + torch.nn.functional.cross_entropy(nsp.float(), batch["next_sentence_labels"])


def mlm_sums(model, batch: dict) -> dict:
    """Correct masked-LM predictions and masked positions in one evaluation batch."""
    mlm, _ = heads(model, batch)
    labels = masked_labels(batch)
    used = labels != common.IGNORE
    return {"correct": int((mlm.argmax(-1).eq(labels) & used).sum()),
            "masked": int(used.sum())}


def mlm_accuracy(sums: dict) -> float:
    """Correct over masked positions (0 when there are none)."""
    return sums["correct"] / sums["masked"] if sums["masked"] else 0.0


def run(case) -> int:
    """The case's driver (case.yml ``driver: bert.pytorch.training``; ``driver.run.Case``)."""
    trainer = Trainer.from_command_line(case.description, model=case.name)
    config, data_dir = trainer.config, trainer.data_dir
    seq_len = int(config["max_seq_length"])
    max_predictions = int(config["max_predictions_per_seq"])
    train_set = BertShards(data_dir / TRAIN_DIR, seq_len, max_predictions)
    val_set = BertShards(data_dir / EVAL_DIR, seq_len, max_predictions)

    def create_optimizer(model, ctx):
        return Lamb(bert_param_groups(model, float(config["weight_decay_rate"])),
                    lr=float(config["learning_rate"]),
                    betas=(float(config["opt_lamb_beta_1"]), float(config["opt_lamb_beta_2"])),
                    eps=float(setting(config, "opt_lamb_epsilon", 1e-6)),
                    max_grad_norm=float(setting(config, "max_grad_norm", 1.0)))

    def create_scheduler(optimizer, plan):
        total = int(setting(config, "max_steps", 0)) or plan.total_steps
        proportion = float(setting(config, "warmup_proportion", 0.0))
        if proportion:
            warmup, start = int(total * proportion), 0
        else:
            warmup = int(setting(config, "warmup_steps", 0))
            start = int(setting(config, "start_warmup_step", 0))
        return torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda step: poly_warmup_factor(step, warmup, total, start))

    training = TrainingCase(
        train_set=train_set, val_set=val_set,
        build_model=lambda: case.build_model(config, data_dir),
        create_optimizer=create_optimizer, train_loss=pretraining_loss,
        eval_sum_names=("correct", "masked"), eval_sums=mlm_sums, eval_metric=mlm_accuracy,
        target=Target("mlm_accuracy", float(config["target_mlm_accuracy"])),
        create_scheduler=create_scheduler, collate_fn=collate, eval_collate_fn=collate,
        # Always the most frequent masked-LM label of the training shards.
        input_blind=lambda model: majority_share(train_set.masked_lm_labels(),
                                                 val_set.masked_lm_labels()),
        model_info={"hidden_size": int(config["hidden_size"]),
                    "num_hidden_layers": int(config["num_hidden_layers"]),
                    "vocab_size": int(config["vocab_size"]), "max_seq_length": seq_len,
                    "train_samples": len(train_set), "eval_samples": len(val_set)})
    return trainer.fit(training)
