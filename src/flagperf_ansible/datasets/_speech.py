"""Speech-like audio synthesised from text, for the speech data sets' tiny data.

Not speech, but with speech's structure, so that feature extraction, silence trimming and
length-based batching see what they see in real clips: a voiced source (harmonics of a falling
pitch contour) shaped by vowel formants for vowels and voiced consonants, filtered noise for
unvoiced consonants, short pauses between words and longer ones at punctuation, 0.1 s of
silence at both ends. Formant frequencies: Peterson & Barney (1952), adult male averages.
"""

from __future__ import annotations

import zlib

import numpy as np

# (F1, F2) in Hz of vowels; voiced consonants take a neutral, weaker (F1, F2).
VOWEL_FORMANTS = {"a": (730, 1090), "e": (530, 1840), "i": (270, 2290), "o": (570, 840),
                  "u": (300, 870), "y": (270, 2290)}
VOICED = frozenset("bdgjlmnrvwz")
UNVOICED = frozenset("cfhkpqstx")
# Seconds per vowel, consonant, word gap, clause pause, sentence pause.
VOWEL_S, CONSONANT_S, GAP_S, CLAUSE_S, SENTENCE_S, EDGE_S = 0.075, 0.05, 0.05, 0.15, 0.3, 0.1


def _segments(text: str) -> list[tuple[str, float, tuple[int, int] | None]]:
    """``(kind, seconds, formants)`` per sound: kind ``voiced``, ``noise`` or ``silence``."""
    segments = [("silence", EDGE_S, None)]
    for char in text.lower():
        if char in VOWEL_FORMANTS:
            segments.append(("voiced", VOWEL_S, VOWEL_FORMANTS[char]))
        elif char in VOICED:
            segments.append(("voiced", CONSONANT_S, (400, 1500)))
        elif char in UNVOICED:
            segments.append(("noise", CONSONANT_S, None))
        elif char in ",;:-":
            segments.append(("silence", CLAUSE_S, None))
        elif char in ".!?":
            segments.append(("silence", SENTENCE_S, None))
        elif char.isspace():
            segments.append(("silence", GAP_S, None))
    segments.append(("silence", EDGE_S, None))
    return segments


def synthesize(text: str, rate: int, pitch_hz: float = 120.0) -> np.ndarray:
    """Speech-like audio for ``text``: float32 samples in [-0.5, 0.5], shape ``[samples]``.

    Deterministic: the noise is seeded from ``text``. ``pitch_hz`` is the starting pitch (the
    contour falls by a fifth of it over the clip, as declarative sentences do).
    """
    rng = np.random.default_rng(zlib.crc32(text.encode("utf-8")))
    segments = _segments(text)
    lengths = [int(round(seconds * rate)) for _, seconds, _ in segments]
    total = sum(lengths)
    t = np.arange(total) / rate
    pitch = pitch_hz * (1.0 - 0.2 * t / max(t[-1], 1e-9)) * (1 + 0.01 * np.sin(2 * np.pi * 5 * t))
    phase = 2 * np.pi * np.cumsum(pitch) / rate
    harmonics = np.arange(1, int(0.45 * rate / pitch_hz))
    out = np.zeros(total, dtype=np.float64)
    start = 0
    for (kind, _, formants), length in zip(segments, lengths):
        stop = start + length
        if kind == "voiced":
            f0 = float(pitch[start:stop].mean())
            freq = harmonics * f0
            resonance = sum(1.0 / (1.0 + ((freq - f) / 80.0) ** 2) for f in formants)
            weight = resonance / np.sqrt(harmonics)  # a glottal source falls with frequency
            weight[freq >= 0.45 * rate] = 0.0
            piece = np.sin(np.outer(phase[start:stop], harmonics)) @ weight
        elif kind == "noise":
            piece = np.diff(rng.standard_normal(length + 1)) * 0.3  # first difference: a hiss
        else:
            piece = np.zeros(length)
        ramp = min(length // 2, int(0.01 * rate))
        if ramp:  # 10 ms raised-cosine edges: no clicks between sounds
            edge = 0.5 - 0.5 * np.cos(np.linspace(0, np.pi, ramp))
            piece[:ramp] *= edge
            piece[length - ramp:] *= edge[::-1]
        out[start:stop] = piece
        start = stop
    out += rng.standard_normal(total) * 1e-4  # a recording's noise floor
    return (0.5 * out / np.abs(out).max()).astype(np.float32)


def to_pcm16(samples: np.ndarray) -> np.ndarray:
    """Float samples in [-1, 1] as int16 PCM."""
    return np.round(np.clip(samples, -1.0, 1.0) * 32767).astype("<i2")
