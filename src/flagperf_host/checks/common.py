"""What the data checks share: listing a folder, sampling, naming problems, file heads."""

import codecs
import os

# Files of a sample whose headers a checker reads: enough to catch a wrong encoding or rate
# in a set that was converted as a whole, few enough to stay cheap on a network file system.
HEADER_SAMPLE = 16
# Problems of one kind listed by name before "and N more".
SHOWN = 3


def entries(folder):
    """Sorted names in ``folder``, hidden ones (``.complete`` markers) left out."""
    return sorted(name for name in os.listdir(folder) if not name.startswith("."))


def subfolders(folder):
    """Sorted names of the folders in ``folder``, hidden ones left out."""
    return [name for name in entries(folder) if os.path.isdir(os.path.join(folder, name))]


def spread(items, count=HEADER_SAMPLE):
    """At most ``count`` items evenly spread over ``items`` (first and last included)."""
    items = list(items)
    if len(items) <= count:
        return items
    step = (len(items) - 1) / float(count - 1)
    return [items[int(round(i * step))] for i in range(count)]


def some(names, total=None):
    """``a, b, c`` or ``a, b, c and 7 more``."""
    names = list(names)
    total = len(names) if total is None else total
    shown = ", ".join(str(n) for n in names[:SHOWN])
    return shown if total <= SHOWN else "%s and %d more" % (shown, total - SHOWN)


def need(root, relative, problems, folder=False):
    """True when ``root/relative`` is a file (or folder); else a problem is added."""
    path = os.path.join(root, relative)
    if folder and not os.path.isdir(path):
        problems.append("%s/: missing folder" % relative)
        return False
    if not folder and not os.path.isfile(path):
        problems.append("%s: missing file" % relative)
        return False
    return True


def head(path, size):
    """The first ``size`` bytes of the file at ``path`` (fewer when it is shorter)."""
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


def count_lines(path):
    """How many newlines the file at ``path`` holds (read in 1 MiB blocks)."""
    count = 0
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            count += block.count(b"\n")
    return count


def text_problem(root, name):
    """What is wrong with the text file ``root/name`` by its first 64 KiB (empty, or not UTF-8),
    or None."""
    start = head(os.path.join(root, name), 1 << 16)
    if not start.strip():
        return "%s: empty" % name
    try:
        codecs.getincrementaldecoder("utf-8")().decode(start, final=False)
    except UnicodeDecodeError as err:
        return "%s: not UTF-8 (byte %d)" % (name, err.start)
    return None
