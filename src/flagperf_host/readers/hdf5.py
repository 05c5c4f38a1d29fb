"""HDF5: the names, shapes and classes of a file's root datasets, read from its index.

Format: https://docs.hdfgroup.org/hdf5/develop/_f_m_t3.html. Covers what h5py writes: superblock
0/1 with a symbol-table root group (h5py's default), superblock 2/3 with links kept in the root
object header (libver="latest", up to 8 links); object headers version 1 and 2.
"""

import os
import struct


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


def is_hdf5(path):
    """Whether the file at ``path`` has the HDF5 signature where HDF5 puts it."""
    with open(path, "rb") as handle:
        return superblock_offset(handle) is not None
