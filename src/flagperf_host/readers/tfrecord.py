"""TFRecord files and the ``tf.train.Example`` records in them: the framing's CRC-32C, the
first record of a file, an Example's features (its protobuf read by ``readers.protobuf``)."""

import os
import struct

from flagperf_host.readers.protobuf import protobuf_fields, varint


_CRC32C_TABLE = []


def crc32c(data):
    """CRC-32C (Castagnoli: reflected polynomial 0x82F63B78, RFC 3720 appendix B.4) of the bytes
    ``data``, as TFRecord frames use it; ``crc32c(b"123456789") == 0xE3069283``. Pure Python
    (about 5 MB/s): for a record or two, not a data set."""
    if not _CRC32C_TABLE:
        for byte in range(256):
            crc = byte
            for _ in range(8):
                crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
            _CRC32C_TABLE.append(crc)
    table, crc = _CRC32C_TABLE, 0xFFFFFFFF
    for byte in bytearray(data):
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def mask_crc(crc):
    """TFRecord's mask of a CRC-32C: rotated right by 15 bits plus 0xA282EAD8, modulo 2**32
    (tensorflow/core/lib/hash/crc32c.h, ``Mask``)."""
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def masked_crc32c(data):
    """TFRecord's masked CRC-32C of ``data``."""
    return mask_crc(crc32c(data))


def tfrecord_first(path):
    """The first record (bytes) of the TFRecord file at ``path``, its framing checked: uint64
    length, masked CRC-32C of those 8 bytes, the data, masked CRC-32C of the data, integers
    little-endian (tensorflow/core/lib/io/record_writer.cc). None for an empty file.

    Raises:
        ValueError: a truncated record or a CRC that does not match.
    """
    with open(path, "rb") as handle:
        header = handle.read(12)
        if not header:
            return None
        if len(header) < 12:
            raise ValueError("truncated record header (%d of 12 bytes)" % len(header))
        length, length_crc = struct.unpack("<QI", header)
        if masked_crc32c(header[:8]) != length_crc:
            raise ValueError("the first record's length CRC does not match: not a TFRecord file")
        follows = os.fstat(handle.fileno()).st_size - 12
        if length + 4 > follows:
            raise ValueError("truncated: the first record has %d bytes, %d follow its header"
                             % (length, follows))
        data = handle.read(length)
        data_crc = struct.unpack("<I", handle.read(4))[0]
    if masked_crc32c(data) != data_crc:
        raise ValueError("the first record's data CRC does not match")
    return data


def example_features(record):
    """``{name: (kind, values)}`` of a serialized ``tf.train.Example`` (tensorflow/core/example/
    example.proto, feature.proto: Example.features = 1, Features.feature = 1, a map entry's key
    = 1 and value = 2, Feature's bytes_list = 1, float_list = 2, int64_list = 3, each list's
    values = 1, numbers packed or not); ``kind`` is ``bytes``, ``float`` or ``int64``.

    Raises:
        ValueError: not a tf.train.Example.
    """
    features = {}
    for number, wire, example in protobuf_fields(record):
        if number != 1 or wire != 2:
            continue
        for entry_number, entry_wire, entry in protobuf_fields(example):
            if entry_number != 1 or entry_wire != 2:
                continue
            name, feature = None, b""
            for part_number, _, part in protobuf_fields(entry):
                if part_number == 1:
                    name = bytes(part).decode("utf-8", "replace")
                elif part_number == 2:
                    feature = part
            if name is None:
                raise ValueError("a feature without a name")
            features[name] = _feature_values(feature)
    return features


def _feature_values(feature):
    for number, _, listed in protobuf_fields(feature):
        kind = {1: "bytes", 2: "float", 3: "int64"}.get(number)
        if kind is None:
            continue
        values = []
        for _, wire, value in protobuf_fields(listed):
            if kind == "bytes":
                values.append(value)
            elif kind == "float":
                values.extend(struct.unpack("<%df" % (len(value) // 4), value))
            elif wire == 0:
                values.append(value - (1 << 64) if value >> 63 else value)
            else:  # packed int64s
                packed, at = bytearray(value), 0
                while at < len(packed):
                    decoded, at = varint(packed, at)
                    values.append(decoded - (1 << 64) if decoded >> 63 else decoded)
        return kind, values
    return "empty", []
