"""CPM-1 fine-tuning text and its tokenizer folder, as FlagPerf's cpm case reads them."""

import json
import os

from flagperf_host.checks.common import need, subfolders, text_problem


CPM_SPLITS = ("train.txt", "valid.txt")
CPM_TOKENIZER_FILES = ("vocab.json", "chinese_vocab.model")
CPM_SPECIAL_PIECES = ("<pad>", "<eod>")
# vocab.json files read whole when smaller than this (CPM's 30000 pieces: about 1 MB).
CPM_VOCAB_READ_UNDER = 16 << 20


def check(root):
    """CPM-1 fine-tuning text as FlagPerf's cpm case reads it: ``train.txt`` and ``valid.txt``
    (non-empty UTF-8, one document a line; the first 64 KiB is read) and at least one tokenizer
    folder (a subfolder with ``vocab.json`` and ``chinese_vocab.model``, as FlagPerf's
    ``bpe_3w_new/``), whose ``vocab.json`` is a JSON object of piece -> id that has ``<pad>``
    and ``<eod>`` and whose ``chinese_vocab.model`` is not empty.
    """
    problems = []
    for name in CPM_SPLITS:
        if not need(root, name, problems):
            continue
        problem = text_problem(root, name)
        if problem:
            problems.append(problem)
    folders = [name for name in subfolders(root)
               if all(os.path.isfile(os.path.join(root, name, f)) for f in CPM_TOKENIZER_FILES)]
    if not folders:
        problems.append("no tokenizer folder (a subfolder with %s, as FlagPerf's bpe_3w_new/)"
                        % " and ".join(CPM_TOKENIZER_FILES))
    for name in folders:
        vocab = os.path.join(root, name, "vocab.json")
        if os.path.getsize(os.path.join(root, name, "chinese_vocab.model")) == 0:
            problems.append("%s/chinese_vocab.model: empty" % name)
        if os.path.getsize(vocab) >= CPM_VOCAB_READ_UNDER:
            continue
        try:
            with open(vocab, encoding="utf-8") as handle:
                pieces = json.load(handle)
        except (ValueError, UnicodeDecodeError) as err:
            problems.append("%s/vocab.json: not JSON (%s)" % (name, err))
            continue
        if not isinstance(pieces, dict):
            problems.append("%s/vocab.json: not an object of piece -> id" % name)
            continue
        missing = [piece for piece in CPM_SPECIAL_PIECES if piece not in pieces]
        if missing:
            problems.append("%s/vocab.json: no %s piece" % (name, ", ".join(missing)))
    return problems
