"""Text to symbol ids as NVIDIA's Tacotron 2 recipe makes them (FlagPerf
``training/benchmarks/tacotron2/pytorch/model/utils/text/``, from keithito/tacotron): a text
cleaner, then one id per kept symbol of :data:`SYMBOLS`, ARPAbet in curly braces one id per
phoneme.

The symbol set is upstream's: ``_`` (padding), ``-``, the punctuation ``!'(),.:;? ``, the
letters ``A-Z`` and ``a-z``, and the 84 ARPAbet phonemes of CMUdict prefixed with ``@``: 148
symbols, the model's ``n_symbols``. torchaudio's character processor for its LJSpeech
pipelines keeps 38 of them with other ids, so it is not used.

Cleaners (``text_cleaners``): ``english_cleaners`` (upstream's: to ASCII, lower case, numbers
and abbreviations spelled out, runs of white space made one space), ``transliteration_cleaners``
and ``basic_cleaners``. Upstream transliterates with its ``unidecoder`` tables (about 3500
characters); here accents are stripped (NFKD) after a table of the Latin-1 letters and
punctuation where those tables say otherwise (``ü`` -> ``ue``, typographic quotes), and what
has no ASCII form is dropped (as upstream drops characters its tables lack). Upstream spells
numbers with the ``inflect`` package; here :func:`number_words` follows the same rules (see
there). LJSpeech's normalized column, the text of upstream's file lists, has numbers already
spelled out.
"""

from __future__ import annotations

import re
import unicodedata

#: CMUdict's phonemes with stress marks (upstream ``cmudict.valid_symbols``).
ARPABET = (
    "AA AA0 AA1 AA2 AE AE0 AE1 AE2 AH AH0 AH1 AH2 AO AO0 AO1 AO2 AW AW0 AW1 AW2 AY AY0 AY1 AY2 "
    "B CH D DH EH EH0 EH1 EH2 ER ER0 ER1 ER2 EY EY0 EY1 EY2 F G HH IH IH0 IH1 IH2 IY IY0 IY1 "
    "IY2 JH K L M N NG OW OW0 OW1 OW2 OY OY0 OY1 OY2 P R S SH T TH UH UH0 UH1 UH2 UW UW0 UW1 "
    "UW2 V W Y Z ZH").split()
PAD = "_"
#: Upstream's ``symbols``: the id of a symbol is its index.
SYMBOLS = ([PAD, "-"] + list("!'(),.:;? ") + list("ABCDEFGHIJKLMNOPQRSTUVWXYZ")
           + list("abcdefghijklmnopqrstuvwxyz") + ["@" + p for p in ARPABET])
SYMBOL_IDS = {symbol: i for i, symbol in enumerate(SYMBOLS)}

_CURLY = re.compile(r"(.*?)\{(.+?)\}(.*)", re.DOTALL)
_WHITESPACE = re.compile(r"\s+")
_ABBREVIATIONS = [(re.compile(rf"\b{short}\.", re.IGNORECASE), long) for short, long in [
    ("mrs", "misess"), ("mr", "mister"), ("dr", "doctor"), ("st", "saint"), ("co", "company"),
    ("jr", "junior"), ("maj", "major"), ("gen", "general"), ("drs", "doctors"),
    ("rev", "reverend"), ("lt", "lieutenant"), ("hon", "honorable"), ("sgt", "sergeant"),
    ("capt", "captain"), ("esq", "esquire"), ("ltd", "limited"), ("col", "colonel"),
    ("ft", "fort")]]
#: Where upstream's ``unidecoder`` tables differ from stripping accents (NFKD): German umlauts,
#: ligatures and letters without a decomposition, typographic quotes and hyphens.
_ASCII = str.maketrans({
    "\u00c4": "Ae", "\u00d6": "Oe", "\u00dc": "Ue", "\u00e4": "ae", "\u00f6": "oe", "\u00fc": "ue",
    "\u00df": "ss", "\u00c6": "AE", "\u00e6": "ae", "\u00d8": "O", "\u00f8": "o", "\u00d0": "D",
    "\u00f0": "d", "\u00de": "TH", "\u00fe": "th", "\u0110": "D", "\u0111": "d", "\u0141": "L",
    "\u0142": "l", "\u0131": "i", "\u00a2": "c", "\u00a5": "Y", "\u00d7": "x", "\u00b4": "'",
    "\u2010": "-", "\u2011": "-", "\u2012": "-", "\u2013": "-", "\u2018": "'", "\u2019": "'",
    "\u201c": '"', "\u201d": '"'})

_ONES = ("zero one two three four five six seven eight nine ten eleven twelve thirteen "
         "fourteen fifteen sixteen seventeen eighteen nineteen").split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()
_GROUPS = ("", "thousand", "million", "billion", "trillion", "quadrillion")
_ORDINAL = {"one": "first", "two": "second", "three": "third", "five": "fifth",
            "eight": "eighth", "nine": "ninth", "twelve": "twelfth"}


def _under_thousand(n: int) -> str:
    hundreds, rest = divmod(n, 100)
    words = [f"{_ONES[hundreds]} hundred"] if hundreds else []
    if rest >= 20:
        words.append(_TENS[rest // 10] + (f"-{_ONES[rest % 10]}" if rest % 10 else ""))
    elif rest:
        words.append(_ONES[rest])
    return " ".join(words)


def cardinal(n: int) -> str:
    """``n >= 0`` in words as inflect's ``number_to_words(n, andword='')`` writes it: groups of
    thousands joined by ``", "`` (``1234567``: "one million, two hundred thirty-four thousand,
    five hundred sixty-seven").

    Raises:
        ValueError: ``n`` is negative or 10**18 or more.
    """
    if n < 0 or n >= 1000 ** len(_GROUPS):
        raise ValueError(f"cannot spell {n}")
    if n == 0:
        return "zero"
    parts = []
    for power in range(len(_GROUPS) - 1, -1, -1):
        group = n // 1000 ** power % 1000
        if group:
            parts.append(_under_thousand(group) + (f" {_GROUPS[power]}" if power else ""))
    return ", ".join(parts)


def ordinal(n: int) -> str:
    """``n`` as an ordinal in words (``22``: "twenty-second")."""
    words = cardinal(n)
    head, sep, last = words.rpartition(" " if " " in words.split("-")[-1] else "-")
    last = _ORDINAL.get(last, (last[:-1] + "ieth") if last.endswith("y") else last + "th")
    return head + sep + last


def number_words(n: int) -> str:
    """A number as upstream's ``_expand_number`` reads it: 1001-2999 as years (2000 "two
    thousand", 2001-2009 "two thousand <n>", whole hundreds "<n> hundred", else in pairs with
    "oh" before a single digit: 1835 "eighteen thirty-five", 1905 "nineteen oh five"), other
    numbers as :func:`cardinal`."""
    if 1000 < n < 3000:
        if n == 2000:
            return "two thousand"
        if 2000 < n < 2010:
            return "two thousand " + cardinal(n % 100)
        if n % 100 == 0:
            return cardinal(n // 100) + " hundred"
        rest = n % 100
        return f"{cardinal(n // 100)} {'oh ' if rest < 10 else ''}{cardinal(rest)}"
    return cardinal(n)


def _dollars(match: re.Match) -> str:
    parts = match.group(1).split(".")
    if len(parts) > 2:
        return match.group(1) + " dollars"
    dollars = int(parts[0]) if parts[0] else 0
    cents = int(parts[1]) if len(parts) > 1 and parts[1] else 0
    spelled = [f"{dollars} dollar{'' if dollars == 1 else 's'}"] if dollars else []
    spelled += [f"{cents} cent{'' if cents == 1 else 's'}"] if cents else []
    return ", ".join(spelled) or "zero dollars"


def expand_numbers(text: str) -> str:
    """Upstream's ``normalize_numbers``: commas in numbers dropped, pounds and dollars, decimal
    points ("point"), ordinals, then every number by :func:`number_words`."""
    text = re.sub(r"([0-9][0-9,]+[0-9])", lambda m: m.group(1).replace(",", ""), text)
    text = re.sub(r"£([0-9,]*[0-9]+)", r"\1 pounds", text)
    text = re.sub(r"\$([0-9.,]*[0-9]+)", _dollars, text)
    text = re.sub(r"([0-9]+\.[0-9]+)", lambda m: m.group(1).replace(".", " point "), text)
    text = re.sub(r"([0-9]+)(st|nd|rd|th)", lambda m: ordinal(int(m.group(1))), text)
    return re.sub(r"[0-9]+", lambda m: number_words(int(m.group(0))), text)


def expand_abbreviations(text: str) -> str:
    for pattern, long in _ABBREVIATIONS:
        text = pattern.sub(long, text)
    return text


def to_ascii(text: str) -> str:
    """Typographic quotes, dashes and ligatures to ASCII, accents stripped, the rest dropped."""
    decomposed = unicodedata.normalize("NFKD", text.translate(_ASCII))
    return decomposed.encode("ascii", "ignore").decode("ascii")


def collapse_whitespace(text: str) -> str:
    return _WHITESPACE.sub(" ", text)


def basic_cleaners(text: str) -> str:
    return collapse_whitespace(text.lower())


def transliteration_cleaners(text: str) -> str:
    return collapse_whitespace(to_ascii(text).lower())


def english_cleaners(text: str) -> str:
    """Upstream's order: ASCII, lower case, numbers, abbreviations, white space."""
    text = expand_numbers(to_ascii(text).lower())
    return collapse_whitespace(expand_abbreviations(text))


CLEANERS = {"english_cleaners": english_cleaners,
            "transliteration_cleaners": transliteration_cleaners,
            "basic_cleaners": basic_cleaners}


def _ids(symbols) -> list[int]:
    return [SYMBOL_IDS[s] for s in symbols if s in SYMBOL_IDS and s not in ("_", "~")]


def text_to_sequence(text: str, cleaner_names: list[str] | tuple[str, ...]) -> list[int]:
    """Symbol ids of ``text`` after the cleaners (in order); ``{HH AW1 S}`` is ARPAbet, one id
    per phoneme; symbols outside :data:`SYMBOLS` (and the padding) are dropped.

    Raises:
        ValueError: an unknown cleaner name.
    """
    unknown = [name for name in cleaner_names if name not in CLEANERS]
    if unknown:
        raise ValueError(f"config text_cleaners: unknown {unknown}, expected some of "
                         + ", ".join(CLEANERS))

    def clean(part: str) -> str:
        for name in cleaner_names:
            part = CLEANERS[name](part)
        return part

    sequence: list[int] = []
    while text:
        match = _CURLY.match(text)
        if not match:
            sequence += _ids(clean(text))
            break
        sequence += _ids(clean(match.group(1)))
        sequence += _ids("@" + phoneme for phoneme in match.group(2).split())
        text = match.group(3)
    return sequence
