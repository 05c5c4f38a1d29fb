"""Format ``cpm_text``: the CPM-1 fine-tuning text FlagPerf's cpm case reads.

Real layout (FlagPerf ``training/benchmarks/cpm``; the data is CPM-1-Finetune's STC, the
short-text conversation set of Shang et al. 2015, as ``preprocess_stc_finetune.py`` writes it):

* ``train.txt``, ``valid.txt``: UTF-8, one dialogue a line,
  ``对话上文:<post> 回复:<response>`` (post and response with their whitespace removed);
  FlagPerf's loader reads each line as one document, tokenizes it, appends ``<eod>`` and cuts it
  into samples of ``seq_length + 1`` tokens, padded with ``<pad>``;
* ``<tokenizer folder>/vocab.json`` (piece -> id) and ``<tokenizer folder>/chinese_vocab.model``
  (a SentencePiece unigram model, protobuf ``ModelProto``): CPM's vocabulary, which FlagPerf ships
  with the case as ``dataloaders/bpe_3w_new/`` (30000 pieces; copy that folder into the data
  folder); ids 0-7 are ``<unk> <s> </s> ▃ <sep> <pad> <mask> <eod>``;
* the initial checkpoint, ``cpm_model_states_medium.pt`` (case.yml ``checkpoint``).

What the checker accepts: ``flagperf_host.checks.cpm_text.check``.

Tiny data (:func:`generate`): Chinese text from the zh_CN gettext catalogues of Debian's
Essential packages, which every Debian system has (``/usr/share/locale/zh_CN/LC_MESSAGES/``
``{coreutils,dpkg,tar,sed,grep,findutils,diffutils,bash}.mo``: about 2000 dialogues here; at
least ``MIN_CATALOGUES`` of them must be present). Each catalogue's translations with a Chinese
character, 4-60 characters long, in msgid order, are paired (the first a post, the next its
response) into STC-style lines; every tenth line goes to ``valid.txt``. A 2000-piece unigram
vocabulary in CPM's format is trained on ``train.txt`` with the ``tokenizers`` library (the same
unigram algorithm as SentencePiece, Kudo 2018; its pieces rescored deterministically, see
:func:`train_vocabulary`) under ``bpe_tiny/``, and the cpu profile's
initial checkpoint ``cpm_model_states_tiny.pt`` is written in the original Megatron layout
(:func:`write_tiny_checkpoint`).
"""

from __future__ import annotations

import gettext
import json
import math
import re
import struct
from functools import partial
from pathlib import Path

from flagperf_ansible.datasets.registry import Format
from flagperf_host import data_check
from flagperf_host.readers.protobuf import varint_bytes

NAME = "cpm_text"
LOCALE_DIR = Path("/usr/share/locale/zh_CN/LC_MESSAGES")
#: Debian Essential packages' catalogues (Essential: yes, so on every Debian system).
CATALOGUES = ("coreutils", "dpkg", "tar", "sed", "grep", "findutils", "diffutils", "bash")
MIN_CATALOGUES = 4
#: CPM's special pieces, ids 0-7 (FlagPerf's bpe_3w_new/vocab.json).
SPECIAL_PIECES = ("<unk>", "<s>", "</s>", "\u2583", "<sep>", "<pad>", "<mask>", "<eod>")
#: SentencePiece piece types (sentencepiece_model.proto ``SentencePiece.Type``).
PIECE_TYPES = {"<unk>": 2, "<s>": 3, "</s>": 3}
NORMAL, USER_DEFINED = 1, 4
TOKENIZER_DIR = "bpe_tiny"
TINY_VOCAB = 2000
#: The cpu profile's reduced CPM (its config/cpu.yaml says the same).
TINY_MODEL = {"num_layers": 2, "hidden_size": 128, "vocab_size": TINY_VOCAB,
              "max_position_embeddings": 128}
TINY_CHECKPOINT = "cpm_model_states_tiny.pt"
_HAN = re.compile(r"[\u4e00-\u9fff]")


def dialogue_lines(locale_dir: Path = LOCALE_DIR) -> list[str]:
    """STC-style lines ``对话上文:<post> 回复:<response>`` from the zh_CN catalogues.

    Raises:
        FileNotFoundError: fewer than ``MIN_CATALOGUES`` of ``CATALOGUES`` under ``locale_dir``.
    """
    found = [locale_dir / f"{name}.mo" for name in CATALOGUES
             if (locale_dir / f"{name}.mo").is_file()]
    if len(found) < MIN_CATALOGUES:
        raise FileNotFoundError(
            f"{locale_dir}: {len(found)} of the zh_CN catalogues {', '.join(CATALOGUES)} "
            f"found, {MIN_CATALOGUES} needed for the tiny cpm_text data")
    lines = []
    for path in found:
        with path.open("rb") as handle:
            catalogue = gettext.GNUTranslations(handle)._catalog
        texts = []
        for msgid in sorted((key for key in catalogue if isinstance(key, str) and key),
                            key=str):
            text = "".join(catalogue[msgid].split())  # as preprocess_stc_finetune.py strips
            if _HAN.search(text) and 4 <= len(text) <= 60:
                texts.append(text)
        lines += [f"对话上文:{post} 回复:{response}"
                  for post, response in zip(texts[0::2], texts[1::2])]
    return lines


# -- SentencePiece's ModelProto, the subset CPM's chinese_vocab.model uses --------------------

def _field(number: int, wire: int, payload: bytes) -> bytes:
    return varint_bytes(number << 3 | wire) + payload


def _bytes_field(number: int, data: bytes) -> bytes:
    return _field(number, 2, varint_bytes(len(data)) + data)


def sentencepiece_model_bytes(pieces: list[tuple[str, float, int]]) -> bytes:
    """A SentencePiece ``ModelProto`` (sentencepiece_model.proto) of a unigram model: field 1
    the pieces in id order (``piece`` 1, ``score`` 2 as float32, ``type`` 3), field 2 the
    trainer spec (``model_type`` 3 = UNIGRAM, ``vocab_size`` 4), field 3 the normalizer spec
    (``name`` "identity")."""
    out = bytearray()
    for piece, score, kind in pieces:
        body = (_bytes_field(1, piece.encode("utf-8")) + _field(2, 5, struct.pack("<f", score))
                + _field(3, 0, varint_bytes(kind)))
        out += _bytes_field(1, body)
    out += _bytes_field(2, _field(3, 0, varint_bytes(1))
                        + _field(4, 0, varint_bytes(len(pieces))))
    out += _bytes_field(3, _bytes_field(1, b"identity"))
    return bytes(out)


def train_vocabulary(lines: list[str], vocab_size: int = TINY_VOCAB) -> list[tuple[str, float]]:
    """A unigram vocabulary of at most ``vocab_size`` pieces trained on ``lines`` with the
    ``tokenizers`` library, ``SPECIAL_PIECES`` first: ``[(piece, log probability)]`` in id
    order. Each line is prepared as the case's tokenizer prepares a document read from
    ``train.txt`` without jieba's word segmentation (``word_segmentation: none``): the line
    with its newline, spaces as ``▂`` and the newline as ``▃``, ``▁`` at its start.

    Raises:
        ImportError: the ``tokenizers`` library is not installed.
    """
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.Unigram())
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581",
                                                       prepend_scheme="always")
    trainer = trainers.UnigramTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_PIECES),
                                      unk_token="<unk>", max_piece_length=8,
                                      show_progress=False)
    whitespace = str.maketrans(" \n", "\u2582\u2583")
    prepared = [(line + "\n").translate(whitespace) for line in lines]
    tokenizer.train_from_iterator(prepared, trainer)
    # The trainer breaks ties through a hash map's per-process random order, so its scores (and
    # ids) differ from run to run though its pieces agree: the pieces are kept and scored again,
    # deterministically, by the log of their share of the text's substring occurrences, then
    # ordered by score and piece (the special pieces keep ids 0-7).
    pieces = {piece for piece, _ in json.loads(tokenizer.to_str())["model"]["vocab"]
              if piece not in SPECIAL_PIECES}
    text = "\n".join("\u2581" + line for line in prepared)  # ▁ as the pre-tokenizer adds it
    counts = {piece: max(1, text.count(piece)) for piece in pieces}
    total = float(sum(counts.values()))
    scored = [(piece, round(math.log(count / total), 4)) for piece, count in counts.items()]
    ordered = sorted(scored, key=lambda item: (-item[1], item[0]))
    return [(piece, 0.0) for piece in SPECIAL_PIECES] + ordered


def write_tokenizer(folder: Path, vocab: list[tuple[str, float]]) -> None:
    """Write ``vocab`` as CPM's tokenizer files: ``vocab.json`` (piece -> id) and
    ``chinese_vocab.model`` (:func:`sentencepiece_model_bytes`; special pieces typed as CPM's
    are: ``<unk>`` unknown, ``<s>``/``</s>`` control, the others user-defined).

    Raises:
        OSError: ``folder`` cannot be written.
    """
    folder.mkdir(parents=True, exist_ok=True)
    pieces = [(piece, score, PIECE_TYPES.get(piece, USER_DEFINED if piece in SPECIAL_PIECES
                                             else NORMAL)) for piece, score in vocab]
    (folder / "chinese_vocab.model").write_bytes(sentencepiece_model_bytes(pieces))
    (folder / "vocab.json").write_text(
        json.dumps({piece: index for index, (piece, _) in enumerate(vocab)}, ensure_ascii=False),
        encoding="utf-8")


# -- the cpu profile's initial checkpoint ------------------------------------------------------

def megatron_arrays(num_layers: int, hidden_size: int, vocab_size: int,
                    max_position_embeddings: int, seed: int = 0) -> dict:
    """Random weights of a CPM GPT in the Megatron layout FlagPerf's ``GPT2Model`` loads
    (``word_embeddings.weight [V, h]``, ``position_embeddings.weight [P, h]``,
    ``transformer.layers.<i>.{input_layernorm, post_attention_layernorm}.{weight, bias} [h]``,
    ``...attention.query_key_value.weight [3h, h]`` (q, k, v stacked), ``...attention.dense``
    ``[h, h]``, ``...mlp.dense_h_to_4h [4h, h]``, ``...mlp.dense_4h_to_h [h, 4h]`` with their
    biases, ``transformer.final_layernorm.*``), as ``{key: float32 ndarray}``.

    Initialised as upstream's GPT2Model is: normal(0, 0.02), the two output projections of a
    layer normal(0, 0.02 / sqrt(2 L)), biases 0, LayerNorm weights 1; drawn from
    ``numpy.random.RandomState(seed)`` in key order.
    """
    import numpy as np

    h, scaled = hidden_size, 0.02 / (2.0 * num_layers) ** 0.5
    shapes = {"word_embeddings.weight": ((vocab_size, h), 0.02),
              "position_embeddings.weight": ((max_position_embeddings, h), 0.02),
              "transformer.final_layernorm.weight": ((h,), 1.0),
              "transformer.final_layernorm.bias": ((h,), 0.0)}
    for i in range(num_layers):
        layer = f"transformer.layers.{i}"
        for norm in ("input_layernorm", "post_attention_layernorm"):
            shapes[f"{layer}.{norm}.weight"] = ((h,), 1.0)
            shapes[f"{layer}.{norm}.bias"] = ((h,), 0.0)
        for name, rows, cols, std in (("attention.query_key_value", 3 * h, h, 0.02),
                                      ("attention.dense", h, h, scaled),
                                      ("mlp.dense_h_to_4h", 4 * h, h, 0.02),
                                      ("mlp.dense_4h_to_h", h, 4 * h, scaled)):
            shapes[f"{layer}.{name}.weight"] = ((rows, cols), std)
            shapes[f"{layer}.{name}.bias"] = ((rows,), 0.0)
    generator = np.random.RandomState(seed)
    arrays = {}
    for key in sorted(shapes):
        shape, value = shapes[key]
        if len(shape) == 2:
            arrays[key] = generator.normal(0.0, value, shape).astype(np.float32)
        else:
            arrays[key] = np.full(shape, value, dtype=np.float32)
    return arrays


def write_tiny_checkpoint(path: Path, seed: int = 0) -> None:
    """Save :func:`megatron_arrays` of ``TINY_MODEL`` as ``torch.save({"model": state})``, the
    form FlagPerf's cpm trainer unwraps, byte for byte the same on every run of the same torch
    (the cpu profile pins its SHA-256).

    Raises:
        ImportError: torch is not installed (the ``local`` extra).
        OSError: ``path`` cannot be written.
    """
    import torch

    state = {key: torch.from_numpy(array)
             for key, array in megatron_arrays(**TINY_MODEL, seed=seed).items()}
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"model": state}, path)


def generate(target: Path) -> dict[str, int]:
    """Write the tiny data set under ``target``: ``train.txt``, ``valid.txt``, the vocabulary
    in ``bpe_tiny/`` and ``cpm_model_states_tiny.pt``; returns lines per split and pieces.

    Raises:
        FileNotFoundError: see :func:`dialogue_lines`.
        ImportError: ``tokenizers`` or torch is not installed.
        OSError: ``target`` cannot be written.
    """
    lines = dialogue_lines()
    splits = {"train": [line for i, line in enumerate(lines) if i % 10 != 9],
              "valid": lines[9::10]}
    target.mkdir(parents=True, exist_ok=True)
    for split, part in splits.items():
        (target / f"{split}.txt").write_text("".join(line + "\n" for line in part),
                                             encoding="utf-8")
    vocab = train_vocabulary(splits["train"])
    write_tokenizer(target / TOKENIZER_DIR, vocab)
    write_tiny_checkpoint(target / TINY_CHECKPOINT)
    return {"train": len(splits["train"]), "valid": len(splits["valid"]), "pieces": len(vocab)}


FORMAT = Format(
    name=NAME,
    description="CPM-1 fine-tuning text (STC dialogues): train.txt, valid.txt, a tokenizer "
                "folder with vocab.json and chinese_vocab.model (tiny: ~2000 lines from the "
                "zh_CN gettext catalogues, a 2000-piece vocabulary, a random 2-layer checkpoint)",
    check=partial(data_check.check, NAME),
    generate=generate,
)
