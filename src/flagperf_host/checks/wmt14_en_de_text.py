"""WMT14 English-German as line-aligned text."""

import os

from flagperf_host.checks.common import count_lines, need, text_problem


WMT14_SPLITS, WMT14_LANGS = ("train", "valid", "test"), ("en", "de")
# Line counts of a text pair are compared when both files are smaller than this (valid and
# test always; the 4.5 M-line train pair is only checked for presence and encoding).
COUNT_LINES_UNDER = 64 << 20


def check(root):
    """WMT14 English-German as text, one sentence a line, the two sides line-aligned:
    ``{train,valid,test}.{en,de}`` (what fairseq's ``prepare-wmt14en2de.sh`` writes: Moses
    tokens, optionally BPE'd). Each file must be non-empty UTF-8 (its first 64 KiB is read);
    the line counts of a pair must agree where both files are under COUNT_LINES_UNDER bytes.
    """
    problems = []
    for split in WMT14_SPLITS:
        paths = []
        for lang in WMT14_LANGS:
            name = "%s.%s" % (split, lang)
            if not need(root, name, problems):
                continue
            problem = text_problem(root, name)
            if problem:
                problems.append(problem)
                continue
            paths.append(os.path.join(root, name))
        if len(paths) == 2 and all(os.path.getsize(p) < COUNT_LINES_UNDER for p in paths):
            counts = [count_lines(p) for p in paths]
            if counts[0] != counts[1]:
                problems.append("%s.en has %d lines, %s.de %d: not line-aligned" % (
                    split, counts[0], split, counts[1]))
    return problems
