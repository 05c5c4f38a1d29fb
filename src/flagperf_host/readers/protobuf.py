"""Protobuf's wire format: a serialized message's fields, without its schema, and the varint a
writer of messages needs (the protobuf encoding guide:
https://protobuf.dev/programming-guides/encoding/)."""


def varint(data, at):
    """``(value, position after it)`` of the base-128 varint at ``data[at]`` (bytes or bytearray).

    Raises:
        ValueError: truncated, or longer than 10 bytes.
    """
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
        key, at = varint(data, at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, at = varint(data, at)
        elif wire in (1, 2, 5):
            if wire == 2:
                size, at = varint(data, at)
            else:
                size = 8 if wire == 1 else 4
            if at + size > len(data):
                raise ValueError("truncated protobuf field %d" % number)
            value, at = bytes(data[at:at + size]), at + size
        else:
            raise ValueError("protobuf wire type %d of field %d is not covered" % (wire, number))
        fields.append((number, wire, value))
    return fields


def varint_bytes(value):
    """The base-128 varint of an unsigned 64-bit ``value`` (a negative int64: its two's
    complement, 10 bytes), as a writer of protobuf messages needs it."""
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | (0x80 if value else 0))
        if not value:
            return bytes(out)
