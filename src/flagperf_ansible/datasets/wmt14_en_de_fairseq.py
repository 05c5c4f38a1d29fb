"""Format ``wmt14_en_de_fairseq``: WMT14 English-German binarized by fairseq's preprocess.

Real layout (FlagPerf's transformer case reads NVIDIA's ``wmt14_en_de_joined_dict``, made by
``preprocess.py --joined-dictionary``): ``dict.en.txt`` and ``dict.de.txt`` (the same joined
dictionary: ``<token> <count>`` a line by falling count; ``<Lua heritage>``, ``<pad>``,
``</s>``, ``<unk>`` are ids 0-3 and not listed; padded with ``madeupword<NNNN> 0`` to a multiple
of 8 ids), and ``{train,valid,test}.en-de.{en,de}.{bin,idx}``: each sentence's token ids and
``</s>`` (2). NVIDIA's preprocess (fairseq <= 0.6) writes the ``cached`` index: ``TNTIDX\\0\\0``,
version 1, dtype code and element size, sentence and size counts, then int64 dim offsets,
data offsets and sizes, the .bin holding int32 ids + 1 (Lua indexing). fairseq >= 0.9 writes
the ``mmap`` index instead (``MMIDIDX\\0\\0``, uint16 ids for a dictionary under 65 500 tokens);
the checker accepts both (``flagperf_host.checks.wmt14_en_de_fairseq.check``). Source:
fairseq/data/indexed_dataset.py, fairseq/data/dictionary.py. Beside them ``test.raw.de``, the
untokenized German references of the test set (NVIDIA's ``run_preprocessing.sh`` writes it with
``sacrebleu -t wmt14/full -l en-de --echo ref``), against which FlagPerf scores BLEU.

Tiny data: ``wmt14_en_de_text``'s corpus (the hand-written pairs and the gettext catalogues'),
binarized as NVIDIA's preprocess does, with the test set's German sentences as ``test.raw.de``.
"""

from __future__ import annotations

import struct
from collections import Counter
from functools import partial
from pathlib import Path

from flagperf_ansible.datasets.registry import Format
from flagperf_ansible.datasets.wmt14_en_de_text import split_pairs, tokenize
from flagperf_host import data_check
from flagperf_host.checks.wmt14_en_de_fairseq import WMT14_RAW_REFERENCE
from flagperf_host.checks.wmt14_en_de_text import WMT14_LANGS

NAME = "wmt14_en_de_fairseq"
SPECIALS = ("<Lua heritage>", "<pad>", "</s>", "<unk>")
EOS, PADDING_FACTOR = 2, 8
# fairseq's dtype codes: int32 for the cached index, uint16 for the mmap one.
CACHED_CODE, MMAP_CODE = 4, 8


def joined_dictionary(splits: dict) -> list[tuple[str, int]]:
    """``[(token, count)]`` of the training text of both languages, as fairseq's
    ``Dictionary.finalize`` orders it (falling count, first seen first among equals), padded
    to a multiple of PADDING_FACTOR ids with ``madeupword`` entries."""
    counts = Counter(token for lang in WMT14_LANGS
                     for tokens in splits["train"][lang] for token in tokens)
    entries = counts.most_common()
    padding = -(len(SPECIALS) + len(entries)) % PADDING_FACTOR
    return entries + [(f"madeupword{i:04d}", 0) for i in range(padding)]


def write_index(stem: Path, sentences: list[list[int]], impl: str) -> None:
    """Token id sentences as ``<stem>.bin`` and ``<stem>.idx`` (``impl`` ``cached`` or ``mmap``).

    Layout: fairseq/data/indexed_dataset.py (IndexedDatasetBuilder.finalize;
    MMapIndexedDataset.Index.writer).
    """
    import numpy as np

    sizes = [len(s) for s in sentences]
    if impl == "cached":
        tokens = np.concatenate([np.asarray(s, "<i4") + 1 for s in sentences])  # Lua: ids + 1
        offsets = np.concatenate([[0], np.cumsum(sizes)]).astype("<i8")
        # version, dtype code, element size, sentences, sizes (one dimension per sentence)
        header = b"TNTIDX\x00\x00" + struct.pack("<QQQQQ", 1, CACHED_CODE, 4, len(sizes),
                                                  len(sizes))
        index = header + np.arange(len(sizes) + 1, dtype="<i8").tobytes() + offsets.tobytes() \
            + np.asarray(sizes, "<i8").tobytes()
    elif impl == "mmap":
        tokens = np.concatenate([np.asarray(s, "<u2") for s in sentences])
        pointers = np.concatenate([[0], np.cumsum(sizes)[:-1] * 2]).astype("<i8")
        index = b"MMIDIDX\x00\x00" + struct.pack("<QBQ", 1, MMAP_CODE, len(sizes)) \
            + np.asarray(sizes, "<i4").tobytes() + pointers.tobytes()
    else:
        raise ValueError(f"impl must be cached or mmap, got {impl!r}")
    stem.with_name(stem.name + ".bin").write_bytes(tokens.tobytes())
    stem.with_name(stem.name + ".idx").write_bytes(index)


def write_binarized(target: Path, impl: str = "cached") -> dict[str, int]:
    """Binarize the tiny corpus under ``target`` with index ``impl``; returns sentence pairs
    per split and the number of gettext catalogues read.

    Raises:
        ValueError: an unknown ``impl``.
        OSError: ``target`` cannot be written.
    """
    pairs, read = split_pairs()
    splits = {split: {lang: [tokenize(pair[side]) for pair in rows]
                      for side, lang in enumerate(WMT14_LANGS)}
              for split, rows in pairs.items()}
    entries = joined_dictionary(splits)
    ids = {token: number for number, (token, _) in enumerate(entries, len(SPECIALS))}
    target.mkdir(parents=True, exist_ok=True)
    for lang in WMT14_LANGS:
        (target / f"dict.{lang}.txt").write_text(
            "".join(f"{token} {count}\n" for token, count in entries), encoding="utf-8")
    for split, sides in splits.items():
        for lang, sentences in sides.items():
            write_index(target / f"{split}.en-de.{lang}",
                        [[ids.get(t, SPECIALS.index("<unk>")) for t in tokens] + [EOS]
                         for tokens in sentences], impl)
    (target / WMT14_RAW_REFERENCE).write_text(
        "".join(german + "\n" for _, german in pairs["test"]), encoding="utf-8")
    return {**{split: len(rows) for split, rows in pairs.items()}, "catalogues": read}


FORMAT = Format(
    name=NAME,
    description="WMT14 en-de fairseq-binarized: dict.{en,de}.txt + {train,valid,test}.en-de."
                "{en,de}.{bin,idx} + test.raw.de (tiny: 30 pairs + gettext en-de pairs)",
    check=partial(data_check.check, NAME),
    generate=write_binarized,
)
