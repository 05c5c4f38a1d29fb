"""Format ``librispeech``: LibriSpeech ASR corpus (the ``LibriSpeech/`` folder).

Real layout: split folders (``train-clean-100``, ``dev-clean``, ...), each
``<speaker>/<chapter>/<speaker>-<chapter>-<utt:04d>.flac`` (16 kHz, mono, 16-bit FLAC) with
``<speaker>-<chapter>.trans.txt`` (one ``<speaker>-<chapter>-<utt> UPPER CASE TRANSCRIPT`` a
line); what the checker accepts: ``flagperf_host.checks.librispeech.check``.

Tiny data: train-clean-100 (two speakers, one chapter each), dev-clean and test-clean (one
speaker each), three utterances per chapter: the Zen of Python's lines (PEP 20) in LibriSpeech's
transcript style (upper case letters and apostrophes), synthesised by ``_speech.synthesize`` at
each speaker's pitch and written as FLAC by soundfile (libsndfile).

File lists: ``<split>.tsv`` beside the split folders, as NVIDIA DeepLearningExamples'
``scripts/generate_filelists.sh`` (``utils/generate_filelist.py``, the fairseq manifest format
FlagPerf's wav2vec2 reads) writes them for each split: line 1 the split folder, then
``<speaker>/<chapter>/<utterance>.flac<TAB><samples>`` a line, in path order. The real script
writes the folder's absolute path; here it is the split's name, relative to the manifest's own
folder (as the wav2vec2 case and the checker read a relative root), so that the tiny data is
the same bytes wherever it is written and stays valid when copied. The real
script also writes ``train-full-960.tsv`` (the three training splits combined) and ``.wrd`` /
``.ltr`` label lists for fine-tuning; the tiny data has one training split and no fine-tuning
case, so neither is written.
"""

from __future__ import annotations

import os
import re
from functools import partial
from pathlib import Path

from flagperf_ansible.datasets.registry import Format
from flagperf_host import data_check
from flagperf_host.checks.librispeech import LIBRISPEECH_RATE
from flagperf_host.readers.flac import flac_streaminfo

NAME = "librispeech"
RATE = LIBRISPEECH_RATE
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
        write_manifest(target / split, target / f"{split}.tsv")
    return counts


def write_manifest(split_dir: Path, manifest: Path) -> int:
    """Write the fairseq manifest of the flac files under ``split_dir`` to ``manifest`` (see the
    module docstring); returns the number of utterances.

    Raises:
        OSError: a flac cannot be read or ``manifest`` cannot be written.
    """
    root = split_dir.resolve()
    lines = [f"{os.path.relpath(root, manifest.parent.resolve())}\n"]
    for path in sorted(root.rglob("*.flac")):
        _, _, _, samples = flac_streaminfo(str(path))
        lines.append(f"{path.relative_to(root).as_posix()}\t{samples}\n")
    manifest.write_text("".join(lines), encoding="utf-8")
    return len(lines) - 1


FORMAT = Format(
    name=NAME,
    description="LibriSpeech: <split>/<speaker>/<chapter>/*.flac 16 kHz + <speaker>-<chapter>"
                ".trans.txt, <split>.tsv file lists (tiny: 12 synthesised utterances, 3 splits)",
    check=partial(data_check.check, NAME),
    generate=generate,
)
