"""WMT14 English-German binarized by fairseq's preprocess: dictionaries, index and data files,
and the test set's untokenized references."""

import os
import struct

from flagperf_host.checks.common import count_lines, need, some, text_problem
from flagperf_host.checks.wmt14_en_de_text import WMT14_LANGS, WMT14_SPLITS
from flagperf_host.readers.fairseq_index import fairseq_index


# The untokenized German references of the test set that FlagPerf scores BLEU against.
WMT14_RAW_REFERENCE = "test.raw.de"


def check(root):
    """WMT14 English-German binarized by fairseq's preprocess (FlagPerf's transformer case
    reads NVIDIA's ``wmt14_en_de_joined_dict``): ``dict.en.txt`` and ``dict.de.txt`` (one
    ``<token> <count>`` a line, special symbols implicit), and for each of train, valid, test
    and each language ``<split>.en-de.<lang>.bin`` (token ids) with ``<split>.en-de.<lang>.idx``
    (TNTIDX or MMIDIDX header, offsets). Reads the first 100 lines of each dictionary and each
    index's header and last offsets; the .bin sizes must match them and the two languages of a
    split must have the same number of sentences. ``test.raw.de`` (the test set's untokenized
    German references) must be UTF-8 with one line per test sentence.
    """
    problems = []
    for lang in WMT14_LANGS:
        name = "dict.%s.txt" % lang
        if not need(root, name, problems):
            continue
        bad, lines = [], 0
        with open(os.path.join(root, name), "rb") as handle:
            for number, raw in enumerate(handle, 1):
                if number > 100:
                    break
                lines += 1
                words = raw.decode("utf-8", "replace").rstrip("\r\n").split(" ")
                if words[-1] == "#fairseq:overwrite":
                    words = words[:-1]
                if len(words) != 2 or not words[0] or not words[1].isdigit():
                    bad.append(number)
        if bad:
            problems.append("%s: lines that are not '<token> <count>': %s" % (name, some(bad)))
        elif not lines:
            problems.append("%s: empty" % name)
    for split in WMT14_SPLITS:
        counts = {}
        for lang in WMT14_LANGS:
            stem = "%s.en-de.%s" % (split, lang)
            have_idx = need(root, stem + ".idx", problems)
            have_bin = need(root, stem + ".bin", problems)
            if not (have_idx and have_bin):
                continue
            try:
                counts[lang] = fairseq_index(os.path.join(root, stem + ".idx"),
                                             os.path.join(root, stem + ".bin"))
            except (OSError, ValueError, struct.error) as err:
                problems.append("%s.idx: %s" % (stem, err))
        if len(counts) == 2:
            if counts["en"][0] != counts["de"][0]:
                problems.append("%s: en is %s, de %s" % (split, counts["en"][0], counts["de"][0]))
            elif counts["en"][1] != counts["de"][1]:
                problems.append("%s: %d en sentences, %d de: not aligned" % (
                    split, counts["en"][1], counts["de"][1]))
        if split == "test" and need(root, WMT14_RAW_REFERENCE, problems):
            problems.extend(_raw_reference_problems(root, counts.get("de", (None, None))[1]))
    return problems


def _raw_reference_problems(root, sentences):
    problem = text_problem(root, WMT14_RAW_REFERENCE)
    if problem:
        return [problem]
    lines = count_lines(os.path.join(root, WMT14_RAW_REFERENCE))
    if sentences is not None and lines != sentences:
        return ["%s has %d lines, the test set %d sentences" % (
            WMT14_RAW_REFERENCE, lines, sentences)]
    return []
