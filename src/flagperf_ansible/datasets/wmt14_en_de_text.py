"""Format ``wmt14_en_de_text``: WMT14 English-German as line-aligned text.

Real layout: ``{train,valid,test}.{en,de}``, one sentence a line, Moses-tokenized (and BPE'd)
as fairseq's ``examples/translation/prepare-wmt14en2de.sh`` writes them (4.5 M training pairs,
newstest2014 as test); what the checker accepts: ``layout_check.check_wmt14_en_de_text``.

Tiny data: the 30 sentence pairs of ``_corpus.EN_DE``, Moses-style tokens separated by spaces:
the first 24 for train, then 3 for valid and 3 for test.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

from flagperf_ansible.datasets import layout_check
from flagperf_ansible.datasets._corpus import EN_DE, tokenize
from flagperf_ansible.datasets.registry import Format

NAME = "wmt14_en_de_text"
SPLITS = {"train": EN_DE[:24], "valid": EN_DE[24:27], "test": EN_DE[27:]}


def tokenized_splits() -> dict[str, dict[str, list[list[str]]]]:
    """``{split: {lang: [sentence tokens]}}`` of the tiny corpus."""
    return {split: {lang: [tokenize(pair[side]) for pair in pairs]
                    for side, lang in enumerate(layout_check.WMT14_LANGS)}
            for split, pairs in SPLITS.items()}


def generate(target: Path) -> dict[str, int]:
    """Write the tiny corpus's text files under ``target``; returns sentence pairs per split.

    Raises:
        OSError: ``target`` cannot be written.
    """
    target.mkdir(parents=True, exist_ok=True)
    for split, sides in tokenized_splits().items():
        for lang, sentences in sides.items():
            (target / f"{split}.{lang}").write_text(
                "".join(" ".join(tokens) + "\n" for tokens in sentences), encoding="utf-8")
    return {split: len(pairs) for split, pairs in SPLITS.items()}


FORMAT = Format(
    name=NAME,
    description="WMT14 en-de text: {train,valid,test}.{en,de}, one tokenized sentence a line "
                "(tiny: 30 pairs)",
    check=partial(layout_check.check, NAME),
    generate=generate,
)
