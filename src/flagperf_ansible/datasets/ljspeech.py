"""Format ``ljspeech``: the LJ Speech Dataset 1.1 (the ``LJSpeech-1.1/`` folder).

Real layout: ``metadata.csv`` (13 100 lines ``LJ001-0001|<transcription>|<normalized
transcription>``, UTF-8, no quoting) and ``wavs/LJ001-0001.wav`` ... (22050 Hz, mono, 16-bit
PCM, 1-10 s); what the checker accepts: ``flagperf_host.checks.ljspeech.check``.

Tiny data: the 19 lines of the Zen of Python (PEP 20, from the interpreter's ``this``), one clip
each (``LJ001-0001`` ... ``LJ001-0019``), synthesised by ``_speech.synthesize``. The normalized
column drops the emphasis marks (LJSpeech's spells out numbers and abbreviations; the Zen has
none).
"""

from __future__ import annotations

import wave
from functools import partial
from pathlib import Path

from flagperf_ansible.datasets.registry import Format
from flagperf_host import data_check
from flagperf_host.checks.ljspeech import LJSPEECH_RATE

NAME = "ljspeech"
RATE = LJSPEECH_RATE


def write_wav(path: Path, pcm16, rate: int) -> None:
    """``pcm16`` (int16 samples, mono) as a RIFF/WAVE PCM file."""
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(pcm16.tobytes())


def generate(target: Path) -> dict[str, int]:
    """Write the tiny LJSpeech under ``target`` (``metadata.csv``, ``wavs/``); returns
    ``{"clips": 19}``.

    Raises:
        OSError: ``target`` cannot be written.
    """
    from flagperf_ansible.datasets._corpus import zen_lines
    from flagperf_ansible.datasets._speech import synthesize, to_pcm16

    (target / "wavs").mkdir(parents=True, exist_ok=True)
    lines = []
    for number, text in enumerate(zen_lines(), 1):
        clip = f"LJ001-{number:04d}"
        write_wav(target / "wavs" / f"{clip}.wav", to_pcm16(synthesize(text, RATE)), RATE)
        lines.append(f"{clip}|{text}|{text.replace('*', '')}\n")
    (target / "metadata.csv").write_text("".join(lines), encoding="utf-8")
    return {"clips": len(lines)}


FORMAT = Format(
    name=NAME,
    description="LJSpeech-1.1: metadata.csv (id|text|normalized) + wavs/<id>.wav 22050 Hz mono "
                "16-bit (tiny: 19 synthesised clips)",
    check=partial(data_check.check, NAME),
    generate=generate,
)
