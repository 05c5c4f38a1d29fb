"""LJSpeech-1.1: ``metadata.csv`` and its 22050 Hz wavs."""

import os
import wave

from flagperf_host.checks.common import entries, need, some, spread


LJSPEECH_RATE = 22050


def check(root):
    """LJSpeech-1.1 (the folder the archive unpacks to): ``metadata.csv``, one clip a line as
    ``<id>|<transcription>|<normalized transcription>`` (UTF-8, no quoting; neither text empty:
    the speech cases read the normalized one), and
    ``wavs/<id>.wav``: RIFF/WAVE PCM, 22050 Hz, mono, 16-bit. Every line must have its wav;
    the headers of a sample of HEADER_SAMPLE wavs are read.
    """
    problems = []
    have_csv = need(root, "metadata.csv", problems)
    have_wavs = need(root, "wavs", problems, folder=True)
    wavs = set(entries(os.path.join(root, "wavs"))) if have_wavs else set()
    ids = []
    if have_csv:
        malformed = []
        with open(os.path.join(root, "metadata.csv"), "rb") as handle:
            for number, raw in enumerate(handle, 1):
                line = raw.decode("utf-8", "replace").rstrip("\r\n")
                fields = line.split("|")
                if len(fields) != 3 or not fields[0] or not fields[1].strip() \
                        or not fields[2].strip():
                    malformed.append(number)
                else:
                    ids.append(fields[0])
        if malformed:
            problems.append("metadata.csv: %d line(s) are not id|text|normalized text: line %s"
                            % (len(malformed), some(malformed)))
        elif not ids:
            problems.append("metadata.csv: no clips")
    if have_wavs and ids:
        missing = [i for i in ids if i + ".wav" not in wavs]
        if missing:
            problems.append("wavs/: %d clip(s) of metadata.csv have no wav: %s" % (
                len(missing), some(missing)))
        wrong = []
        for name in spread(sorted(i + ".wav" for i in ids if i + ".wav" in wavs)):
            try:
                reader = wave.open(os.path.join(root, "wavs", name), "rb")
                try:
                    got = (reader.getframerate(), reader.getnchannels(), reader.getsampwidth())
                finally:
                    reader.close()
            except (wave.Error, EOFError) as err:
                wrong.append("%s (%s)" % (name, err or "truncated"))
                continue
            if got != (LJSPEECH_RATE, 1, 2):
                wrong.append("%s (%d Hz, %d channel(s), %d-bit)" % (
                    name, got[0], got[1], 8 * got[2]))
        if wrong:
            problems.append("wavs/: not %d Hz mono 16-bit PCM: %s" % (LJSPEECH_RATE, some(wrong)))
    return problems
