"""fairseq's binarized data sets: a ``.idx`` file's header and last offsets, checked against
its ``.bin`` file (both index formats: TNTIDX and MMIDIDX)."""

import os
import struct


# fairseq's dtype codes (fairseq/data/indexed_dataset.py _code_to_dtype) of integer tokens and
# their sizes in bytes.
FAIRSEQ_TOKEN_SIZES = {1: 1, 2: 1, 3: 2, 4: 4, 5: 8, 8: 2, 9: 4, 10: 8}


def fairseq_index(idx_path, bin_path):
    """``(kind, sentences)`` of a fairseq binarized pair, ``kind`` ``"cached"`` (TNTIDX: the
    ``IndexedDatasetBuilder`` of fairseq <= 0.6 and NVIDIA's Transformer) or ``"mmap"``
    (MMIDIDX: ``MMapIndexedDataset``, fairseq's default since 0.9). Reads the header and the
    last offsets, and checks the sizes of both files against them.

    Raises:
        ValueError: a header or a size that does not match the format.
    Layout: fairseq/data/indexed_dataset.py (IndexedDatasetBuilder.finalize,
    MMapIndexedDataset.Index.writer).
    """
    idx_size, bin_size = os.path.getsize(idx_path), os.path.getsize(bin_path)
    with open(idx_path, "rb") as handle:
        magic = handle.read(9)
        if magic[:8] == b"TNTIDX\x00\x00":
            handle.seek(8)
            header = handle.read(40)
            if len(header) < 40:
                raise ValueError("truncated index header")
            version, code, element, count, dims = struct.unpack("<QQQQQ", header)
            if version != 1 or FAIRSEQ_TOKEN_SIZES.get(code) != element:
                raise ValueError("index version %d, dtype code %d, element size %d: not a "
                                 "token index" % (version, code, element))
            if idx_size != 48 + 8 * (2 * (count + 1) + dims):
                raise ValueError("index is %d bytes, its header says %d" % (
                    idx_size, 48 + 8 * (2 * (count + 1) + dims)))
            handle.seek(48 + 8 * (count + 1) + 8 * count)  # data_offsets[count]
            end = struct.unpack("<q", handle.read(8))[0] * element
            kind = "cached"
        elif magic == b"MMIDIDX\x00\x00":
            header = handle.read(17)  # after the 9-byte magic: version, dtype code, count
            if len(header) < 17:
                raise ValueError("truncated index header")
            version, code, count = struct.unpack("<QBQ", header)
            element = FAIRSEQ_TOKEN_SIZES.get(code)
            if version != 1 or element is None:
                raise ValueError("index version %d, dtype code %d: not a token index" % (
                    version, code))
            # Then sizes (int32) and byte pointers (int64), one of each per sentence.
            if idx_size != 26 + 12 * count:
                raise ValueError("index is %d bytes, its header says %d" % (
                    idx_size, 26 + 12 * count))
            end = 0
            if count:
                handle.seek(26 + 4 * (count - 1))
                last_size = struct.unpack("<i", handle.read(4))[0]
                handle.seek(26 + 4 * count + 8 * (count - 1))
                end = struct.unpack("<q", handle.read(8))[0] + last_size * element
            kind = "mmap"
        else:
            raise ValueError("not a fairseq index (starts with %r)" % magic[:8])
    if bin_size != end:
        raise ValueError("%s is %d bytes, the index says %d" % (
            os.path.basename(bin_path), bin_size, end))
    return kind, count
