"""CPM's tokenizer and data as FlagPerf's cpm case reads them (``dataloaders/dataloader.py`` and
``tokenization_gpt2.py`` of training/benchmarks/cpm, from TsinghuaAI/CPM-1-Finetune).

Tokenizer: CPM's vocabulary is a SentencePiece unigram model (``chinese_vocab.model``, protobuf
``ModelProto``) with ``vocab.json`` (piece -> id). Text is cut into words by jieba, spaces and
newlines inside words become ``▂`` and ``▃``, the words are joined by spaces and encoded by the
unigram model (``▁`` marks a word's start). Here the model file is read with the standard
library (:func:`read_sentencepiece_model`, with ``flagperf_host.readers.protobuf``) and run by
the ``tokenizers`` library's ``Unigram`` (the same Viterbi segmentation over the same pieces and
scores), so neither sentencepiece nor protobuf is needed; jieba is used when
``word_segmentation`` is ``jieba``.

Data: ``train.txt`` / ``valid.txt``, one document a line (the line's newline kept, as
``readlines`` keeps it); each is tokenized, ``<eod>`` appended, and cut into samples of
``seq_length + 1`` tokens, the last one padded with ``<pad>``; a sample gives ``input_ids``
(its first ``seq_length`` tokens), ``labels`` (its last ``seq_length``) and ``loss_mask``
(labels that are not ``<pad>``).
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any, Mapping

import torch

from flagperf_host.readers.protobuf import protobuf_fields

#: SentencePiece piece types (sentencepiece_model.proto).
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
#: Score given to control and unused pieces so that no text is ever segmented into them (as
#: SentencePiece never emits them for text).
NEVER = -1.0e9
#: CPM's translation of whitespace inside a word (tokenization_gpt2.py).
WHITESPACE = str.maketrans(" \n", "\u2582\u2583")
SEGMENTATIONS = ("jieba", "none")


def read_sentencepiece_model(path: Path) -> tuple[list[tuple[str, float, int]], str]:
    """The pieces of a SentencePiece ``ModelProto`` file, ``[(piece, score, type)]`` in id
    order, and its normalizer's name (``identity``, ``nmt_nfkc``, ...; "" when unset).

    Raises:
        ValueError: ``path`` is not a SentencePiece model (names the file).
        OSError: it cannot be read.
    """
    pieces, normalizer = [], ""
    try:
        for number, wire, value in protobuf_fields(Path(path).read_bytes()):
            if number == 1 and wire == 2:
                piece, score, kind = None, 0.0, NORMAL
                for sub, sub_wire, sub_value in protobuf_fields(value):
                    if sub == 1 and sub_wire == 2:
                        piece = sub_value.decode("utf-8")
                    elif sub == 2 and sub_wire == 5:
                        score = struct.unpack("<f", sub_value)[0]
                    elif sub == 3 and sub_wire == 0:
                        kind = sub_value
                if piece is None:
                    raise ValueError(f"piece {len(pieces)} has no text")
                pieces.append((piece, score, kind))
            elif number == 3 and wire == 2:
                for sub, sub_wire, sub_value in protobuf_fields(value):
                    if sub == 1 and sub_wire == 2:
                        normalizer = sub_value.decode("utf-8")
    except (ValueError, UnicodeDecodeError) as err:
        raise ValueError(f"{path}: not a SentencePiece model ({err})") from None
    if not pieces:
        raise ValueError(f"{path}: not a SentencePiece model (no pieces)")
    return pieces, normalizer


class CPMTokenizer:
    """CPM's tokenizer (``tokenization_gpt2.GPT2Tokenizer``): ``encode(text) -> ids``.

    Args:
        folder: holds ``vocab.json`` and ``chinese_vocab.model``.
        word_segmentation: ``jieba`` (CPM's: words cut by ``jieba.cut``, joined by spaces) or
            ``none`` (the text is one word; the tiny vocabulary is trained that way).

    Raises:
        FileNotFoundError: a file is missing. ValueError: the two files disagree, ``<pad>`` or
            ``<eod>`` is missing, or ``word_segmentation`` is unknown or jieba not installed.
    """

    def __init__(self, folder: Path, word_segmentation: str = "jieba"):
        from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

        folder = Path(folder)
        for name in ("vocab.json", "chinese_vocab.model"):
            if not (folder / name).is_file():
                raise FileNotFoundError(f"{folder / name}: no such tokenizer file "
                                        "(tokenizer_path)")
        self.encoder = json.loads((folder / "vocab.json").read_text(encoding="utf-8"))
        pieces, normalizer = read_sentencepiece_model(folder / "chinese_vocab.model")
        if len(self.encoder) != len(pieces) or any(
                self.encoder.get(piece) != index for index, (piece, _, _) in enumerate(pieces)):
            raise ValueError(f"{folder}: vocab.json and chinese_vocab.model list different "
                             "pieces or ids")
        for piece in ("<pad>", "<eod>"):
            if piece not in self.encoder:
                raise ValueError(f"{folder / 'vocab.json'}: no {piece} piece")
        self.pad_id, self.eod_id = self.encoder["<pad>"], self.encoder["<eod>"]
        unknown = [index for index, (_, _, kind) in enumerate(pieces) if kind == UNKNOWN]
        vocab = [(piece, NEVER if kind in (CONTROL, UNUSED) else score)
                 for piece, score, kind in pieces]
        self._tokenizer = Tokenizer(models.Unigram(vocab, unk_id=unknown[0] if unknown else 0,
                                                   byte_fallback=False))
        if "nfkc" in normalizer:  # SentencePiece's nmt_nfkc: NFKC (its charsmap's bulk)
            self._tokenizer.normalizer = normalizers.NFKC()
        self._tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581",
                                                                 prepend_scheme="always")
        if word_segmentation not in SEGMENTATIONS:
            raise ValueError(f"config word_segmentation: {word_segmentation!r}, expected one "
                             f"of {', '.join(SEGMENTATIONS)}")
        self._cut = None
        if word_segmentation == "jieba":
            try:
                import jieba
            except ImportError:
                raise ValueError("config word_segmentation: jieba is not installed (pip "
                                 "install jieba, as FlagPerf's requirements.txt), or set none"
                                 ) from None
            self._cut = lambda text: jieba.cut(text, cut_all=False)

    def __len__(self) -> int:
        return len(self.encoder)

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``."""
        words = self._cut(text) if self._cut else [text]
        joined = " ".join(word.translate(WHITESPACE) for word in words)
        return self._tokenizer.encode(joined, add_special_tokens=False).ids


class CPMDataset(torch.utils.data.Dataset):
    """The samples of one text file (FlagPerf's ``GenDataset``): each a list of
    ``seq_length + 1`` token ids.

    Raises:
        FileNotFoundError: ``path`` is missing.
    """

    def __init__(self, path: Path, tokenizer: CPMTokenizer, seq_length: int):
        if not Path(path).is_file():
            raise FileNotFoundError(f"{path}: no such data file")
        self.seq_length, self.pad_id = seq_length, tokenizer.pad_id
        self.samples = []
        with open(path, encoding="utf-8") as handle:
            for document in handle:
                ids = tokenizer.encode(document) + [tokenizer.eod_id]
                self.samples += split_document(ids, seq_length, tokenizer.pad_id)

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> list[int]:
        return self.samples[index]

    def collate(self, samples: list[list[int]]) -> tuple[torch.Tensor, ...]:
        """``(input_ids, labels, loss_mask)``, each ``[batch, seq_length]`` (int64, int64,
        float32)."""
        tokens = torch.tensor(samples, dtype=torch.long)
        labels = tokens[:, 1:].contiguous()
        return tokens[:, :-1].contiguous(), labels, (labels != self.pad_id).float()


def split_document(ids: list[int], seq_length: int, pad_id: int) -> list[list[int]]:
    """``ids`` cut into samples of ``seq_length + 1`` tokens, the last padded with ``pad_id``
    (FlagPerf's ``GenDataset.process``: a new sample starts every ``seq_length + 1`` tokens)."""
    samples, start, width = [], 0, seq_length + 1
    while start + width < len(ids):
        samples.append(ids[start:start + width])
        start += width
    samples.append(ids[start:] + [pad_id] * (width - (len(ids) - start)))
    return samples


def load_datasets(config: Mapping[str, Any], data_dir: Path
                  ) -> tuple[CPMTokenizer, CPMDataset, CPMDataset]:
    """The tokenizer (``<data_dir>/<tokenizer_path>``, ``word_segmentation``) and the train
    and validation sets (``train.txt``, ``valid.txt``) at ``seq_length``.

    Raises:
        FileNotFoundError, ValueError: see :class:`CPMTokenizer` and :class:`CPMDataset`.
    """
    data_dir = Path(data_dir)
    tokenizer = CPMTokenizer(data_dir / str(config["tokenizer_path"]),
                             str(config.get("word_segmentation") or "jieba"))
    if len(tokenizer) > int(config["vocab_size"]):
        raise ValueError(f"config vocab_size: {config['vocab_size']} is less than the "
                         f"tokenizer's {len(tokenizer)} pieces ({config['tokenizer_path']})")
    seq_length = int(config["seq_length"])
    return (tokenizer, CPMDataset(data_dir / "train.txt", tokenizer, seq_length),
            CPMDataset(data_dir / "valid.txt", tokenizer, seq_length))
