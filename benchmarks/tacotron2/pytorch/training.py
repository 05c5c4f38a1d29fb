"""Tacotron 2 trained on LJSpeech-1.1 to a validation-loss target (FlagPerf tacotron2).

The data set is the ``LJSpeech-1.1/`` folder (``data_dir``: ``metadata.csv``, ``wavs/``); clips,
text and mels: ``textmel.py``; the model and loss: ``model.py``.

Training as the recipe (FlagPerf ``train/trainer.py``): teacher-forced Tacotron 2, loss
``model.tacotron2_loss``, Adam (``learning_rate``, L2 ``weight_decay``), gradients clipped to
the norm ``clip_grad_norm`` (upstream's ``grad_clip_thresh``), the learning rate annealed at
the epochs of ``lr_anneal_steps``. With ``allow_tf32`` (the recipe ran fp32 on A100s under
PyTorch 1.8, whose matmuls and convolutions use TF32 by default) CUDA matmuls and cuDNN
convolutions may use TF32; ``cudnn_benchmark`` sets cuDNN's autotuner (upstream's key).
``num_threads``, when set, is torch's number of CPU threads per process (the cpu profile: 1, as
the decoder's small per-frame operations gain nothing from a second thread and stall when the
cores are shared).

Validation (every epoch): the model in eval mode (the prenet's dropout stays on, as the
recipe's), teacher-forced; the validation loss is the mean of the batches' losses over all
ranks (upstream averages each batch's loss over ranks, then over batches); lower is better.
Throughput counts mel frames: the sum of a batch's ``mel_lengths``, padding not counted
(upstream's ``num_mels`` adds ``sum(output_lengths) x world_size`` per step).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping


import torch

from driver.case_io import setting
from driver.convergence import Target
from driver.torch.ljspeech import recipe_split
from driver.torch.trainer import Trainer, TrainingCase

from .model import build_model, model_settings, tacotron2_loss
from .textmel import TextMelDataset, anneal_scheduler, collate
from .tts_text import SYMBOLS


def mean_spectrum_loss(train_set: TextMelDataset, val_set: TextMelDataset,
                       batch_size: int) -> float:
    """The validation loss (mean over batches of ``batch_size``, as evaluation takes it) of the
    best predictor that follows neither the text nor the previous frames: every frame the
    training frames' mean mel spectrum, every stop logit the one of the training batches' share
    of stop targets."""
    frames = torch.cat([train_set[i][1] for i in range(len(train_set))], 1)
    channel_mean = frames.mean(1, keepdim=True)                            # [M, 1]
    train_gates = [collate([train_set[i] for i in range(start, min(start + batch_size,
                                                                   len(train_set)))])[3]
                   for start in range(0, len(train_set), batch_size)]
    share = float(torch.cat([g.flatten() for g in train_gates]).mean())
    losses = []
    for start in range(0, len(val_set), batch_size):
        _, _, mel, gate, _ = collate([val_set[i] for i in range(start, min(start + batch_size,
                                                                           len(val_set)))])
        mean_mel = channel_mean.expand_as(mel[0]).expand_as(mel)
        stop = torch.full_like(gate, float(torch.logit(torch.tensor(share))))
        losses.append(float(tacotron2_loss((mean_mel, mean_mel, stop), mel, gate)))
    return sum(losses) / len(losses)


def tacotron2_case(config: Mapping[str, Any], data_dir: Path,
                   builder=build_model) -> TrainingCase:
    """The trainer's view of the case (see the module docstring).

    Raises:
        ValueError: ``n_symbols`` below the symbol set's size, and see ``model.model_settings``
            and ``driver.torch.ljspeech.recipe_split``.
    """
    if int(model_settings(config)["n_symbols"]) < len(SYMBOLS):
        raise ValueError(f"config n_symbols: {config['n_symbols']}, the text's symbol set has "
                         f"{len(SYMBOLS)}")
    train_clips, val_clips = recipe_split(config, data_dir)
    tf32 = bool(setting(config, "allow_tf32", False))
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cudnn.benchmark = bool(setting(config, "cudnn_benchmark", False))
    if setting(config, "num_threads", None):
        torch.set_num_threads(int(config["num_threads"]))

    def forward_loss(model, batch):
        text, text_lengths, mel, gate, mel_lengths = batch
        return tacotron2_loss(model(text, text_lengths, mel, mel_lengths), mel, gate)

    def create_optimizer(model, ctx):
        # FlagPerf's optimizers/factory.py: torch's Adam with L2 weight decay (not AdamW).
        return torch.optim.Adam(model.parameters(), lr=float(config["learning_rate"]),
                                weight_decay=float(setting(config, "weight_decay", 0.0)))

    train_set = TextMelDataset(data_dir, train_clips, config)
    val_set = TextMelDataset(data_dir, val_clips, config)
    return TrainingCase(
        train_set=train_set, val_set=val_set,
        build_model=lambda: builder(config, data_dir),
        create_optimizer=create_optimizer,
        train_loss=forward_loss,
        eval_sum_names=("loss", "batches"),
        eval_sums=lambda model, batch: {"loss": float(forward_loss(model, batch)), "batches": 1},
        eval_metric=lambda sums: sums["loss"] / max(sums["batches"], 1.0),
        target=Target("val_loss", float(config["target_val_loss"]), higher_is_better=False),
        create_scheduler=lambda optimizer, plan: anneal_scheduler(
            optimizer, plan.steps_per_epoch, config),
        model_info={"train_clips": len(train_clips), "val_clips": len(val_clips)},
        collate_fn=collate,
        eval_collate_fn=collate,
        units=("mel_frames", lambda batch: int(batch[4].sum())),
        input_blind=lambda model: mean_spectrum_loss(train_set, val_set,
                                                     int(config["eval_batch_size"])),
    )


def run(case) -> int:
    """The case's driver (case.yml ``driver: tacotron2.pytorch.training``; ``driver.run.Case``)."""
    trainer = Trainer.from_command_line(case.description, model=case.name)
    return trainer.fit(tacotron2_case(trainer.config, trainer.data_dir, builder=case.build_model))
