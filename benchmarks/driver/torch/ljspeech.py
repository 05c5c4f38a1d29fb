"""LJSpeech-1.1 for the speech cases (tacotron2, waveglow): the clips, their audio and their mel
spectrograms, computed as NVIDIA's Tacotron 2 and WaveGlow recipes (which FlagPerf copies)
compute them.

The data set is the ``LJSpeech-1.1/`` folder (format ``ljspeech``): ``metadata.csv`` (one
``<id>|<text>|<normalized text>`` a line) and ``wavs/<id>.wav`` (22050 Hz, mono, 16-bit PCM).

Split (:func:`recipe_split`): NVIDIA's recipe file lists, the same for both recipes (Tacotron 2's
``ljs_mel_text_{val,test}_filelist.txt`` = WaveGlow's ``ljs_audio_text_{val,test}_filelist.txt``),
kept as their clip ids in ``ljspeech_lists/`` beside this module: 100 validation clips
(``ljs_val_clips.txt``), 500 test clips left out (``ljs_test_clips.txt``), the other 12 500
trained (the recipes' training lists).

Mel spectrograms (NVIDIA DeepLearningExamples ``tacotron2_common/layers.py: TacotronSTFT``):
the magnitude STFT (``filter_length`` 1024, ``hop_length`` 256, ``win_length`` 1024, Hann window,
reflect padding of ``filter_length / 2`` at both ends), projected on ``n_mel_channels`` 80
Slaney mel filters from ``mel_fmin`` 0 to ``mel_fmax`` 8000 Hz (librosa's default filters,
which torchaudio's ``MelSpectrogram`` gives with ``norm="slaney", mel_scale="slaney"``), then
``log(clamp(x, min=1e-5))`` (``dynamic_range_compression``). Audio is the 16-bit samples over
``max_wav_value`` 32768, in [-1, 1).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import torch

from driver.case_io import setting

#: The recipes' STFT and mel settings (config keys and values of upstream's ``_base.py``).
MEL_DEFAULTS = {"sampling_rate": 22050, "filter_length": 1024, "hop_length": 256,
                "win_length": 1024, "n_mel_channels": 80, "mel_fmin": 0.0, "mel_fmax": 8000.0,
                "max_wav_value": 32768.0}

#: The recipes' clip lists (``validation_files``, ``excluded_files`` name files here).
LISTS_DIR = Path(__file__).resolve().parent / "ljspeech_lists"


@dataclass(frozen=True)
class Clip:
    """One line of ``metadata.csv``: the clip's id, its text and its normalized text."""

    clip_id: str
    text: str
    normalized: str


def read_metadata(root: Path) -> list[Clip]:
    """The clips of ``<root>/metadata.csv`` in file order.

    Raises:
        FileNotFoundError: no ``metadata.csv``.
        ValueError: a line without three ``|``-separated fields (the message names the line).
    """
    path = Path(root) / "metadata.csv"
    clips = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            fields = line.rstrip("\r\n").split("|")
            if len(fields) != 3:
                raise ValueError(f"{path}:{number}: expected <id>|<text>|<normalized text>")
            clips.append(Clip(*fields))
    return clips


def split_clips(clips: list[Clip], held_out: list[str] | tuple[str, ...]
                ) -> tuple[list[Clip], list[Clip]]:
    """``(training clips, held-out clips)``: the clips whose ids are in ``held_out`` (in its
    order) and the rest (in file order), as the recipes' file lists split LJSpeech.

    Raises:
        ValueError: an id of ``held_out`` is not in ``clips``.
    """
    by_id = {clip.clip_id: clip for clip in clips}
    missing = [clip_id for clip_id in held_out if clip_id not in by_id]
    if missing:
        raise ValueError(f"held-out clips not in metadata.csv: {', '.join(missing[:5])}")
    chosen = set(held_out)
    return [c for c in clips if c.clip_id not in chosen], [by_id[i] for i in held_out]


def read_clip_list(path: Path) -> list[str]:
    """The clip ids of a list such as ``ljspeech_lists/ljs_val_clips.txt``, in file order: one id
    a line; blank lines and ``#`` lines are skipped.

    Raises:
        FileNotFoundError: no such list.
    """
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def recipe_split(config: Mapping[str, Any], root: Path) -> tuple[list[Clip], list[Clip]]:
    """``(training clips, validation clips)`` of ``<root>/metadata.csv`` by the config:

    * validation: the ids of ``validation_files`` (a list name in ``ljspeech_lists/``, e.g.
      ``ljs_val_clips.txt``), in its order, or with it null the ids of ``val_clips``;
    * training: every other clip, in file order, but those of ``excluded_files`` (a list name in
      ``ljspeech_lists/``, e.g. ``ljs_test_clips.txt``; null: none left out).

    Raises:
        ValueError: neither ``validation_files`` nor ``val_clips`` is set; a validation clip is
            not in ``metadata.csv``; an excluded clip is not in it or is also a validation clip.
        FileNotFoundError: no ``metadata.csv``, or no list of the name ``validation_files`` or
            ``excluded_files`` gives.
    """
    if config.get("validation_files"):
        held_out = read_clip_list(LISTS_DIR / config["validation_files"])
    elif config.get("val_clips"):
        held_out = [str(clip) for clip in config["val_clips"]]
    else:
        raise ValueError("config: set validation_files or val_clips")
    train, val = split_clips(read_metadata(root), held_out)
    if config.get("excluded_files"):
        excluded = set(read_clip_list(LISTS_DIR / config["excluded_files"]))
        missing = excluded - {clip.clip_id for clip in train}
        if missing:
            raise ValueError(f"config excluded_files: {len(missing)} clip(s) not in "
                             f"{Path(root) / 'metadata.csv'} or also validated, "
                             f"e.g. {min(missing)}")
        train = [clip for clip in train if clip.clip_id not in excluded]
    return train, val


def load_audio(root: Path, clip_id: str, config: Mapping[str, Any] | None = None
               ) -> torch.Tensor:
    """``wavs/<clip_id>.wav`` as float32 samples ``[samples]`` in [-1, 1): the int16 samples
    over ``max_wav_value``.

    Raises:
        FileNotFoundError: no such wav.
        ValueError: the wav's rate is not ``sampling_rate``, or it is not mono 16-bit PCM.
    """
    import soundfile

    config = config or {}
    path = Path(root) / "wavs" / f"{clip_id}.wav"
    rate = int(setting(config, "sampling_rate", MEL_DEFAULTS["sampling_rate"]))
    info = soundfile.info(str(path))
    if info.samplerate != rate or info.channels != 1 or info.subtype != "PCM_16":
        raise ValueError(f"{path}: {info.samplerate} Hz, {info.channels} channels, "
                         f"{info.subtype}; expected {rate} Hz mono PCM_16")
    pcm, _ = soundfile.read(str(path), dtype="int16")
    scale = float(setting(config, "max_wav_value", MEL_DEFAULTS["max_wav_value"]))
    return torch.from_numpy(pcm).float() / scale


class MelSpectrogram(torch.nn.Module):
    """Audio ``[..., samples]`` in [-1, 1] -> log mel spectrogram ``[..., n_mel_channels,
    frames]``, ``frames = samples // hop_length + 1`` (see the module docstring).

    Config keys: those of ``MEL_DEFAULTS`` (missing or null: the recipes' values).
    """

    def __init__(self, config: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        import torchaudio

        config = config or {}
        value = {key: setting(config, key, default) for key, default in MEL_DEFAULTS.items()}
        self.hop_length = int(value["hop_length"])
        self.mel = torchaudio.transforms.MelSpectrogram(
            sample_rate=int(value["sampling_rate"]), n_fft=int(value["filter_length"]),
            win_length=int(value["win_length"]), hop_length=self.hop_length,
            f_min=float(value["mel_fmin"]), f_max=float(value["mel_fmax"]),
            n_mels=int(value["n_mel_channels"]), power=1.0, center=True, pad_mode="reflect",
            norm="slaney", mel_scale="slaney")

    def forward(self, audio: torch.Tensor) -> torch.Tensor:
        return torch.log(torch.clamp(self.mel(audio), min=1e-5))
