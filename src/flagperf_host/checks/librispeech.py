"""LibriSpeech: the split folders of speakers and chapters, their transcripts and flac files,
and fairseq file lists beside them."""

import os

from flagperf_host.checks.common import entries, some, spread, subfolders
from flagperf_host.readers.flac import flac_streaminfo


LIBRISPEECH_SPLITS = ("train-clean-100", "train-clean-360", "train-other-500",
                      "dev-clean", "dev-other", "test-clean", "test-other")
LIBRISPEECH_RATE = 16000


def check(root):
    """LibriSpeech (the ``LibriSpeech/`` folder the archives unpack to): one or more of the
    split folders (LIBRISPEECH_SPLITS), each ``<speaker>/<chapter>/`` (numbers) holding
    ``<speaker>-<chapter>.trans.txt`` (one ``<speaker>-<chapter>-<utt> TRANSCRIPT`` a line) and
    ``<speaker>-<chapter>-<utt>.flac`` (16 kHz, mono, 16-bit). Every transcript line must have
    its flac and every flac its line; the STREAMINFO of a sample of HEADER_SAMPLE flac files
    per split is read. File lists ``<name>.tsv`` beside the splits (fairseq manifests, see
    :func:`librispeech_manifest_problems`) are checked when present.
    """
    problems = []
    splits = [s for s in LIBRISPEECH_SPLITS if os.path.isdir(os.path.join(root, s))]
    if not splits:
        return ["no split folder (%s)" % ", ".join(LIBRISPEECH_SPLITS)]
    for split in splits:
        folder = os.path.join(root, split)
        chapters, flacs, odd = [], [], []
        for speaker in subfolders(folder):
            if not speaker.isdigit():
                odd.append(speaker)
                continue
            for chapter in subfolders(os.path.join(folder, speaker)):
                if chapter.isdigit():
                    chapters.append((speaker, chapter))
                else:
                    odd.append("%s/%s" % (speaker, chapter))
        if odd:
            problems.append("%s/: folders that are not <speaker>/<chapter> numbers: %s" % (
                split, some(odd)))
        if not chapters:
            problems.append("%s/: no <speaker>/<chapter>/ folders" % split)
            continue
        no_transcript, unmatched = [], []
        for speaker, chapter in chapters:
            where = os.path.join(folder, speaker, chapter)
            prefix = "%s-%s" % (speaker, chapter)
            names = set(entries(where))
            have = set(n[:-5] for n in names if n.endswith(".flac"))
            transcript = prefix + ".trans.txt"
            if transcript not in names:
                no_transcript.append("%s/%s/%s" % (speaker, chapter, transcript))
                continue
            said = set()
            with open(os.path.join(where, transcript), "rb") as handle:
                for raw in handle:
                    words = raw.decode("utf-8", "replace").split(None, 1)
                    if words:
                        said.add(words[0])
            for utterance in sorted(said.symmetric_difference(have)):
                unmatched.append(utterance + (" (no .flac)" if utterance in said else
                                              " (not in %s)" % transcript))
            if have:
                flacs.append(os.path.join(where, sorted(have)[0] + ".flac"))
        if no_transcript:
            problems.append("%s/: missing transcripts: %s" % (
                split, some(no_transcript)))
        if unmatched:
            problems.append("%s/: utterances without a transcript line or a flac: %s" % (
                split, some(unmatched)))
        wrong = []
        for path in spread(flacs):
            try:
                rate, channels, bits, _ = flac_streaminfo(path)
            except ValueError as err:
                wrong.append("%s (%s)" % (os.path.basename(path), err))
                continue
            if (rate, channels, bits) != (LIBRISPEECH_RATE, 1, 16):
                wrong.append("%s (%d Hz, %d channel(s), %d-bit)" % (
                    os.path.basename(path), rate, channels, bits))
        if wrong:
            problems.append("%s/: not %d Hz mono 16-bit FLAC: %s" % (
                split, LIBRISPEECH_RATE, some(wrong)))
    for name in entries(root):
        if name.endswith(".tsv") and os.path.isfile(os.path.join(root, name)):
            problems.extend(librispeech_manifest_problems(root, name))
    return problems


def librispeech_manifest_problems(root, name):
    """Problems of the file list ``root/name``, a fairseq audio manifest as NVIDIA
    DeepLearningExamples' ``generate_filelists.sh`` writes it (FlagPerf wav2vec2 reads them):
    line 1 the audio root folder, then ``<path under it>\t<samples>`` a line, at least one.
    The listed files themselves are the splits' flac files, checked above."""
    with open(os.path.join(root, name), "rb") as handle:
        lines = handle.read().decode("utf-8", "replace").splitlines()
    if not lines or not lines[0].strip():
        return ["%s: line 1 is not the audio root folder" % name]
    bad, listed = [], []
    for number, line in enumerate(lines[1:], start=2):
        fields = line.split("\t")
        if len(fields) < 2 or not fields[1].strip().isdigit():
            bad.append(number)
        else:
            listed.append(fields[0])
    problems = []
    if bad:
        problems.append("%s: %d line(s) are not <path>\\t<samples>: line %s" % (
            name, len(bad), some(bad)))
    if not listed and not bad:
        problems.append("%s: lists no audio file" % name)
    return problems
