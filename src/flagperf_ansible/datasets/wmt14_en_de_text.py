"""Format ``wmt14_en_de_text``: WMT14 English-German as line-aligned text.

Real layout: ``{train,valid,test}.{en,de}``, one sentence a line, Moses-tokenized (and BPE'd)
as fairseq's ``examples/translation/prepare-wmt14en2de.sh`` writes them (4.5 M training pairs,
newstest2014 as test); what the checker accepts:
``flagperf_host.checks.wmt14_en_de_text.check``.

Tiny data: the 30 sentence pairs of ``_corpus.EN_DE`` (24 train, 3 valid, 3 test, always
there), then the English-German pairs of the gettext catalogues of Debian's ``required``
packages (and ``make``, which CI installs) that this machine has under
``/usr/share/locale/de/LC_MESSAGES``: the msgid is English, the msgstr its German translation.
Only short plain sentences are kept (letters and ``,.'-`` only, 2 to 10 words, no format
directives or command-line options, no plural or context entries, a translation that differs
from the original); the SHA-256 of a pair's msgid puts it into valid (1 in 20), test (1 in 20)
or train, so the selection is deterministic for a given set of catalogues. On bookworm about
1020 pairs pass; an image without the catalogues (Debian's ``-slim`` images drop
/usr/share/locale) gets only the 30 hand-written ones, and ``generate`` says how many
catalogues it read.

Tokens are split as Moses' ``tokenizer.perl -a`` splits them (the recipe's flag): words,
single punctuation marks, and a hyphen inside a word as its own ``@-@`` token.
"""

from __future__ import annotations

import hashlib
import re
import struct
from functools import partial
from pathlib import Path

from flagperf_ansible.datasets._corpus import EN_DE
from flagperf_ansible.datasets.registry import Format
from flagperf_host import data_check
from flagperf_host.checks.wmt14_en_de_text import WMT14_LANGS

NAME = "wmt14_en_de_text"
LOCALE_DIR = Path("/usr/share/locale/de/LC_MESSAGES")
# Text domains of Debian's priority-required packages (every Debian system has them: apt, bash,
# coreutils, diffutils, dpkg, findutils, grep, libpam-runtime, login, sed, tar) and make (.ci/run
# installs it). Read in this order; the first catalogue with a msgid keeps it.
CATALOGUES = ("coreutils", "dpkg", "apt", "bash", "diffutils", "findutils", "grep",
              "Linux-PAM", "shadow", "sed", "tar", "make")
HELD_OUT = 20  # 1 pair in HELD_OUT goes to valid, 1 to test
_PLAIN_EN = re.compile(r"[A-Za-z][A-Za-z,.' -]*[A-Za-z.]")
_PLAIN_DE = re.compile(r"[\w,.' -]+")
_TOKEN = re.compile(r"\w+(?:'\w+)?(?:-\w+)*|[^\w\s]")
_MO_MAGIC = 0x950412DE


def tokenize(line: str) -> list[str]:
    """``line`` split as Moses' ``tokenizer.perl -a`` splits it: words (with an inner
    apostrophe), single punctuation marks, and each hyphen inside a word as ``@-@``."""
    tokens = []
    for token in _TOKEN.findall(line):
        parts = token.split("-") if len(token) > 1 else [token]
        tokens.append(parts[0])
        for part in parts[1:]:
            tokens += ["@-@", part]
    return tokens


def read_mo(path: Path) -> dict[str, str]:
    """``{msgid: msgstr}`` of a compiled gettext catalogue, singular entries without context.

    Layout: GNU gettext manual, "The Format of GNU MO Files" (magic, revision, count, offsets of
    the original and translated string tables of (length, offset) pairs); strings are decoded
    with the charset of the header entry (msgid ""). Raises ValueError: not an MO file.
    """
    data = path.read_bytes()
    if len(data) < 20:
        raise ValueError(f"{path}: not an MO file")
    for order in ("<", ">"):
        magic, _, count, originals, translations = struct.unpack(order + "5I", data[:20])
        if magic == _MO_MAGIC:
            break
    else:
        raise ValueError(f"{path}: not an MO file (magic)")

    def string(table: int, number: int) -> bytes:
        start = table + 8 * number
        length, offset = struct.unpack(order + "2I", data[start:start + 8])
        return data[offset:offset + length]

    raw = [(string(originals, n), string(translations, n)) for n in range(count)]
    header = dict(raw).get(b"", b"").decode("ascii", "replace")
    charset = re.search(r"charset=([\w-]+)", header)
    encoding = charset.group(1) if charset else "utf-8"
    catalogue = {}
    for msgid, msgstr in raw:
        if not msgid or b"\x00" in msgid or b"\x04" in msgid:  # header, plural, context
            continue
        try:
            catalogue[msgid.decode(encoding)] = msgstr.decode(encoding)
        except (UnicodeDecodeError, LookupError):
            continue
    return catalogue


def _plain(english: str, german: str) -> bool:
    # untranslated; outer or doubled spaces, "instead ...", "apt.conf": not Moses' tokens
    if english == german or any(re.search(r"^\s|\s$|  | [.,]|[.,]\w", text)
                                for text in (english, german)):
        return False
    if any(re.search(r"(^|\W)-|-(\W|$)", text) for text in (english, german)):
        return False  # options, word parts ("Inotify- und"), "Konf.-Dateien"
    if not _PLAIN_EN.fullmatch(english) or not _PLAIN_DE.fullmatch(german):
        return False
    if any(ch.isdigit() or ch == "_" for ch in german):
        return False
    return 2 <= len(english.split()) <= 10 and 1 <= len(german.split()) <= 12


def catalogue_pairs(locale_dir: Path = LOCALE_DIR) -> tuple[list[tuple[str, str]], int]:
    """The plain English-German pairs of CATALOGUES found in ``locale_dir`` (each catalogue's
    in msgid order, a msgid kept once) and how many catalogues were read."""
    pairs, seen, read = [], set(), 0
    for domain in CATALOGUES:
        path = locale_dir / f"{domain}.mo"
        try:
            catalogue = read_mo(path)
        except (OSError, ValueError, struct.error):
            continue  # not installed here, or not readable: the corpus is smaller
        read += 1
        for english in sorted(catalogue):
            german = catalogue[english]
            if english.lower() not in seen and _plain(english, german):
                seen.add(english.lower())
                pairs.append((english, german))
    return pairs, read


def split_pairs(locale_dir: Path = LOCALE_DIR) -> tuple[dict[str, list[tuple[str, str]]], int]:
    """``({split: [(english, german)]}, catalogues read)``: the hand-written pairs first, then
    the catalogues' by the SHA-256 of the msgid (see the module docstring)."""
    splits = {"train": list(EN_DE[:24]), "valid": list(EN_DE[24:27]), "test": list(EN_DE[27:])}
    pairs, read = catalogue_pairs(locale_dir)
    for english, german in pairs:
        bucket = int(hashlib.sha256(english.encode("utf-8")).hexdigest()[:8], 16) % HELD_OUT
        splits["valid" if bucket == 0 else "test" if bucket == 1 else "train"].append(
            (english, german))
    return splits, read


def tokenized_splits(locale_dir: Path = LOCALE_DIR) -> dict[str, dict[str, list[list[str]]]]:
    """``{split: {lang: [sentence tokens]}}`` of the tiny corpus."""
    splits, _ = split_pairs(locale_dir)
    return {split: {lang: [tokenize(pair[side]) for pair in pairs]
                    for side, lang in enumerate(WMT14_LANGS)}
            for split, pairs in splits.items()}


def generate(target: Path) -> dict[str, int]:
    """Write the tiny corpus's text files under ``target``; returns sentence pairs per split
    and the number of gettext catalogues read.

    Raises:
        OSError: ``target`` cannot be written.
    """
    target.mkdir(parents=True, exist_ok=True)
    splits, read = split_pairs()
    for split, pairs in splits.items():
        for side, lang in enumerate(WMT14_LANGS):
            (target / f"{split}.{lang}").write_text(
                "".join(" ".join(tokenize(pair[side])) + "\n" for pair in pairs),
                encoding="utf-8")
    return {**{split: len(pairs) for split, pairs in splits.items()}, "catalogues": read}


FORMAT = Format(
    name=NAME,
    description="WMT14 en-de text: {train,valid,test}.{en,de}, one tokenized sentence a line "
                "(tiny: 30 pairs + gettext catalogues' en-de pairs)",
    check=partial(data_check.check, NAME),
    generate=generate,
)
