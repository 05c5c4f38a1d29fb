"""GPT tokens in Megatron's indexed format with GPT-2's BPE files, as Megatron-LM's
``tools/preprocess_data.py`` writes them and its GPT cases read them."""

import json
import os
import struct

from flagperf_host.checks.common import head, need
from flagperf_host.readers.megatron_index import megatron_index


# preprocess_data.py's --output-prefix gpt with --json-keys text: <prefix>_text_document.
MEGATRON_PREFIX = "gpt_text_document"
MEGATRON_VOCAB = "gpt2-vocab.json"
MEGATRON_MERGES = "gpt2-merges.txt"
MEGATRON_EOD = "<|endoftext|>"
# Vocabulary files read whole when smaller than this (GPT-2's 50257 tokens: about 1 MB).
MEGATRON_VOCAB_READ_UNDER = 16 << 20


def check(root):
    """Megatron's indexed data set ``gpt_text_document.{bin,idx}`` (the index's header, its
    size against its counts, and the ``.bin`` size against the sum of its sequence lengths:
    ``flagperf_host.readers.megatron_index``) beside GPT-2's BPE files: ``gpt2-vocab.json``, a
    JSON object of token -> id with ``<|endoftext|>``, and ``gpt2-merges.txt``, which starts
    with its ``#version`` line or a merge pair.
    """
    problems = []
    idx, data = MEGATRON_PREFIX + ".idx", MEGATRON_PREFIX + ".bin"
    have_idx = need(root, idx, problems)
    if need(root, data, problems) and have_idx:
        try:
            itemsize, sequences, _, tokens = megatron_index(os.path.join(root, idx))
        except (ValueError, struct.error) as err:
            problems.append("%s: %s" % (idx, err))
        else:
            size = os.path.getsize(os.path.join(root, data))
            if size != tokens * itemsize:
                problems.append("%s: %d bytes, the index's %d sequences hold %d tokens of %d "
                                "bytes (%d)" % (data, size, sequences, tokens, itemsize,
                                                tokens * itemsize))
    if need(root, MEGATRON_VOCAB, problems):
        problem = _vocab_problem(os.path.join(root, MEGATRON_VOCAB))
        if problem:
            problems.append("%s: %s" % (MEGATRON_VOCAB, problem))
    if need(root, MEGATRON_MERGES, problems):
        first = head(os.path.join(root, MEGATRON_MERGES), 1 << 12).split(b"\n", 1)[0]
        if not first.strip():
            problems.append("%s: empty first line" % MEGATRON_MERGES)
        elif not (first.startswith(b"#version") or len(first.split()) == 2):
            problems.append("%s: starts with %r, not '#version' or a merge pair" % (
                MEGATRON_MERGES, first[:40]))
    return problems


def _vocab_problem(path):
    if os.path.getsize(path) >= MEGATRON_VOCAB_READ_UNDER:
        return None
    try:
        with open(path, encoding="utf-8") as handle:
            vocab = json.load(handle)
    except (ValueError, UnicodeDecodeError) as err:
        return "not JSON (%s)" % err
    if not isinstance(vocab, dict):
        return "not an object of token -> id"
    if MEGATRON_EOD not in vocab:
        return "no %s token (the end-of-document id)" % MEGATRON_EOD
    return None
