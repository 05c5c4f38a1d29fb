"""Format ``megatron_indexed``: GPT tokens in Megatron's indexed data set, with GPT-2's BPE files.

Real layout (what the Megatron-core LLM cases read, ``gpt`` and ``llama3_8b``; made by
``tools/preprocess_data.py --tokenizer-type GPT2BPETokenizer --json-keys text
--output-prefix gpt --append-eod`` from JSON lines of ``{"text": ...}``):

* ``gpt_text_document.bin``: every document's token ids back to back, each document ending
  with the end-of-document token ``<|endoftext|>``; uint16 when the vocabulary has fewer than
  65500 tokens, else int32 (megatron-core's ``DType.optimal_dtype``);
* ``gpt_text_document.idx``: ``MMIDIDX`` header, sequence lengths, byte pointers and document
  indices (layout: ``flagperf_host.readers.megatron_index``); one sequence per document;
* ``gpt2-vocab.json`` (token -> id) and ``gpt2-merges.txt`` (``#version`` then one merge pair
  a line): the byte-level BPE the case's ``GPT2BPETokenizer`` reads. The standard
  configuration uses GPT-2's own 50257-token files under these names, which the site
  downloads, as upstream's preprocess step does.

What the checker accepts: ``flagperf_host.checks.megatron_indexed.check``.

Tiny data (:func:`generate`): CPython's documentation topics, ``pydoc_data.topics.topics``
(the texts of ``help()``, about 465 KB of English in every CPython; 79 topics), one document
per paragraph, topics in key order (:func:`documents`): 2608 documents in CPython 3.11.7, so
that Megatron's document-wise train/valid/test split (``--split 949,50,1``) leaves a few in
each part, where the 79 topics would leave none to the test part. Nothing is downloaded, so
a small byte-level BPE (``VOCAB_SIZE`` tokens) is trained on the documents with
``tokenizers`` and saved in GPT-2's file format; megatron-core's ``IndexedDatasetBuilder``
writes the tokens. The files depend on the interpreter's version (its topics) and on that of
``tokenizers``, and are the same on every run of the same ones.
"""

from __future__ import annotations

import re
import warnings
from functools import partial
from pathlib import Path

from flagperf_ansible.datasets.registry import Format
from flagperf_host import data_check
from flagperf_host.checks.megatron_indexed import MEGATRON_EOD, MEGATRON_PREFIX

NAME = "megatron_indexed"
VOCAB_SIZE = 2048
# Paragraphs: blocks of text between blank lines (lines of whitespace count as blank).
_PARAGRAPH_BREAK = re.compile(r"\n\s*\n")


def documents() -> list[str]:
    """The paragraphs of CPython's documentation topics (``pydoc_data.topics.topics``), topics
    by key, each paragraph without its trailing whitespace."""
    from pydoc_data.topics import topics

    return [paragraph.rstrip() for key in sorted(topics)
            for paragraph in _PARAGRAPH_BREAK.split(topics[key]) if paragraph.strip()]


def train_tokenizer(texts: list[str], vocab_size: int = VOCAB_SIZE):
    """A byte-level BPE (GPT-2's pre-tokenization, no prefix space) of ``vocab_size`` tokens
    trained on ``texts``, ``<|endoftext|>`` its id 0: a ``tokenizers.ByteLevelBPETokenizer``,
    the same merges for the same texts in every process (unlike the unigram trainer's).

    Raises:
        ImportError: ``tokenizers`` is not installed.
    """
    from tokenizers import ByteLevelBPETokenizer

    tokenizer = ByteLevelBPETokenizer()
    tokenizer.train_from_iterator(texts, vocab_size=vocab_size, min_frequency=2,
                                  special_tokens=[MEGATRON_EOD], show_progress=False)
    return tokenizer


def _indexed_dataset_builder():
    try:
        with warnings.catch_warnings():
            # megatron.core warns on import of Transformer Engine and Apex missing and of
            # deprecated imports, none of which the builder uses.
            warnings.simplefilter("ignore")
            from megatron.core.datasets.indexed_dataset import DType, IndexedDatasetBuilder
    except ImportError as err:
        raise ImportError(f"data format {NAME}: megatron-core writes the .bin/.idx pair "
                          f"(pip install megatron-core): {err}") from err
    return DType, IndexedDatasetBuilder


def generate(target: Path) -> dict[str, int]:
    """Write the tiny data set under ``target``: ``gpt2-vocab.json`` and ``gpt2-merges.txt``
    (:func:`train_tokenizer`), then ``gpt_text_document.{bin,idx}`` as ``preprocess_data.py
    --append-eod`` writes them (one ``add_document`` per document, its ids and
    ``<|endoftext|>``); returns documents, tokens (with the end-of-document ones) and the
    vocabulary size.

    Raises:
        ImportError: megatron-core or ``tokenizers`` is not installed.
        OSError: ``target`` cannot be written.
    """
    DType, IndexedDatasetBuilder = _indexed_dataset_builder()
    texts = documents()
    tokenizer = train_tokenizer(texts)
    target.mkdir(parents=True, exist_ok=True)
    tokenizer.save_model(str(target), "gpt2")  # gpt2-vocab.json and gpt2-merges.txt
    eod, vocab_size = tokenizer.token_to_id(MEGATRON_EOD), tokenizer.get_vocab_size()
    prefix = str(target / MEGATRON_PREFIX)
    builder = IndexedDatasetBuilder(prefix + ".bin", dtype=DType.optimal_dtype(vocab_size))
    tokens = 0
    for text in texts:
        ids = tokenizer.encode(text).ids + [eod]
        builder.add_document(ids, [len(ids)])
        tokens += len(ids)
    builder.finalize(prefix + ".idx")
    return {"documents": len(texts), "tokens": tokens, "vocab": vocab_size}


FORMAT = Format(
    name=NAME,
    description="Megatron indexed data set gpt_text_document.{bin,idx} with GPT-2's BPE files "
                "gpt2-vocab.json, gpt2-merges.txt (tiny: the paragraphs of CPython's pydoc "
                "topics, a 2048-token BPE)",
    check=partial(data_check.check, NAME),
    generate=generate,
)
