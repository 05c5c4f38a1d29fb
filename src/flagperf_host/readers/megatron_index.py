"""Megatron's indexed data sets: a ``.idx`` file's header, checked against its own size, and
the number of tokens its sequence lengths add up to.

Layout (megatron/core/datasets/indexed_dataset.py, ``_IndexWriter``; Megatron-LM's
``tools/preprocess_data.py`` writes it through ``IndexedDatasetBuilder``), little-endian::

    magic b"MMIDIDX\\x00\\x00" (9 bytes), version (uint64, 1), dtype code (uint8),
    sequence count S (uint64), document count D (uint64),
    sequence lengths (S x int32), sequence byte pointers (S x int64),
    document indices (D x int64: sequence numbers, 0 first and S last, so D is documents + 1)

The ``.bin`` file holds the tokens of every sequence back to back in the dtype of the code. A
multimodal index (int8 sequence modes after the document indices) is no GPT case's: its size
does not match.
"""

import array
import os
import struct
import sys


MEGATRON_INDEX_MAGIC = b"MMIDIDX\x00\x00"
# magic, version, dtype code, sequence count, document count
MEGATRON_HEADER = struct.Struct("<9sQBQQ")
# Megatron's DType codes and their item sizes in bytes: uint8, int8, int16, int32, int64,
# float64, float32, uint16.
MEGATRON_DTYPE_SIZES = {1: 1, 2: 1, 3: 2, 4: 4, 5: 8, 6: 8, 7: 4, 8: 2}
# Sequence lengths read per block when adding them up (1 MiB of int32).
_LENGTHS_PER_BLOCK = 1 << 18


def _int32_array():
    for code in ("i", "l"):
        if array.array(code).itemsize == 4:
            return array.array(code)
    raise ValueError("no 4-byte integer type in this Python's array module")


def megatron_index(idx_path):
    """``(itemsize, sequences, documents, tokens)`` of the Megatron index at ``idx_path``:
    bytes per token, sequence and document counts (documents: the document indices less the
    leading 0), and the sum of the sequence lengths (tokens the ``.bin`` file must hold). Reads
    the header, the sequence lengths in 1 MiB blocks and the first and last document index.

    Raises:
        ValueError: a header, size or document index that does not match the layout.
    """
    size = os.path.getsize(idx_path)
    with open(idx_path, "rb") as handle:
        header = handle.read(MEGATRON_HEADER.size)
        if header[:9] != MEGATRON_INDEX_MAGIC:
            raise ValueError("not a Megatron index (starts with %r)" % header[:9])
        if len(header) < MEGATRON_HEADER.size:
            raise ValueError("truncated header (%d bytes, %d expected)" % (
                len(header), MEGATRON_HEADER.size))
        _, version, code, sequences, documents = MEGATRON_HEADER.unpack(header)
        if version != 1:
            raise ValueError("index version %d, Megatron reads 1" % version)
        itemsize = MEGATRON_DTYPE_SIZES.get(code)
        if itemsize is None:
            raise ValueError("unknown dtype code %d (Megatron's are %s)" % (
                code, ", ".join(str(c) for c in sorted(MEGATRON_DTYPE_SIZES))))
        expected = MEGATRON_HEADER.size + (4 + 8) * sequences + 8 * documents
        if size != expected:
            raise ValueError("index is %d bytes, its counts (%d sequences, %d document "
                             "indices) say %d" % (size, sequences, documents, expected))
        if documents < 1:
            raise ValueError("no document indices")
        handle.seek(MEGATRON_HEADER.size + 12 * sequences)
        first = struct.unpack("<q", handle.read(8))[0]
        handle.seek(size - 8)
        last = struct.unpack("<q", handle.read(8))[0]
        if (first, last) != (0, sequences):
            raise ValueError("document indices run from %d to %d, not 0 to %d" % (
                first, last, sequences))
        handle.seek(MEGATRON_HEADER.size)
        tokens, left = 0, sequences
        while left:
            lengths = _int32_array()
            count = min(left, _LENGTHS_PER_BLOCK)
            lengths.frombytes(handle.read(4 * count))
            if sys.byteorder == "big":
                lengths.byteswap()
            if min(lengths) < 0:
                raise ValueError("a negative sequence length")
            tokens += sum(lengths)
            left -= count
    return itemsize, sequences, documents - 1, tokens
