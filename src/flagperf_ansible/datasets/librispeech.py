"""Format ``librispeech``: LibriSpeech ASR corpus (the ``LibriSpeech/`` folder).

Real layout: split folders (``train-clean-100``, ``dev-clean``, ...), each
``<speaker>/<chapter>/<speaker>-<chapter>-<utt:04d>.flac`` (16 kHz, mono, 16-bit FLAC) with
``<speaker>-<chapter>.trans.txt`` (one ``<speaker>-<chapter>-<utt> UPPER CASE TRANSCRIPT`` a
line); what the checker accepts: ``layout_check.check_librispeech``.

Tiny data: train-clean-100 (two speakers, one chapter each), dev-clean and test-clean (one
speaker each), three utterances per chapter: the Zen of Python's lines (PEP 20) in LibriSpeech's
transcript style (upper case letters and apostrophes), synthesised by ``_speech.synthesize`` at
each speaker's pitch and written as FLAC by soundfile (libsndfile).
"""

from __future__ import annotations

import re
from functools import partial
from pathlib import Path

from flagperf_ansible.datasets import layout_check
from flagperf_ansible.datasets.registry import Format

NAME = "librispeech"
RATE = layout_check.LIBRISPEECH_RATE
# split -> [(speaker, chapter, pitch in Hz)]; three utterances per chapter.
SPEAKERS = {"train-clean-100": [(1001, 101, 110.0), (1002, 102, 200.0)],
            "dev-clean": [(2001, 201, 130.0)],
            "test-clean": [(3001, 301, 180.0)]}
UTTERANCES_PER_CHAPTER = 3


def transcript(text: str) -> str:
    """``text`` as LibriSpeech writes transcripts: upper case words and apostrophes."""
    return " ".join(re.sub(r"[^A-Z' ]+", " ", text.upper()).split())


def generate(target: Path) -> dict[str, int]:
    """Write the tiny LibriSpeech under ``target``; returns utterances per split.

    Raises:
        OSError: ``target`` cannot be written.
    """
    import soundfile

    from flagperf_ansible.datasets._corpus import zen_lines
    from flagperf_ansible.datasets._speech import synthesize, to_pcm16

    lines = iter(zen_lines())
    counts = {}
    for split, speakers in SPEAKERS.items():
        counts[split] = 0
        for speaker, chapter, pitch in speakers:
            folder = target / split / str(speaker) / str(chapter)
            folder.mkdir(parents=True, exist_ok=True)
            said = []
            for utterance in range(UTTERANCES_PER_CHAPTER):
                utterance_id = f"{speaker}-{chapter}-{utterance:04d}"
                words = transcript(next(lines))
                soundfile.write(folder / f"{utterance_id}.flac",
                                to_pcm16(synthesize(words.lower(), RATE, pitch)), RATE,
                                format="FLAC", subtype="PCM_16")
                said.append(f"{utterance_id} {words}\n")
            (folder / f"{speaker}-{chapter}.trans.txt").write_text("".join(said), encoding="utf-8")
            counts[split] += len(said)
    return counts


FORMAT = Format(
    name=NAME,
    description="LibriSpeech: <split>/<speaker>/<chapter>/*.flac 16 kHz + <speaker>-<chapter>"
                ".trans.txt (tiny: 12 synthesised utterances, 3 splits)",
    check=partial(layout_check.check, NAME),
    generate=generate,
)
