"""WaveGlow trained on LJSpeech-1.1 to a validation-loss target (FlagPerf WaveGlow).

The data set is the ``LJSpeech-1.1/`` folder (``data_dir``: ``metadata.csv``, ``wavs/``). Clips:
the recipe's split, shared with tacotron2 (``driver.torch.ljspeech.recipe_split``): validation
the clips of ``validation_files`` (a list in ``driver/torch/ljspeech_lists/``:
``ljs_val_clips.txt``, the 100 clips of the recipe's ``ljs_audio_text_val_filelist.txt``) or,
with it null, of ``val_clips`` (the cpu profile); training every other clip but those of
``excluded_files`` (``ljs_test_clips.txt``: the recipe's 500 test clips), the 12 500 of the
recipe's ``ljs_audio_text_train_filelist.txt``.

Each item (NVIDIA's ``MelAudioLoader``): ``segment_length`` samples of the clip (at a random
start in training; the clip is zero-padded when shorter) and the log mel spectrogram of that
segment (``driver.torch.ljspeech.MelSpectrogram``, the recipe's STFT): ``(mel [M, F], audio
[S])``, ``F = S // hop_length + 1``. Validation takes each clip's centre segment, the same in
every evaluation (the recipe draws a random one each time).

Loss: ``model.waveglow_loss`` (NVIDIA's WaveGlowLoss, sigma ``sigma``). The validation loss is
the mean over validation clips (FlagPerf averages the batches' means); lower is better. Adam
(``learning_rate``, ``weight_decay``), gradients clipped at ``clip_grad_norm`` (FlagPerf's
``grad_clip_thresh``). Throughput counts audio samples (``batch x segment_length``), as
FlagPerf's ``training_items_per_second``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping


import torch

from driver.case_io import setting
from driver.convergence import Target
from driver.torch.ljspeech import MelSpectrogram, load_audio, recipe_split
from driver.torch.trainer import Trainer, TrainingCase

from .model import build_model, waveglow_loss


class AudioSegments(torch.utils.data.Dataset):
    """``(mel [M, F], audio [S])`` per clip of ``clip_ids`` (see the module docstring), each
    clip ``repeats`` times. ``random_segment``: a random start (training) or the centre.
    ``cache``: keep the clips' samples in memory after the first read (small sets only)."""

    def __init__(self, root: Path, clip_ids: list[str], config: Mapping[str, Any], *,
                 random_segment: bool, repeats: int = 1, cache: bool = False) -> None:
        self.root, self.clip_ids, self.config = Path(root), list(clip_ids), config
        self.segment = int(config["segment_length"])
        self.random_segment, self.repeats = random_segment, max(1, int(repeats))
        self.cache: dict[str, torch.Tensor] | None = {} if cache else None
        self.mel = MelSpectrogram(config)

    def __len__(self) -> int:
        return len(self.clip_ids) * self.repeats

    def clip_audio(self, clip_id: str) -> torch.Tensor:
        if self.cache is None:
            return load_audio(self.root, clip_id, self.config)
        if clip_id not in self.cache:
            self.cache[clip_id] = load_audio(self.root, clip_id, self.config)
        return self.cache[clip_id]

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        audio = self.clip_audio(self.clip_ids[index % len(self.clip_ids)])
        spare = audio.shape[0] - self.segment
        if spare >= 0:
            start = int(torch.randint(0, spare + 1, ())) if self.random_segment else spare // 2
            audio = audio[start:start + self.segment]
        else:
            audio = torch.nn.functional.pad(audio, (0, -spare))
        with torch.no_grad():
            return self.mel(audio), audio


#: Past samples the input-blind linear predictor reads (:func:`linear_prediction_loss`).
PREDICTOR_ORDER = 32


def linear_prediction_loss(train_audio: list[torch.Tensor], val_audio: list[torch.Tensor],
                           sigma: float = 1.0, order: int = PREDICTOR_ORDER) -> float:
    """The validation loss, in ``model.waveglow_loss``'s units (negative log-likelihood per
    sample less ``log(sigma sqrt(2 pi))``), of a density of the audio that ignores the mel: each
    sample predicted linearly from the ``order`` before it, with Gaussian residuals, the weights
    and the residual variance fitted on the training clips by least squares (an autoregressive
    Gaussian; a segment's first ``order`` samples take the training samples' mean square as
    their variance). ``train_audio``: whole clips ``[S]``; ``val_audio``: the validation
    segments ``[S]``; the loss is averaged over every validation sample.
    """
    def windows(audio: torch.Tensor) -> torch.Tensor:
        return audio.double().unfold(0, order + 1, 1)                     # [S - order, order + 1]

    train = torch.cat([windows(a) for a in train_audio if a.numel() > order])
    weights = torch.linalg.lstsq(train[:, :order], train[:, order:]).solution
    variance = float((train[:, order:] - train[:, :order] @ weights).square().mean())
    marginal = float(torch.cat([a.double() for a in train_audio]).square().mean())
    total, count = 0.0, 0
    for audio in val_audio:
        head = audio[:order].double()
        residual = windows(audio)[:, order:] - windows(audio)[:, :order] @ weights
        total += float(0.5 * math.log(marginal) * head.numel() + head.square().sum() / (2 * marginal)
                       + 0.5 * math.log(variance) * residual.numel()
                       + residual.square().sum() / (2 * variance))
        count += audio.numel()
    return total / count - math.log(sigma)


def waveglow_case(config: Mapping[str, Any], data_dir: Path,
                  builder=build_model) -> TrainingCase:
    """The trainer's view of the case (see the module docstring).

    Raises:
        ValueError: see ``driver.torch.ljspeech.recipe_split``; ``segment_length`` not a
            multiple of ``n_group``.
        FileNotFoundError: see ``driver.torch.ljspeech.recipe_split``.
    """
    segment, group = int(config["segment_length"]), int(setting(config, "n_group", 8))
    if segment % group:
        raise ValueError(f"config segment_length {segment}: not a multiple of n_group {group}")
    train_clips, val_clips = recipe_split(config, data_dir)
    train_ids = [clip.clip_id for clip in train_clips]
    val_ids = [clip.clip_id for clip in val_clips]
    cache = bool(setting(config, "cache_audio", False))
    train_set = AudioSegments(data_dir, train_ids, config, random_segment=True, cache=cache,
                              repeats=int(setting(config, "train_repeats", 1)))
    val_set = AudioSegments(data_dir, val_ids, config, random_segment=False, cache=cache)
    sigma = float(setting(config, "sigma", 1.0))

    def loss(model, batch):
        mel, audio = batch
        return waveglow_loss(model(mel, audio), sigma)

    def eval_sums(model, batch):
        mel, audio = batch
        return {"loss_sum": float(loss(model, batch)) * audio.shape[0], "clips": audio.shape[0]}

    def create_optimizer(model, ctx):
        return torch.optim.Adam(model.parameters(), lr=float(config["learning_rate"]),
                                weight_decay=float(setting(config, "weight_decay", 0.0)))

    return TrainingCase(
        train_set=train_set, val_set=val_set, build_model=lambda: builder(config),
        create_optimizer=create_optimizer, train_loss=loss,
        eval_sum_names=("loss_sum", "clips"),
        eval_sums=eval_sums,
        eval_metric=lambda sums: sums["loss_sum"] / max(sums["clips"], 1.0),
        target=Target("val_loss", float(config["target_val_loss"]), higher_is_better=False),
        model_info={"train_clips": len(train_ids), "val_clips": len(val_ids),
                    "segment_length": segment},
        units=("audio_samples", lambda batch: int(batch[1].numel())),
        input_blind=lambda model: linear_prediction_loss(
            [train_set.clip_audio(clip) for clip in train_ids],
            [val_set[i][1] for i in range(len(val_set))], sigma))


def run(case) -> int:
    """The case's driver (case.yml ``driver: waveglow.pytorch.training``; ``driver.run.Case``)."""
    trainer = Trainer.from_command_line(case.description, model=case.name)
    return trainer.fit(waveglow_case(trainer.config, trainer.data_dir, builder=case.build_model))
