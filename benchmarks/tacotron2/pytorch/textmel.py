"""Text and mel spectrogram pairs of LJSpeech-1.1 as NVIDIA's Tacotron 2 recipe feeds them
(FlagPerf ``model/data/data_function.py``: ``TextMelLoader``, ``TextMelCollate``), and the
recipe's learning-rate annealing (``train/trainer.py: adjust_learning_rate``).

Clips: ``metadata.csv`` of the ``LJSpeech-1.1/`` folder, split by
``driver.torch.ljspeech.recipe_split`` (shared with waveglow). Validation: ``validation_files``,
a list in ``driver/torch/ljspeech_lists/`` (``ljs_val_clips.txt``: the 100 clips of the recipe's
``ljs_mel_text_val_filelist.txt``), or with it null the ids of ``val_clips``. Training: every
other clip but those of ``excluded_files`` (``ljs_test_clips.txt``: the recipe's 500 test
clips; its training list holds the remaining 12 500).

Text: the clip's normalized transcription (the third field of ``metadata.csv``, the text of
the recipe's file lists) through ``text_cleaners`` to symbol ids (``tts_text``).

Mel spectrograms: upstream reads ``LJSpeech-1.1/mels/<id>.pt``, written beforehand by the
recipe's ``prepare_mels.sh`` from the wavs with the same STFT (``load_mel_from_disk`` true).
The ``ljspeech`` data format has no ``mels/``: with ``load_mel_from_disk`` false (the standard
configuration here) each clip's mel is computed from its wav when the clip is loaded
(``driver.torch.ljspeech.MelSpectrogram``, the recipe's STFT; NVIDIA's loader does the same
with the key false); true reads ``<data_dir>/mels/<id>.pt`` as upstream.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import torch

from driver.case_io import setting
from driver.torch.ljspeech import MelSpectrogram, load_audio

from .tts_text import text_to_sequence

#: A batch: ``(text [B, T_in] int64 zero-padded, text_lengths [B] descending, mel [B, M,
#: T_out] zero-padded, gate [B, T_out] (1 from each clip's last frame on), mel_lengths [B])``.
Batch = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


class TextMelDataset(torch.utils.data.Dataset):
    """Item ``i``: ``(text ids [T_in] int64, log mel [n_mel_channels, frames] float32)`` of
    ``clips[i]`` (see the module docstring).

    Raises (on access):
        FileNotFoundError: a clip's wav (or, with ``load_mel_from_disk``, its ``.pt``) is missing.
        ValueError: a wav of another rate or format, or a stored mel of another mel count.
    """

    def __init__(self, root: Path, clips, config: Mapping[str, Any]) -> None:
        self.root = Path(root)
        self.config = config
        cleaners = list(setting(config, "text_cleaners", ["english_cleaners"]))
        self.clip_ids = [clip.clip_id for clip in clips]
        self.texts = [torch.tensor(text_to_sequence(clip.normalized, cleaners), dtype=torch.long)
                      for clip in clips]
        self.from_disk = bool(setting(config, "load_mel_from_disk", False))
        self.n_mel_channels = int(setting(config, "n_mel_channels", 80))
        self.mel = None if self.from_disk else MelSpectrogram(config)

    def __len__(self) -> int:
        return len(self.clip_ids)

    def _mel(self, clip_id: str) -> torch.Tensor:
        if not self.from_disk:
            with torch.no_grad():
                return self.mel(load_audio(self.root, clip_id, self.config))
        path = self.root / "mels" / f"{clip_id}.pt"
        mel = torch.load(path, map_location="cpu", weights_only=True)
        if not isinstance(mel, torch.Tensor) or mel.dim() != 2 or len(mel) != self.n_mel_channels:
            raise ValueError(f"{path}: expected a tensor [{self.n_mel_channels}, frames]")
        return mel.float()

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.texts[index], self._mel(self.clip_ids[index])


def collate(items: list[tuple[torch.Tensor, torch.Tensor]]) -> Batch:
    """NVIDIA's ``TextMelCollate`` (one frame per step): items sorted by text length, longest
    first (the encoder packs the sequences), texts and mels zero-padded to the longest, gate
    targets 1 from each clip's last frame to the end of the padding."""
    order = sorted(range(len(items)), key=lambda i: len(items[i][0]), reverse=True)
    text_lengths = torch.tensor([len(items[i][0]) for i in order], dtype=torch.long)
    mel_lengths = torch.tensor([items[i][1].shape[1] for i in order], dtype=torch.long)
    text = torch.zeros(len(items), int(text_lengths[0]), dtype=torch.long)
    mel = torch.zeros(len(items), items[0][1].shape[0], int(mel_lengths.max()))
    gate = torch.zeros(len(items), int(mel_lengths.max()))
    for row, i in enumerate(order):
        text[row, :len(items[i][0])] = items[i][0]
        frames = items[i][1].shape[1]
        mel[row, :, :frames] = items[i][1]
        gate[row, frames - 1:] = 1.0
    return text, text_lengths, mel, gate, mel_lengths


def anneal_factor(epoch: int, anneal_steps, anneal_factor: float) -> float:
    """The recipe's learning-rate factor in ``epoch`` (counted from 1): ``p`` = the number of
    ``anneal_steps`` reached (``epoch >= step``); with factor 0.3, ``0.1 ** (p // 2)`` times 0.3
    when ``p`` is odd (x0.3, x0.1, x0.03, ...), else ``factor ** p``
    (upstream ``adjust_learning_rate``)."""
    p = sum(1 for step in anneal_steps or () if epoch >= int(step))
    if anneal_factor == 0.3:
        return 0.1 ** (p // 2) * (0.3 if p % 2 else 1.0)
    return anneal_factor ** p


def anneal_scheduler(optimizer: torch.optim.Optimizer, steps_per_epoch: float,
                     config: Mapping[str, Any]) -> torch.optim.lr_scheduler.LambdaLR:
    """:func:`anneal_factor` of the epoch each update falls in (updates counted from 0, epoch
    ``update // steps_per_epoch + 1``), stepped once per update."""
    steps = setting(config, "lr_anneal_steps", [])
    factor = float(setting(config, "lr_anneal_factor", 0.3))
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda update: anneal_factor(int(update // steps_per_epoch) + 1, steps, factor))
