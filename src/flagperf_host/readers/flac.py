"""FLAC: a file's STREAMINFO (rate, channels, sample size, length) from its first 42 bytes."""

import struct


def flac_streaminfo(path):
    """``(sample_rate, channels, bits_per_sample, total_samples)`` from a FLAC file's STREAMINFO.

    Raises:
        ValueError: not a FLAC file (no ``fLaC`` marker or no STREAMINFO first).
    Format: https://xiph.org/flac/format.html (METADATA_BLOCK_STREAMINFO).
    """
    with open(path, "rb") as handle:
        head = handle.read(42)
    if len(head) < 42 or head[:4] != b"fLaC" or (head[4] & 0x7F) != 0:
        raise ValueError("not a FLAC file (no fLaC marker and STREAMINFO block)")
    # Bytes 18..25: sample rate (20 bits), channels - 1 (3), bits per sample - 1 (5), samples (36).
    packed = struct.unpack(">Q", head[18:26])[0]
    return (packed >> 44, ((packed >> 41) & 0x7) + 1, ((packed >> 36) & 0x1F) + 1,
            packed & 0xFFFFFFFFF)
