#!/usr/bin/env python3
"""Check that a folder holds a data set in the on-disk layout a case reads (standard library only).

Runs on the controller (``flagperf_ansible.datasets.check``, ``flagperf-ansible data check``)
and, unchanged, on a host at preflight, where only python3's standard library is sure to exist:
the file is piped to the host's interpreter (``python3 - ARGS``, as
``plugins/action/piped_script.py`` does) and imports nothing outside the standard library.
Python 3.6 or later.

A checker is cheap: it reads names, counts and headers (a few bytes of a sample of files, the
index of an HDF5 file, the first MiB of a JSON file), never a whole large data set. It returns
a list of problems, one line each, naming the file or folder relative to the data set's root;
an empty list means the layout is right.

As a script::

    layout_check.py FORMAT PATH          problems one per line; exit 0 (fine), 1 (problems)
    layout_check.py '[{"format": F, "path": P, ...}, ...]'
        one JSON document on stdout: {"results": [{"format", "path", "problems", ...}]}
        (other keys of each request, e.g. case_id, are echoed back; a request's
        "checkpoint": {"path", "sha256"} also checks that file under PATH, and its "onnx"
        that an inference case's exist_onnx_path is a file, under PATH unless absolute);
        exit 0 when no result has problems, 1 when one has, 2 on bad arguments (then
        {"error": ...}).
"""

import codecs
import json
import os
import re
import struct
import sys
import wave

# Files of a sample whose headers a checker reads: enough to catch a wrong encoding or rate
# in a set that was converted as a whole, few enough to stay cheap on a network file system.
HEADER_SAMPLE = 16
# Problems of one kind listed by name before "and N more".
SHOWN = 3

# Image files the ImageNet loaders take (torchvision's IMG_EXTENSIONS, benchmarks' ImageFolder).
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".ppm", ".pgm", ".bmp", ".tif", ".tiff", ".webp")


# --- helpers -------------------------------------------------------------------------------

def _entries(folder):
    """Sorted names in ``folder``, hidden ones (``.complete`` markers) left out."""
    return sorted(name for name in os.listdir(folder) if not name.startswith("."))


def _subfolders(folder):
    return [name for name in _entries(folder) if os.path.isdir(os.path.join(folder, name))]


def _spread(items, count=HEADER_SAMPLE):
    """At most ``count`` items evenly spread over ``items`` (first and last included)."""
    items = list(items)
    if len(items) <= count:
        return items
    step = (len(items) - 1) / float(count - 1)
    return [items[int(round(i * step))] for i in range(count)]


def _some(names, total=None):
    """``a, b, c`` or ``a, b, c and 7 more``."""
    names = list(names)
    total = len(names) if total is None else total
    shown = ", ".join(str(n) for n in names[:SHOWN])
    return shown if total <= SHOWN else "%s and %d more" % (shown, total - SHOWN)


def _need(root, relative, problems, folder=False):
    """True when ``root/relative`` is a file (or folder); else a problem is added."""
    path = os.path.join(root, relative)
    if folder and not os.path.isdir(path):
        problems.append("%s/: missing folder" % relative)
        return False
    if not folder and not os.path.isfile(path):
        problems.append("%s: missing file" % relative)
        return False
    return True


def _head(path, size):
    with open(path, "rb") as handle:
        return handle.read(size)


def image_kind(head):
    """The image format that ``head`` (the first 12 bytes of a file) starts, or None."""
    if head.startswith(b"\xff\xd8\xff"):
        return "jpeg"
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "png"
    if head.startswith(b"BM"):
        return "bmp"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "webp"
    if head[:4] in (b"II*\x00", b"MM\x00*"):
        return "tiff"
    if head[:2] in (b"P5", b"P6"):
        return "pnm"
    return None


def flac_streaminfo(path):
    """``(sample_rate, channels, bits_per_sample, total_samples)`` from a FLAC file's STREAMINFO.

    Raises:
        ValueError: not a FLAC file (no ``fLaC`` marker or no STREAMINFO first).
    Format: https://xiph.org/flac/format.html (METADATA_BLOCK_STREAMINFO).
    """
    head = _head(path, 42)
    if len(head) < 42 or head[:4] != b"fLaC" or (head[4] & 0x7F) != 0:
        raise ValueError("not a FLAC file (no fLaC marker and STREAMINFO block)")
    # Bytes 18..25: sample rate (20 bits), channels - 1 (3), bits per sample - 1 (5), samples (36).
    packed = struct.unpack(">Q", head[18:26])[0]
    return (packed >> 44, ((packed >> 41) & 0x7) + 1, ((packed >> 36) & 0x1F) + 1,
            packed & 0xFFFFFFFFF)


# --- HDF5: the names, shapes and classes of a file's root datasets, read from its index --------
# Format: https://docs.hdfgroup.org/hdf5/develop/_f_m_t3.html. Covers what h5py writes: superblock
# 0/1 with a symbol-table root group (h5py's default), superblock 2/3 with links kept in the root
# object header (libver="latest", up to 8 links); object headers version 1 and 2.

HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"


def superblock_offset(handle):
    """Where the HDF5 superblock of the open binary file ``handle`` starts: at byte 0, or after
    a user block (512, 1024, 2048, ... bytes); None when the signature is in none of them."""
    size, offset = os.fstat(handle.fileno()).st_size, 0
    while offset + 8 <= size:
        handle.seek(offset)
        if handle.read(8) == HDF5_SIGNATURE:
            return offset
        offset = 512 if offset == 0 else offset * 2
    return None


_UNDEFINED = (1 << 64) - 1


# Datatype message classes (low 4 bits of its first byte).
DATATYPE_CLASSES = {0: "integer", 1: "float", 3: "string", 9: "variable-length"}


class Hdf5NotCovered(ValueError):
    """An HDF5 file (its signature is right) in a layout this reader does not cover."""


class Hdf5Index(object):
    """The root group's datasets of an open HDF5 file: ``datasets()`` ->
    ``{name: (shape tuple, class)}``, class ``"integer"``, ``"float"``, ``"string"`` or
    ``"other"``.

    Raises (from the constructor or ``datasets``):
        Hdf5NotCovered: an HDF5 file in a layout this reader does not cover (dense link storage:
            more than 8 members with libver="latest"; a newer superblock or object header).
        ValueError: not an HDF5 file.
        struct.error: a truncated file.
    """

    def __init__(self, handle):
        self.handle = handle
        offset = superblock_offset(handle)
        if offset is None:
            raise ValueError("not an HDF5 file (no signature)")
        version = self._read(offset + 8, 1)[0]
        if version in (0, 1):
            self.o, self.l = self._read(offset + 13, 2)
            fields = offset + (28 if version == 1 else 24)
            self.base = self._addr(fields)
            entry = fields + 4 * self.o  # base, free space, end of file, driver info
            header, cache = self._addr(entry + self.o), self._u(entry + 2 * self.o, 4)
            self.root = ("stab", self._addr(entry + 2 * self.o + 8),
                         self._addr(entry + 3 * self.o + 8)) if cache == 1 else ("header", header)
        elif version in (2, 3):
            self.o, self.l = self._read(offset + 9, 2)
            self.base = self._addr(offset + 12)
            self.root = ("header", self._addr(offset + 12 + 3 * self.o))
        else:
            raise Hdf5NotCovered("HDF5 superblock version %d is not covered" % version)

    def _read(self, address, size):
        self.handle.seek(address)
        data = self.handle.read(size)
        if len(data) != size:
            raise ValueError("truncated HDF5 file (reading %d bytes at %d)" % (size, address))
        return bytearray(data)

    def _u(self, address, size):
        return int.from_bytes(bytes(self._read(address, size)), "little")

    def _addr(self, address):
        return self._u(address, self.o)

    def _abs(self, relative):
        return self.base + relative

    def _messages(self, address):
        """``[(type, data bytes)]`` of the object header at ``address`` (continuations followed)."""
        address = self._abs(address)
        found = []
        if bytes(self._read(address, 4)) == b"OHDR":
            flags = self._read(address + 5, 1)[0]
            at = address + 6 + (16 if flags & 0x20 else 0) + (4 if flags & 0x10 else 0)
            width = 1 << (flags & 3)
            blocks = [(at + width, self._u(at, width))]
            order = 2 if flags & 0x04 else 0
            while blocks and len(found) < 10000:
                start, length = blocks.pop(0)
                at, end = start, start + length
                while at + 4 + order <= end:
                    kind, size = self._read(at, 1)[0], self._u(at + 1, 2)
                    data = bytes(self._read(at + 4 + order, size))
                    found.append((kind, data))
                    if kind == 0x10:  # continuation: "OCHK", messages, checksum
                        where, span = self._split_continuation(data)
                        blocks.append((self._abs(where) + 4, span - 8))
                    at += 4 + order + size
            return found
        version = self._read(address, 1)[0]
        if version != 1:
            raise Hdf5NotCovered("object header version %d is not covered" % version)
        count = self._u(address + 2, 2)
        blocks = [(address + 16, self._u(address + 8, 4))]
        while blocks and len(found) < count:
            start, length = blocks.pop(0)
            at, end = start, start + length
            while at + 8 <= end and len(found) < count:
                kind, size = self._u(at, 2), self._u(at + 2, 2)
                data = bytes(self._read(at + 8, size))
                found.append((kind, data))
                if kind == 0x10:
                    where, span = self._split_continuation(data)
                    blocks.append((self._abs(where), span))
                at += 8 + size
        return found

    def _split_continuation(self, data):
        return (int.from_bytes(data[:self.o], "little"),
                int.from_bytes(data[self.o:self.o + self.l], "little"))

    def _name(self, heap_data, offset):
        self.handle.seek(heap_data + offset)
        name = self.handle.read(1024)
        if b"\x00" not in name:
            raise ValueError("HDF5 link name without end")
        return name[:name.index(b"\x00")].decode("utf-8", "replace")

    def links(self):
        """``{name: object header address}`` of the root group."""
        if self.root[0] == "stab":
            return self._symbol_table(self.root[1], self.root[2])
        messages = self._messages(self.root[1])
        for kind, data in messages:
            if kind == 0x11:  # symbol table message: B-tree and local heap
                return self._symbol_table(int.from_bytes(data[:self.o], "little"),
                                          int.from_bytes(data[self.o:2 * self.o], "little"))
        links = {}
        for kind, data in messages:
            if kind == 0x02:  # link info: a fractal heap address means dense link storage
                flags = data[1]
                heap = int.from_bytes(data[2 + (8 if flags & 1 else 0):][:self.o], "little")
                if heap != _UNDEFINED:
                    raise Hdf5NotCovered("links in dense storage (a fractal heap) are not covered")
            if kind == 0x06:
                name, address = self._link(data)
                if address is not None:
                    links[name] = address
        return links

    def _link(self, data):
        flags, at = data[1], 2
        hard = True
        if flags & 0x08:
            hard, at = data[at] == 0, at + 1
        at += (8 if flags & 0x04 else 0) + (1 if flags & 0x10 else 0)
        width = 1 << (flags & 3)
        length = int.from_bytes(data[at:at + width], "little")
        name = data[at + width:at + width + length].decode("utf-8", "replace")
        at += width + length
        return name, (int.from_bytes(data[at:at + self.o], "little") if hard else None)

    def _symbol_table(self, btree, heap):
        heap = self._abs(heap)
        if bytes(self._read(heap, 4)) != b"HEAP":
            raise ValueError("root group's local heap not found")
        heap_data = self._abs(self._addr(heap + 8 + 2 * self.l))
        links, nodes, seen = {}, [btree], set()
        while nodes:
            node = self._abs(nodes.pop(0))
            if node in seen:  # a damaged tree that points back
                raise ValueError("root group's B-tree has a cycle")
            seen.add(node)
            signature = bytes(self._read(node, 4))
            if signature == b"SNOD":
                count, at = self._u(node + 6, 2), node + 8
                for _ in range(count):
                    links[self._name(heap_data, self._addr(at))] = self._addr(at + self.o)
                    at += 2 * self.o + 24
                continue
            if signature != b"TREE":
                raise ValueError("root group's B-tree not found")
            count = self._u(node + 6, 2)
            at = node + 8 + 2 * self.o + self.l  # siblings, then key 0
            for _ in range(count):
                nodes.append(self._addr(at))  # a child: a TREE node or, at level 0, an SNOD
                at += self.o + self.l
        return links

    def dataset(self, address):
        """``(shape, class)`` of the dataset whose object header is at ``address``, or None
        for a group."""
        shape, kind = None, None
        for message, data in self._messages(address):
            if message == 0x01:
                version, rank = data[0], data[1]
                start = 8 if version == 1 else 4
                shape = tuple(int.from_bytes(data[start + i * self.l:start + (i + 1) * self.l],
                                             "little") for i in range(rank))
            elif message == 0x03:
                kind = DATATYPE_CLASSES.get(data[0] & 0x0F, "other")
        return None if shape is None else (shape, kind)

    def datasets(self):
        found = {}
        for name, address in sorted(self.links().items()):
            described = self.dataset(address)
            if described is not None:
                found[name] = described
        return found


def hdf5_datasets(path):
    """``{name: (shape, class)}`` of the root datasets of the HDF5 file at ``path``.

    Raises:
        ValueError: not an HDF5 file, a truncated one, or a layout ``Hdf5Index`` does not cover.
    """
    with open(path, "rb") as handle:
        try:
            return Hdf5Index(handle).datasets()
        except (struct.error, IndexError, OverflowError) as err:
            raise ValueError("unreadable HDF5 index (%s)" % err)


# --- ImageNet ------------------------------------------------------------------------------

def check_imagenet(root):
    """ImageNet (ILSVRC-2012) folders, as torchvision's ImageFolder reads them:
    ``train/<wnid>/<wnid>_<n>.JPEG`` and ``val/<wnid>/ILSVRC2012_val_<n>.JPEG`` (the validation
    images moved into class folders, e.g. by ``valprep.sh``). Class folders may have any name
    (``digits`` uses ``0``..``9`` and PNG files): the loader sorts them into class indices, so
    train/ and val/ must have the same ones. Every class folder holds an image; a sample of
    HEADER_SAMPLE images per split must start as an image file (any of the formats the loader
    decodes: ImageNet itself has a PNG named ``.JPEG``).
    """
    problems = []
    classes = {}
    for split in ("train", "val"):
        if not _need(root, split, problems, folder=True):
            continue
        folder = os.path.join(root, split)
        names = _subfolders(folder)
        if not names:
            loose = [n for n in _entries(folder) if n.lower().endswith(IMAGE_SUFFIXES)]
            problems.append("%s/: no class folders%s" % (
                split, " (%d images lie loose: move them into <wnid>/ folders)" % len(loose)
                if loose else ""))
            continue
        classes[split] = names
        empty, firsts = [], []
        for name in names:
            first = None
            with os.scandir(os.path.join(folder, name)) as scan:  # stops at the first image
                for entry in scan:
                    if entry.name.lower().endswith(IMAGE_SUFFIXES) and entry.is_file():
                        first = entry.path
                        break
            if first is None:
                empty.append(name)
            else:
                firsts.append(first)
        if empty:
            problems.append("%s/: %d class folder(s) without images: %s" % (
                split, len(empty), _some(empty)))
        bad = [os.path.relpath(p, root) for p in _spread(firsts)
               if image_kind(_head(p, 12)) is None]
        if bad:
            problems.append("%s/: not image files: %s" % (split, _some(bad)))
    if len(classes) == 2 and classes["train"] != classes["val"]:
        only_train = sorted(set(classes["train"]) - set(classes["val"]))
        only_val = sorted(set(classes["val"]) - set(classes["train"]))
        problems.append("train/ and val/ have different class folders (only in train: %s; "
                        "only in val: %s)" % (_some(only_train) or "none",
                                              _some(only_val) or "none"))
    return problems


# --- ImageNet TFRecords --------------------------------------------------------------------
# tensorflow/models' ImageNet TFRecords (tools/datasets/imagenet_to_gcs.py): shards named
# <split>-NNNNN-of-MMMMM holding tf.train.Example records, in <split>/ folders as that script
# writes them and FlagPerf's tensorflow2 loader reads them (<data_dir>/<split>/<split>*), or flat
# at the root as official legacy resnet's imagenet_preprocessing.get_filenames lists them.

TFRECORD_SPLITS = ("train", "validation")
TFRECORD_SHARD = re.compile(r"^(train|validation)-(\d{5})-of-(\d{5})$")
# The features official resnet's parse_example_proto cannot do without.
TFRECORD_FEATURES = (("image/encoded", "bytes"), ("image/class/label", "int64"))

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


def _varint(data, at):
    value, shift = 0, 0
    while True:
        if at >= len(data):
            raise ValueError("truncated protobuf varint")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
        shift += 7
        if shift > 63:
            raise ValueError("protobuf varint longer than 10 bytes")


def protobuf_fields(data):
    """``[(field number, wire type, value)]`` of a serialized protobuf message: an int for a
    varint, bytes for a length-delimited or fixed-size field (protobuf encoding guide).

    Raises:
        ValueError: not a well-formed message.
    """
    data = bytearray(data)
    at, fields = 0, []
    while at < len(data):
        key, at = _varint(data, at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, at = _varint(data, at)
        elif wire in (1, 2, 5):
            if wire == 2:
                size, at = _varint(data, at)
            else:
                size = 8 if wire == 1 else 4
            if at + size > len(data):
                raise ValueError("truncated protobuf field %d" % number)
            value, at = bytes(data[at:at + size]), at + size
        else:
            raise ValueError("protobuf wire type %d of field %d is not covered" % (wire, number))
        fields.append((number, wire, value))
    return fields


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
                    decoded, at = _varint(packed, at)
                    values.append(decoded - (1 << 64) if decoded >> 63 else decoded)
        return kind, values
    return "empty", []


def _tfrecord_shards(root, split):
    """``(folder relative to root, {name: (index, total)})`` of a split's shards: in ``<split>/``,
    else at the root; ``(None, {})`` when there are none."""
    for relative in (split, ""):
        folder = os.path.join(root, relative)
        if not os.path.isdir(folder):
            continue
        found = {}
        for name in _entries(folder):
            match = TFRECORD_SHARD.match(name)
            if match and match.group(1) == split and os.path.isfile(os.path.join(folder, name)):
                found[name] = (int(match.group(2)), int(match.group(3)))
        if found:
            return relative, found
    return None, {}


def check_imagenet_tfrecord(root):
    """ImageNet as TFRecords (tensorflow/models' imagenet_to_gcs.py layout): for train and
    validation, shards ``<split>-NNNNN-of-MMMMM`` in ``<split>/`` (or all at the root), every
    index 0..MMMMM-1 present with one total. The first shard's first record is read: its
    TFRecord framing (lengths and both CRC-32C) must be valid and it must be a
    ``tf.train.Example`` with ``image/encoded`` (bytes that start as an image file) and
    ``image/class/label`` (int64, 1-based as in ImageNet's 1..1000: the loaders subtract 1).
    """
    problems = []
    for split in TFRECORD_SPLITS:
        relative, shards = _tfrecord_shards(root, split)
        if not shards:
            problems.append("no %s shards (%s/%s-00000-of-NNNNN, or %s-00000-of-NNNNN at the "
                            "root)" % (split, split, split, split))
            continue
        where = "%s/" % relative if relative else "%s shards" % split
        totals = sorted(set(total for _, total in shards.values()))
        if len(totals) > 1:
            problems.append("%s: shards of different totals (%s)" % (
                where, ", ".join("of-%05d" % t for t in totals)))
            continue
        total = totals[0]
        have = set(index for index, _ in shards.values())
        missing = ["%s-%05d-of-%05d" % (split, i, total) for i in range(total) if i not in have]
        beyond = sorted(name for name, (index, _) in shards.items() if index >= total)
        if missing:
            problems.append("%s: %d of %d shards missing: %s" % (
                where, len(missing), total, _some(missing)))
        if beyond:
            problems.append("%s: shard numbers beyond the total: %s" % (where, _some(beyond)))
        first = min(shards, key=lambda name: shards[name][0])
        shown = "%s/%s" % (relative, first) if relative else first
        try:
            record = tfrecord_first(os.path.join(root, relative, first))
            if record is None:
                problems.append("%s: empty (no records)" % shown)
                continue
            features = example_features(record)
        except (ValueError, struct.error) as err:
            problems.append("%s: %s" % (shown, err))
            continue
        for name, kind in TFRECORD_FEATURES:
            found_kind, values = features.get(name, ("absent", []))
            if found_kind != kind or not values:
                problems.append("%s: the first record has no %s %s (it has: %s)" % (
                    shown, kind, name, _some(sorted(features)) or "no features"))
        kind, encoded = features.get("image/encoded", ("absent", []))
        if kind == "bytes" and encoded and image_kind(encoded[0][:12]) is None:
            problems.append("%s: the first record's image/encoded is not an image file"
                            % shown)
        kind, labels = features.get("image/class/label", ("absent", []))
        if kind == "int64" and labels and labels[0] < 1:
            problems.append("%s: the first record's image/class/label is %d: labels are "
                            "1-based (ImageNet's 1..1000; the loaders subtract 1)"
                            % (shown, labels[0]))
    return problems


# --- COCO 2017 -----------------------------------------------------------------------------

COCO_HEAD = 1 << 20


def _first_json_item(text, key):
    """The first element of the list under ``"key"`` in the JSON object text ``text`` (a prefix
    of a file), or None when the list does not start or its first element ends beyond it."""
    decoder = json.JSONDecoder()
    marker = '"%s"' % key
    at = text.find(marker)
    while at >= 0:
        rest = text[at + len(marker):].lstrip()
        if rest.startswith(":"):
            rest = rest[1:].lstrip()
            if rest.startswith("["):
                rest = rest[1:].lstrip()
                try:
                    return decoder.raw_decode(rest)[0]
                except ValueError:
                    return None
        at = text.find(marker, at + 1)
    return None


def check_coco2017(root):
    """COCO 2017 detection / segmentation: ``annotations/instances_train2017.json`` and
    ``annotations/instances_val2017.json`` (a JSON object with ``info``, ``licenses``, ``images``,
    ``annotations``, ``categories``), images ``train2017/<12-digit id>.jpg`` and
    ``val2017/<id>.jpg``. Reads the first MiB of each annotation file only: it must be a JSON
    object whose ``images`` list starts there (as in the official files) with an entry naming a
    ``file_name`` that exists in the split's folder; a sample of each folder's images must be
    JPEG files.
    """
    problems = []
    for split in ("train2017", "val2017"):
        annotations = "annotations/instances_%s.json" % split
        have_json = _need(root, annotations, problems)
        have_folder = _need(root, split, problems, folder=True)
        if have_folder:
            folder = os.path.join(root, split)
            images = [n for n in _entries(folder) if n.lower().endswith((".jpg", ".jpeg"))]
            if not images:
                problems.append("%s/: no .jpg images" % split)
            bad = [n for n in _spread(images)
                   if image_kind(_head(os.path.join(folder, n), 12)) != "jpeg"]
            if bad:
                problems.append("%s/: not JPEG files: %s" % (split, _some(bad)))
        if not have_json:
            continue
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        text = decoder.decode(_head(os.path.join(root, annotations), COCO_HEAD))
        if not text.lstrip().startswith("{"):
            problems.append("%s: not a JSON object (starts with %r)" % (annotations, text[:16]))
            continue
        first = _first_json_item(text, "images")
        if not isinstance(first, dict) or not isinstance(first.get("file_name"), str):
            problems.append('%s: no "images" list with a file_name in its first MiB (the '
                            'official files start with info, licenses, images)' % annotations)
            continue
        for key in ("id", "width", "height"):
            if not isinstance(first.get(key), int):
                problems.append('%s: first image has no integer "%s"' % (annotations, key))
        if have_folder and not os.path.isfile(os.path.join(root, split, first["file_name"])):
            problems.append("%s: first image %s is not in %s/" % (
                annotations, first["file_name"], split))
    return problems


# --- LJSpeech ------------------------------------------------------------------------------

LJSPEECH_RATE = 22050


def check_ljspeech(root):
    """LJSpeech-1.1 (the folder the archive unpacks to): ``metadata.csv``, one clip a line as
    ``<id>|<transcription>|<normalized transcription>`` (UTF-8, no quoting; neither text empty:
    the speech cases read the normalized one), and
    ``wavs/<id>.wav``: RIFF/WAVE PCM, 22050 Hz, mono, 16-bit. Every line must have its wav;
    the headers of a sample of HEADER_SAMPLE wavs are read.
    """
    problems = []
    have_csv = _need(root, "metadata.csv", problems)
    have_wavs = _need(root, "wavs", problems, folder=True)
    wavs = set(_entries(os.path.join(root, "wavs"))) if have_wavs else set()
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
                            % (len(malformed), _some(malformed)))
        elif not ids:
            problems.append("metadata.csv: no clips")
    if have_wavs and ids:
        missing = [i for i in ids if i + ".wav" not in wavs]
        if missing:
            problems.append("wavs/: %d clip(s) of metadata.csv have no wav: %s" % (
                len(missing), _some(missing)))
        wrong = []
        for name in _spread(sorted(i + ".wav" for i in ids if i + ".wav" in wavs)):
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
            problems.append("wavs/: not %d Hz mono 16-bit PCM: %s" % (LJSPEECH_RATE, _some(wrong)))
    return problems


# --- LibriSpeech ---------------------------------------------------------------------------

LIBRISPEECH_SPLITS = ("train-clean-100", "train-clean-360", "train-other-500",
                      "dev-clean", "dev-other", "test-clean", "test-other")
LIBRISPEECH_RATE = 16000


def check_librispeech(root):
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
        for speaker in _subfolders(folder):
            if not speaker.isdigit():
                odd.append(speaker)
                continue
            for chapter in _subfolders(os.path.join(folder, speaker)):
                if chapter.isdigit():
                    chapters.append((speaker, chapter))
                else:
                    odd.append("%s/%s" % (speaker, chapter))
        if odd:
            problems.append("%s/: folders that are not <speaker>/<chapter> numbers: %s" % (
                split, _some(odd)))
        if not chapters:
            problems.append("%s/: no <speaker>/<chapter>/ folders" % split)
            continue
        no_transcript, unmatched = [], []
        for speaker, chapter in chapters:
            where = os.path.join(folder, speaker, chapter)
            prefix = "%s-%s" % (speaker, chapter)
            names = set(_entries(where))
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
                split, _some(no_transcript)))
        if unmatched:
            problems.append("%s/: utterances without a transcript line or a flac: %s" % (
                split, _some(unmatched)))
        wrong = []
        for path in _spread(flacs):
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
                split, LIBRISPEECH_RATE, _some(wrong)))
    for name in _entries(root):
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
            name, len(bad), _some(bad)))
    if not listed and not bad:
        problems.append("%s: lists no audio file" % name)
    return problems


# --- MLPerf BERT ---------------------------------------------------------------------------

BERT_TRAIN_DIR, BERT_EVAL_DIR = "2048_shards_uncompressed", "eval_set_uncompressed"
# Per sample: [seq_len] for the first three, [max_predictions] for the next two, a scalar last.
BERT_DATASETS = ("input_ids", "input_mask", "segment_ids", "masked_lm_positions",
                 "masked_lm_ids", "next_sentence_labels")


def bert_shard_problems(path):
    """Problems of one MLPerf BERT shard (an HDF5 file), as phrases. An HDF5 file whose index
    this reader does not cover passes: its signature is right, and h5py will say more."""
    try:
        found = hdf5_datasets(path)
    except Hdf5NotCovered:
        return []
    except (OSError, ValueError) as err:
        return [str(err)]
    missing = [name for name in BERT_DATASETS if name not in found]
    if missing:
        return ["no dataset %s" % ", ".join(missing)]
    shapes = dict((name, found[name][0]) for name in BERT_DATASETS)
    problems = []
    ranks = [len(shapes[n]) for n in BERT_DATASETS]
    if ranks != [2, 2, 2, 2, 2, 1]:
        return ["shapes %s, expected [samples, seq_len] x 3, [samples, max_predictions] x 2, "
                "[samples]" % ", ".join("%s %s" % (n, list(shapes[n])) for n in BERT_DATASETS)]
    if len(set(shapes[n][0] for n in BERT_DATASETS)) != 1:
        problems.append("sample counts differ (%s)" % ", ".join(
            "%s %d" % (n, shapes[n][0]) for n in BERT_DATASETS))
    if len(set(shapes[n] for n in BERT_DATASETS[:3])) != 1:
        problems.append("input_ids, input_mask, segment_ids shapes differ")
    if shapes["masked_lm_positions"] != shapes["masked_lm_ids"]:
        problems.append("masked_lm_positions and masked_lm_ids shapes differ")
    not_int = [n for n in BERT_DATASETS if found[n][1] != "integer"]
    if not_int:
        problems.append("not integer: %s" % ", ".join(not_int))
    return problems


def check_mlperf_bert_hdf5(root):
    """MLPerf BERT pre-training data as FlagPerf's bert case reads it:
    ``2048_shards_uncompressed/`` (training shards) and ``eval_set_uncompressed/`` (the 10k
    evaluation samples, ``part_eval_10k.hdf5``), files with ``part`` in their name (what the
    loader lists). Each is HDF5 with the root datasets ``input_ids``, ``input_mask``,
    ``segment_ids`` [samples, seq_len] (512 in MLPerf), ``masked_lm_positions``,
    ``masked_lm_ids`` [samples, max_predictions] (76), ``next_sentence_labels`` [samples], all
    integers. Reads the HDF5 index (not the data) of every evaluation file and a sample of
    HEADER_SAMPLE training shards. The checkpoint and ``bert_config.json`` that the case also
    reads from data_dir are model files, not checked here.
    """
    problems = []
    for folder, sample in ((BERT_TRAIN_DIR, _spread), (BERT_EVAL_DIR, list)):
        if not _need(root, folder, problems, folder=True):
            continue
        where = os.path.join(root, folder)
        shards = [n for n in _entries(where)
                  if "part" in n and os.path.isfile(os.path.join(where, n))]
        if not shards:
            problems.append("%s/: no shard files (names with 'part')" % folder)
        for name in sample(shards):
            problems.extend("%s/%s: %s" % (folder, name, p)
                            for p in bert_shard_problems(os.path.join(where, name)))
    return problems


# --- BERT evaluation text and a transformers BERT folder -------------------------------------

BERT_EVAL_FILE = "eval.txt"
# What save_pretrained writes for the weights: one file, or an index of shards (large models).
HF_WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin", "model.safetensors.index.json",
                   "pytorch_model.bin.index.json")
BERT_SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
# config.json, a shard index and vocab.txt are read whole below this size (bert-large-uncased's
# vocab.txt: 232 kB); a safetensors header (its JSON index) up to the format's own limit.
HF_SMALL_FILE, SAFETENSORS_HEADER_LIMIT = 16 << 20, 100 << 20


def _json_file(path):
    """The JSON document in ``path``, read whole; ValueError when it is HF_SMALL_FILE or larger
    or not JSON."""
    if os.path.getsize(path) >= HF_SMALL_FILE:
        raise ValueError("over %d MiB" % (HF_SMALL_FILE >> 20))
    with open(path, "rb") as handle:
        try:
            return json.loads(handle.read().decode("utf-8"))
        except (ValueError, UnicodeDecodeError) as err:
            raise ValueError("not JSON (%s)" % err)


def safetensors_index(path):
    """``{tensor name: (dtype, shape)}`` of a safetensors file, from its header (an 8-byte
    little-endian length, then that much JSON); the data must end where the header says.

    Raises:
        ValueError: not a safetensors file, or truncated.
    Layout: huggingface/safetensors, docs/source/index.mdx ("Format").
    """
    size = os.path.getsize(path)
    with open(path, "rb") as handle:
        head = handle.read(8)
        if len(head) < 8:
            raise ValueError("shorter than a safetensors header")
        length = struct.unpack("<Q", head)[0]
        if length > min(SAFETENSORS_HEADER_LIMIT, size - 8):
            raise ValueError("header length %d: not a safetensors file" % length)
        try:
            header = json.loads(handle.read(length).decode("utf-8"))
        except (ValueError, UnicodeDecodeError):
            raise ValueError("header is not JSON: not a safetensors file")
    if not isinstance(header, dict):
        raise ValueError("header is not a JSON object")
    tensors, end = {}, 0
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            tensors[name] = (entry["dtype"], list(entry["shape"]))
            end = max(end, int(entry["data_offsets"][1]))
        except (TypeError, KeyError, IndexError, ValueError):
            raise ValueError("tensor %s: no dtype, shape and data_offsets" % name)
    if size - 8 - length != end:
        raise ValueError("%d bytes of data, the header says %d" % (size - 8 - length, end))
    return tensors


def hf_bert_problems(root, folder):
    """Problems of ``root/folder`` as a transformers BERT ``save_pretrained`` folder with its
    tokenizer: ``config.json`` (``model_type`` bert), weights (HF_WEIGHT_FILES; a safetensors
    file's header and size are checked, and its word embeddings against ``vocab_size`` and
    ``hidden_size``; a shard index's files must exist), ``vocab.txt`` with BERT's special tokens
    and no more lines than ``vocab_size``."""
    problems, where = [], os.path.join(root, folder)
    try:
        config = _json_file(os.path.join(where, "config.json"))
    except ValueError as err:
        return ["%s/config.json: %s" % (folder, err)]
    if not isinstance(config, dict) or config.get("model_type") != "bert":
        return ["%s/config.json: model_type %r, expected bert" % (
            folder, config.get("model_type") if isinstance(config, dict) else None)]
    vocab_size, hidden = config.get("vocab_size"), config.get("hidden_size")
    weights = [n for n in HF_WEIGHT_FILES if os.path.isfile(os.path.join(where, n))]
    if not weights:
        problems.append("%s/: no weights (%s)" % (folder, ", ".join(HF_WEIGHT_FILES)))
    elif weights[0] == "model.safetensors":
        try:
            tensors = safetensors_index(os.path.join(where, weights[0]))
        except ValueError as err:
            tensors = {}
            problems.append("%s/model.safetensors: %s" % (folder, err))
        shape = tensors.get("bert.embeddings.word_embeddings.weight", (None, None))[1]
        if shape is not None and shape != [vocab_size, hidden]:
            problems.append("%s/model.safetensors: word embeddings %s, config.json says "
                            "[vocab_size %s, hidden_size %s]" % (folder, shape, vocab_size, hidden))
    elif weights[0].endswith(".index.json"):
        try:
            shards = set(_json_file(os.path.join(where, weights[0]))["weight_map"].values())
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            shards = set()
            problems.append("%s/%s: no weight_map (%s)" % (folder, weights[0], err))
        missing = sorted(s for s in shards if not os.path.isfile(os.path.join(where, s)))
        if missing:
            problems.append("%s/: shards missing: %s" % (folder, _some(missing)))
    elif os.path.getsize(os.path.join(where, weights[0])) == 0:
        problems.append("%s/%s: empty" % (folder, weights[0]))
    if not _need(root, folder + "/vocab.txt", problems):
        return problems
    if os.path.getsize(os.path.join(where, "vocab.txt")) < HF_SMALL_FILE:
        with open(os.path.join(where, "vocab.txt"), "rb") as handle:
            tokens = handle.read().decode("utf-8", "replace").splitlines()
        missing = [t for t in BERT_SPECIAL_TOKENS if t not in tokens]
        if missing:
            problems.append("%s/vocab.txt: no %s token" % (folder, ", ".join(missing)))
        if isinstance(vocab_size, int) and len(tokens) > vocab_size:
            problems.append("%s/vocab.txt: %d tokens, config.json vocab_size %d" % (
                folder, len(tokens), vocab_size))
    return problems


def check_bert_eval_text(root):
    """FlagPerf's bertLarge inference data: ``eval.txt`` (MLPerf BERT's evaluation text,
    non-empty UTF-8; its first 64 KiB is read) and at least one model folder, a subfolder with
    a ``config.json`` (FlagPerf's ``weights/``, the case's ``weight_dir``): a transformers BERT
    saved with ``save_pretrained`` and its tokenizer's ``vocab.txt`` (``hf_bert_problems``).
    Reads the weights' header and size, never the weights.
    """
    problems = []
    if _need(root, BERT_EVAL_FILE, problems):
        problem = _text_problem(root, BERT_EVAL_FILE)
        if problem:
            problems.append(problem)
    folders = [name for name in _subfolders(root)
               if os.path.isfile(os.path.join(root, name, "config.json"))]
    if not folders:
        problems.append("no model folder (a subfolder with a transformers BERT's config.json, "
                        "weights and vocab.txt, as FlagPerf's weights/)")
    for name in folders:
        problems.extend(hf_bert_problems(root, name))
    return problems


# --- WMT14 en-de ---------------------------------------------------------------------------

WMT14_SPLITS, WMT14_LANGS = ("train", "valid", "test"), ("en", "de")
# The untokenized German references of the test set that FlagPerf scores BLEU against.
WMT14_RAW_REFERENCE = "test.raw.de"
# Line counts of a text pair are compared when both files are smaller than this (valid and
# test always; the 4.5 M-line train pair is only checked for presence and encoding).
COUNT_LINES_UNDER = 64 << 20


def _count_lines(path):
    count = 0
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            count += block.count(b"\n")
    return count


def _text_problem(root, name):
    """What is wrong with the text file ``root/name`` by its first 64 KiB (empty, or not UTF-8),
    or None."""
    head = _head(os.path.join(root, name), 1 << 16)
    if not head.strip():
        return "%s: empty" % name
    try:
        codecs.getincrementaldecoder("utf-8")().decode(head, final=False)
    except UnicodeDecodeError as err:
        return "%s: not UTF-8 (byte %d)" % (name, err.start)
    return None


def check_wmt14_en_de_text(root):
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
            if not _need(root, name, problems):
                continue
            problem = _text_problem(root, name)
            if problem:
                problems.append(problem)
                continue
            paths.append(os.path.join(root, name))
        if len(paths) == 2 and all(os.path.getsize(p) < COUNT_LINES_UNDER for p in paths):
            counts = [_count_lines(p) for p in paths]
            if counts[0] != counts[1]:
                problems.append("%s.en has %d lines, %s.de %d: not line-aligned" % (
                    split, counts[0], split, counts[1]))
    return problems


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


def check_wmt14_en_de_fairseq(root):
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
        if not _need(root, name, problems):
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
            problems.append("%s: lines that are not '<token> <count>': %s" % (name, _some(bad)))
        elif not lines:
            problems.append("%s: empty" % name)
    for split in WMT14_SPLITS:
        counts = {}
        for lang in WMT14_LANGS:
            stem = "%s.en-de.%s" % (split, lang)
            have_idx = _need(root, stem + ".idx", problems)
            have_bin = _need(root, stem + ".bin", problems)
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
        if split == "test" and _need(root, WMT14_RAW_REFERENCE, problems):
            problems.extend(_raw_reference_problems(root, counts.get("de", (None, None))[1]))
    return problems


def _raw_reference_problems(root, sentences):
    problem = _text_problem(root, WMT14_RAW_REFERENCE)
    if problem:
        return [problem]
    lines = _count_lines(os.path.join(root, WMT14_RAW_REFERENCE))
    if sentences is not None and lines != sentences:
        return ["%s has %d lines, the test set %d sentences" % (
            WMT14_RAW_REFERENCE, lines, sentences)]
    return []


# --- CPM-1 fine-tuning text ------------------------------------------------------------------

CPM_SPLITS = ("train.txt", "valid.txt")
CPM_TOKENIZER_FILES = ("vocab.json", "chinese_vocab.model")
CPM_SPECIAL_PIECES = ("<pad>", "<eod>")
# vocab.json files read whole when smaller than this (CPM's 30000 pieces: about 1 MB).
CPM_VOCAB_READ_UNDER = 16 << 20


def check_cpm_text(root):
    """CPM-1 fine-tuning text as FlagPerf's cpm case reads it: ``train.txt`` and ``valid.txt``
    (non-empty UTF-8, one document a line; the first 64 KiB is read) and at least one tokenizer
    folder (a subfolder with ``vocab.json`` and ``chinese_vocab.model``, as FlagPerf's
    ``bpe_3w_new/``), whose ``vocab.json`` is a JSON object of piece -> id that has ``<pad>``
    and ``<eod>`` and whose ``chinese_vocab.model`` is not empty.
    """
    problems = []
    for name in CPM_SPLITS:
        if not _need(root, name, problems):
            continue
        problem = _text_problem(root, name)
        if problem:
            problems.append(problem)
    folders = [name for name in _subfolders(root)
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


# --- GLM's ReCoRD hdf5 ----------------------------------------------------------------------

# FlagPerf glm's train_data and eval_data (training/benchmarks/glm/pytorch/config/_base.py).
GLM_RECORD_FILES = ("ReCoRD/glm_train_eval_hdf5_sparse/train_hdf5/train_sparse.hdf5",
                    "ReCoRD/glm_train_eval_hdf5_sparse/eval_hdf5/eval_sparse.hdf5")


def is_hdf5(path):
    """Whether the file at ``path`` has the HDF5 signature where HDF5 puts it."""
    with open(path, "rb") as handle:
        return superblock_offset(handle) is not None


def check_glm_record_hdf5(root):
    """SuperGLUE ReCoRD as FlagPerf's glm case reads it (BAAI's ``glm_train_dataset.zip``):
    ``ReCoRD/glm_train_eval_hdf5_sparse/train_hdf5/train_sparse.hdf5`` and
    ``.../eval_hdf5/eval_sparse.hdf5``, HDF5 files (their signature is read). What is inside,
    CSR groups written by h5sparse, is the case loader's to check: its members are groups,
    which this index reader does not describe. The initial checkpoint beside them is the
    case's ``checkpoint``, checked apart.
    """
    problems = []
    for relative in GLM_RECORD_FILES:
        if _need(root, relative, problems) and not is_hdf5(os.path.join(root, relative)):
            problems.append("%s: not an HDF5 file (no signature)" % relative)
    return problems


# --- registry and script -------------------------------------------------------------------

CHECKERS = {
    "imagenet": check_imagenet,
    "imagenet_tfrecord": check_imagenet_tfrecord,
    "coco2017": check_coco2017,
    "ljspeech": check_ljspeech,
    "librispeech": check_librispeech,
    "mlperf_bert_hdf5": check_mlperf_bert_hdf5,
    "wmt14_en_de_text": check_wmt14_en_de_text,
    "wmt14_en_de_fairseq": check_wmt14_en_de_fairseq,
    "cpm_text": check_cpm_text,
    "glm_record_hdf5": check_glm_record_hdf5,
    "bert_eval_text": check_bert_eval_text,
}


def check(format_name, path):
    """Problems of the data set folder ``path`` in format ``format_name`` (a key of CHECKERS);
    an empty list when its layout is right.

    Raises:
        KeyError: an unknown format.
    """
    checker = CHECKERS[format_name]
    if not os.path.isdir(path):
        return ["%s: not a folder" % path]
    try:
        return checker(str(path))
    except OSError as err:  # unreadable entries, a file vanishing mid-check
        return ["%s: %s" % (err.filename or path, err.strerror or err)]


def checkpoint_problems(root, relative, sha256):
    """Problems of the initial checkpoint ``relative`` under the data folder ``root``: missing,
    or its SHA-256 is not ``sha256`` (read whole, in 1 MiB blocks; None: not pinned, the file
    need only exist)."""
    import hashlib

    path = os.path.join(root, relative)
    if not os.path.isfile(path):
        return ["%s: no such checkpoint file" % relative]
    if sha256 is None:
        return []
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    if digest.hexdigest() != sha256:
        return ["%s: SHA-256 %s, the case expects %s" % (relative, digest.hexdigest(), sha256)]
    return []


def _requests(argv):
    """The checks asked for on the command line: ``[{"format", "path", ...}]``."""
    if len(argv) == 2:
        return [{"format": argv[0], "path": argv[1]}], False
    if len(argv) != 1 or not argv[0].lstrip().startswith(("[", "{")):
        raise ValueError("usage: layout_check.py FORMAT PATH | JSON list of {format, path}")
    try:
        requests = json.loads(argv[0])
    except ValueError as err:
        raise ValueError("the argument is not JSON (%s)" % err)
    if isinstance(requests, dict):
        requests = [requests]
    if not isinstance(requests, list) or not all(
            isinstance(r, dict) and isinstance(r.get("format"), str)
            and isinstance(r.get("path"), str) for r in requests):
        raise ValueError("the JSON argument must be a list of {format, path} objects")
    return requests, True


def main(argv):
    try:
        requests, as_json = _requests(argv)
        unknown = sorted(set(r["format"] for r in requests) - set(CHECKERS))
        if unknown:
            raise ValueError("unknown data format %s (known: %s)" % (
                ", ".join(unknown), ", ".join(sorted(CHECKERS))))
    except ValueError as err:
        if argv and argv[0].lstrip().startswith(("[", "{")):
            print(json.dumps({"error": str(err)}))
        else:
            sys.stderr.write("layout_check.py: %s\n" % err)
        return 2
    results = []
    for request in requests:
        result = dict(request)
        result["problems"] = check(request["format"], request["path"])
        point = request.get("checkpoint")
        if isinstance(point, dict) and not result["problems"]:
            pinned = point.get("sha256")
            result["problems"] = checkpoint_problems(request["path"], str(point.get("path")),
                                                     None if pinned is None else str(pinned))
        onnx = request.get("onnx")
        if isinstance(onnx, str) and not result["problems"] and not os.path.isfile(
                os.path.join(request["path"], onnx)):
            result["problems"] = ["%s: no such ONNX file (exist_onnx_path: the round loads it "
                                  "instead of exporting one)" % onnx]
        results.append(result)
    if as_json:
        print(json.dumps({"results": results}))
    else:
        for problem in results[0]["problems"]:
            print(problem)
    return 1 if any(r["problems"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
