"""WMT14 en-de as fairseq binarized it, read as FlagPerf's transformer case reads it
(NVIDIA DeepLearningExamples' fairseq fork, vendored upstream in
training/benchmarks/transformer/pytorch/fairseq/data/).

* :class:`Dictionary`: ``dict.<lang>.txt``, ``<token> <count>`` a line; ids 0-3 are
  ``<Lua heritage>``, ``<pad>``, ``</s>``, ``<unk>`` (fairseq/data/dictionary.py).
* :class:`IndexedSentences`: ``<split>.en-de.<lang>.{idx,bin}``, the ``cached`` index of fairseq <=
  0.6 (``TNTIDX``, ids stored + 1) or the ``mmap`` one of fairseq >= 0.9 (``MMIDIDX``); the
  layouts are described in flagperf_ansible/datasets/wmt14_en_de_fairseq.py.
* :func:`batch_by_size`: token-based batches as fairseq's ``data_utils.batch_by_size`` (and
  NVIDIA's ``make_batches.cpp``) make them: sentences ordered by length, a batch closed before
  ``len(batch) * longest > max_tokens``.
* :class:`TokenBatches`: each item a padded batch, as ``LanguagePairDataset.collater`` pads it
  (source left-padded, previous output tokens = ``</s>`` + target[:-1]).
* :func:`detokenize` and :func:`bleu_statistics`: a hypothesis back to text and sacrebleu's
  sufficient statistics, summed over batches and ranks, scored by :func:`bleu_score` (upstream
  train/evaluator.py: beam search, ``@@ `` removed, Moses-detokenized, corpus BLEU against
  ``test.raw.de``, lowercased unless ``test_cased_bleu``).
"""

from __future__ import annotations

import re
import struct
from pathlib import Path

import numpy as np
import torch

SPECIALS = ("<Lua heritage>", "<pad>", "</s>", "<unk>")
PAD, EOS, UNK = 1, 2, 3
# fairseq's dtype codes (fairseq/data/indexed_dataset.py _code_to_dtype).
DTYPES = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 6: np.float32,
          7: np.float64, 8: np.uint16, 9: np.uint32, 10: np.uint64}
BLEU_STATISTICS = ("sys_len", "ref_len", "correct_1", "correct_2", "correct_3", "correct_4",
                   "total_1", "total_2", "total_3", "total_4")


class Dictionary:
    """A fairseq dictionary: ``symbols[id]``; ``len()`` counts the 4 special symbols.

    Raises:
        ValueError: a line that is not ``<token> <count>`` (naming the file and line).
    """

    def __init__(self, path: Path) -> None:
        self.symbols = list(SPECIALS)
        for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
            words = line.rstrip().split(" ")
            if words[-1] == "#fairseq:overwrite":
                words = words[:-1]
            if len(words) != 2 or not words[1].isdigit():
                raise ValueError(f"{path}: line {number} is not '<token> <count>'")
            self.symbols.append(words[0])

    def __len__(self) -> int:
        return len(self.symbols)

    def string(self, ids, remove_bpe: str | None = "@@ ") -> str:
        """The tokens of ``ids`` joined by spaces, stopping at ``</s>``, without padding; BPE
        continuation markers removed (fairseq ``Dictionary.string``)."""
        tokens = []
        for i in ids:
            i = int(i)
            if i == EOS:
                break
            if i != PAD:
                tokens.append(self.symbols[i] if 0 <= i < len(self.symbols) else "<unk>")
        text = " ".join(tokens)
        if remove_bpe:
            text = (text + " ").replace(remove_bpe, "").rstrip()
        return text


class IndexedSentences:
    """The sentences of ``<stem>.idx``/``<stem>.bin``, either index kind: ``len()``,
    ``sizes`` (int64 [N], ``</s>`` included) and ``[i]`` (an int64 array of token ids). The
    .bin is memory-mapped, as fairseq's ``MMapIndexedDataset`` maps it (the cached reader read
    it whole; 4.5 M pairs are about 1 GB).

    Raises:
        ValueError: not a fairseq index, or a .bin shorter than its index says (naming the file).
        OSError: a file cannot be read.
    """

    def __init__(self, stem: str | Path) -> None:
        idx = Path(f"{stem}.idx").read_bytes()
        bin_path = Path(f"{stem}.bin")
        if idx[:8] == b"TNTIDX\x00\x00":
            _, code, _, count, _ = struct.unpack("<QQQQQ", idx[8:48])
            # dim offsets, then data offsets (in elements), count + 1 of each
            self.offsets = np.frombuffer(idx, "<i8", count + 1, 48 + 8 * (count + 1))
            self.shift = -1  # Lua's 1-based ids
        elif idx[:9] == b"MMIDIDX\x00\x00":
            _, code, count = struct.unpack("<QBQ", idx[9:26])
            sizes = np.frombuffer(idx, "<i4", count, 26).astype(np.int64)
            pointers = np.frombuffer(idx, "<i8", count, 26 + 4 * count)  # in bytes
            element = np.dtype(DTYPES.get(code, np.uint8)).itemsize
            self.offsets = np.concatenate([[0], np.cumsum(sizes)]) + (
                pointers[0] // element if count else 0)
            self.shift = 0
        else:
            raise ValueError(f"{stem}.idx: not a fairseq index")
        if code not in DTYPES:
            raise ValueError(f"{stem}.idx: unknown dtype code {code}")
        self.tokens = np.memmap(bin_path, DTYPES[code], mode="r") if bin_path.stat().st_size \
            else np.zeros(0, DTYPES[code])
        if count and self.offsets[-1] > len(self.tokens):
            raise ValueError(f"{bin_path}: {len(self.tokens)} tokens, the index says "
                             f"{self.offsets[-1]}")
        self.sizes = np.diff(self.offsets).astype(np.int64)

    def __len__(self) -> int:
        return len(self.sizes)

    def __getitem__(self, i: int) -> np.ndarray:
        return self.tokens[self.offsets[i]:self.offsets[i + 1]].astype(np.int64) + self.shift


def batch_by_size(src_sizes, tgt_sizes, max_tokens: int, max_sentences: int = 0,
                  max_positions: int = 1024) -> list[list[int]]:
    """Sentence indices grouped into batches of at most ``max_tokens`` padded tokens
    (``len(batch) * max(longest source, longest target)``) and ``max_sentences`` sentences (0:
    no limit), sentences longer than ``max_positions`` left out; ordered by target then source
    length as fairseq's ``LanguagePairDataset.ordered_indices`` orders them.

    Raises:
        ValueError: ``max_tokens`` is smaller than a sentence that must fit.
    """
    src_sizes, tgt_sizes = np.asarray(src_sizes), np.asarray(tgt_sizes)
    order = np.lexsort((src_sizes, tgt_sizes))  # by target length, then source length
    batches, batch, longest = [], [], 0
    for i in order.tolist():
        size = int(max(src_sizes[i], tgt_sizes[i]))
        if size > max_positions:
            continue
        if size > max_tokens:
            raise ValueError(f"config max_tokens: {max_tokens} is below a sentence of {size}")
        wider = max(longest, size)
        if batch and ((len(batch) + 1) * wider > max_tokens
                      or (max_sentences and len(batch) == max_sentences)):
            batches.append(batch)
            batch, wider = [], size
        batch.append(i)
        longest = wider
    if batch:
        batches.append(batch)
    return batches


def pad(sentences: list, left: bool) -> torch.Tensor:
    """``[B, longest]`` int64 of ``sentences`` (int arrays), padded with ``<pad>`` on the left
    or the right."""
    longest = max(len(s) for s in sentences)
    out = torch.full((len(sentences), longest), PAD, dtype=torch.long)
    for row, sentence in enumerate(sentences):
        values = torch.as_tensor(np.asarray(sentence), dtype=torch.long)
        if left:
            out[row, longest - len(values):] = values
        else:
            out[row, :len(values)] = values
    return out


class TokenBatches(torch.utils.data.Dataset):
    """Each item one training batch ``(src [B, S], prev_output [B, T], target [B, T],
    ntokens)``: ``ntokens`` the target tokens (``</s>`` included), fairseq's count."""

    def __init__(self, src: list, tgt: list, batches: list[list[int]],
                 left_pad_source: bool = True) -> None:
        self.src, self.tgt, self.batches = src, tgt, batches
        self.left_pad_source = left_pad_source

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, index: int):
        rows = self.batches[index]
        target = pad([self.tgt[i] for i in rows], left=False)
        # fairseq's move_eos_to_beginning: </s> first, the target shifted right.
        prev = pad([np.concatenate([[EOS], self.tgt[i][:-1]]) for i in rows], left=False)
        src = pad([self.src[i] for i in rows], left=self.left_pad_source)
        return src, prev, target, int(sum(len(self.tgt[i]) for i in rows))


def first(items: list):
    """A DataLoader's ``collate_fn`` for batches of one prepared batch."""
    return items[0]


class Sentences(torch.utils.data.Dataset):
    """Each item ``(index, source ids)`` of one evaluation sentence."""

    def __init__(self, src: list) -> None:
        self.src = src

    def __len__(self) -> int:
        return len(self.src)

    def __getitem__(self, index: int):
        return index, self.src[index]


def collate_sentences(items: list):
    """``(src [B, S] right-padded, indices [B])`` of evaluation sentences."""
    return (pad([s for _, s in items], left=False),
            torch.tensor([i for i, _ in items], dtype=torch.long))


_NO_SPACE_BEFORE = re.compile(r" ([.,;:!?%)\]}])")
_NO_SPACE_AFTER = re.compile(r"([(\[{]) ")


def detokenize(text: str) -> str:
    """Moses-tokenized ``text`` back to plain text, as ``tokenizer.Tokenizer.detokenize`` does for
    what the tiny corpus holds: ``@-@`` joins, no space before closing punctuation or after
    opening brackets, Moses' escapes undone (a subset of Moses' detokenizer.perl rules)."""
    text = text.replace(" @-@ ", "-").replace("@-@", "-")
    text = _NO_SPACE_AFTER.sub(r"\1", _NO_SPACE_BEFORE.sub(r"\1", text))
    for escaped, plain in (("&apos;", "'"), ("&quot;", '"'), ("&#124;", "|"), ("&lt;", "<"),
                           ("&gt;", ">"), ("&#91;", "["), ("&#93;", "]"), ("&amp;", "&")):
        text = text.replace(escaped, plain)
    return text


def _bleu(lowercase: bool):
    from sacrebleu.metrics import BLEU

    return BLEU(lowercase=lowercase)


def bleu_statistics(hypotheses: list[str], references: list[str],
                    lowercase: bool = True) -> dict[str, float]:
    """sacrebleu's corpus statistics of ``hypotheses`` against ``references`` (one each; 13a
    tokenization), summed: ``BLEU_STATISTICS`` keys."""
    stats = _bleu(lowercase)._extract_corpus_statistics(hypotheses, [references])
    totals = np.sum(np.asarray(stats, dtype=np.float64), axis=0) if stats else \
        np.zeros(len(BLEU_STATISTICS))
    return dict(zip(BLEU_STATISTICS, totals.tolist()))


def bleu_score(sums: dict[str, float], lowercase: bool = True) -> float:
    """Corpus BLEU (0-100) from summed statistics, as ``sacrebleu.corpus_bleu`` scores them."""
    stats = [int(round(sums[name])) for name in BLEU_STATISTICS]
    return float(_bleu(lowercase)._compute_score_from_stats(stats).score)


def constant_translation_bleu(targets: "IndexedSentences", dictionary: Dictionary,
                              references: list[str], lowercase: bool = True,
                              remove_bpe: str | None = "@@ ", candidates: int = 50) -> float:
    """Corpus BLEU (0-100) of the best translation that ignores its source: one sentence given
    for every reference, the best of the ``candidates`` most frequent training target sentences
    and of the most frequent training target words in order of frequency, as many as the
    references' mean length in words (what a model learns of German without reading English).

    Raises:
        ValueError: no training targets or no references.
    """
    from collections import Counter

    if not len(targets) or not references:
        raise ValueError("no training targets or no references to score a constant translation")
    sentences = Counter(detokenize(dictionary.string(targets[i].tolist(), remove_bpe))
                        for i in range(len(targets)))
    words = Counter(word for sentence, count in sentences.items()
                    for word in sentence.split() for _ in range(count))
    length = max(1, round(sum(len(r.split()) for r in references) / len(references)))
    hypotheses = [sentence for sentence, _ in sentences.most_common(candidates)]
    hypotheses.append(" ".join(word for word, _ in words.most_common(length)))
    return max(bleu_score(bleu_statistics([h] * len(references), references, lowercase),
                          lowercase) for h in hypotheses)
