"""Format ``glm_record_hdf5``: SuperGLUE ReCoRD as FlagPerf's glm case reads it.

Real layout (under data_dir, from BAAI's ``glm_train_dataset.zip``):
``ReCoRD/glm_train_eval_hdf5_sparse/train_hdf5/train_sparse.hdf5`` and
``.../eval_hdf5/eval_sparse.hdf5``, beside the initial checkpoint
``blocklm-large-blank/200000/mp_rank_00_model_states.pt``. Each file holds ReCoRD encoded as
THUDM/GLM's ``RecordPVP`` and ``build_input_from_ids`` encode a multi-token cloze: one row per
candidate answer, ``[CLS] passage query-before [MASK] query-after [eos]`` (Part A, ``sep``
tokens), then ``<|startofpiece|>`` and the candidate's tokens but the last (Part B), padded with
0 ([PAD], GLM's eos for BERT's vocabulary) to the sequence length. Every matrix is stored as
h5sparse stores a scipy CSR matrix (FlagPerf reads them with ``h5sparse.File``): a group with
the attributes ``h5sparse_format`` = ``"csr"`` and ``h5sparse_shape`` and the datasets
``data``, ``indices`` (int32) and ``indptr`` (int64), which h5py reads and writes as they are.
The groups (FlagPerf ``training/benchmarks/glm/pytorch/dataloaders/dataloader.py``):

* ``text`` ``[candidates, T]``: token ids;
* ``position`` ``[2 x candidates, T]``: rows 2i and 2i+1 are candidate i's positions and block
  positions (GLM's 2D positions);
* ``mask`` ``[candidates, 1]``: ``sep``, Part A's length;
* ``target`` ``[candidates, T]``: the candidate's tokens at Part B's positions;
* ``logit_mask`` ``[candidates, T]``: 1 at those positions;
* ``choice_start_end`` ``[samples, 2]``: a sample's candidates are rows start..end-1;
* ``answer_start_end`` ``[samples, 2]`` and ``answer_idx`` ``[answers, 1]``: the indices (within
  the sample) of its correct candidates; read only from the evaluation file: in training, the
  correct candidate is always the first (FlagPerf's collate gives every sample label 0).

What the checker accepts: ``flagperf_host.checks.glm_record_hdf5.check`` (the two files,
HDF5).

Tiny data: a ReCoRD-style cloze set from the GNU, Apache, Artistic and BSD licence texts that
Debian's base-files install in ``/usr/share/common-licenses`` (:data:`LICENSES`). As ReCoRD
takes a passage from a news article and a query from its summary with one of the passage's
entities blanked out (``@placeholder``), each sample takes a passage of :data:`PASSAGE_WORDS`
words and, as its query, the :data:`QUERY_WORDS` words that follow it, with one entity that both
contain replaced by ``@placeholder``; entities are runs of capitalised words not at the start of
a sentence (``Free Software Foundation``, ``Program``, ``Licensee``); the candidates are the
answer and up to :data:`CANDIDATES` - 1 other entities of the passage. Windows start every
:data:`STRIDE` words; each text is cut in blocks of :data:`BLOCK_WORDS` words, and the windows
inside every :data:`EVAL_EVERY`-th block give the evaluation samples, those outside them the
training samples (the evaluation passages are not training text, though licences share
sentences). Tokens: a WordPiece vocabulary of :data:`WORDPIECES` pieces trained on the
same texts with the ``tokenizers`` library (BERT's normaliser and pre-tokeniser, lower case;
written to ``blocklm-tiny-random/vocab.txt``), then GLM's ``<|startofpiece|>`` and
``<|endofpiece|>``: :data:`VOCAB` ids in all.

Beside them, ``blocklm-tiny-random/0/mp_rank_00_model_states.pt``: the cpu profile's initial
checkpoint (:func:`write_tiny_checkpoint`), a reduced GLM with random weights in the format of
``blocklm-large-blank`` (``torch.save`` of ``{"module": state_dict}`` in THUDM/GLM's key names),
pinned by SHA-256 in ``benchmarks/glm/pytorch/config/cpu.yaml``.
"""

from __future__ import annotations

import re
from functools import partial
from pathlib import Path
from typing import Iterator, Sequence

from flagperf_ansible.datasets.registry import Format
from flagperf_host import data_check
from flagperf_host.checks.glm_record_hdf5 import GLM_RECORD_FILES

NAME = "glm_record_hdf5"
LICENSE_DIR = Path("/usr/share/common-licenses")
# Licence texts in every Debian and Ubuntu base-files since 2010 (later ones, e.g. MPL-2.0 and
# CC0-1.0, are left out so that the data are the same on older systems).
LICENSES = ("Apache-2.0", "Artistic", "BSD", "GFDL-1.2", "GFDL-1.3", "GPL-1", "GPL-2", "GPL-3",
            "LGPL-2", "LGPL-2.1", "LGPL-3")
# BERT's special tokens first (ids 0..4), as in BERT's vocabulary [PAD] is 0: GLM pads with it.
SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
PAD, UNK, CLS, SEP, MASK = range(len(SPECIALS))
WORDPIECES = 1022
SOP, EOP = WORDPIECES, WORDPIECES + 1  # GLM appends its block symbols after the WordPieces
VOCAB = 1024
SEQ_LEN = 64
PASSAGE_WORDS, QUERY_WORDS, STRIDE, CANDIDATES = 30, 10, 2, 4
# Each text is cut in blocks of BLOCK_WORDS words; every EVAL_EVERY-th block gives the evaluation
# samples, the others the training ones, windows across a boundary with an evaluation block none.
# Every third block: 707 training and 284 evaluation samples, enough of the latter for the cpu
# profile's target to clear the answer prior by three binomial spreads (every sixth: 1020 and
# 165, where it could not).
BLOCK_WORDS, EVAL_EVERY = 100, 3
SEED = 0
# The cpu profile's GLM: 2 layers of width 128 (4 heads) over VOCAB ids and SEQ_LEN positions.
TINY_LAYERS, TINY_HIDDEN = 2, 128
TINY_MODEL_DIR = "blocklm-tiny-random"
TINY_CHECKPOINT = f"{TINY_MODEL_DIR}/0/mp_rank_00_model_states.pt"

_WORD = re.compile(r"[A-Za-z][A-Za-z'-]*[A-Za-z]|[A-Za-z]|[0-9]+|[^\sA-Za-z0-9]")
_SENTENCE_END = {".", "!", "?", ":", ";"}


def license_texts(folder: Path = LICENSE_DIR) -> list[tuple[str, str]]:
    """``(name, text)`` of each of :data:`LICENSES` under ``folder``.

    Raises:
        FileNotFoundError: a licence text is missing (base-files not installed).
    """
    texts = []
    for name in LICENSES:
        path = folder / name
        if not path.is_file():
            raise FileNotFoundError(f"{path}: missing; the tiny ReCoRD set is made from the "
                                    "licence texts of Debian's base-files")
        texts.append((name, path.read_text(encoding="utf-8", errors="replace")))
    return texts


def train_vocabulary(texts: Sequence[str]) -> list[str]:
    """A WordPiece vocabulary of :data:`WORDPIECES` pieces trained on ``texts`` (BERT's
    normaliser, lower case, and pre-tokeniser), then GLM's two block symbols: :data:`VOCAB`
    tokens, index = id: :data:`SPECIALS`, then the trained pieces in sorted order.

    The same ``texts`` give the same vocabulary in every process (see the comment below)."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    # The trainer merges the most frequent pair first, ties going to the lower symbol ids. The
    # specials and the alphabet get fixed ids, but the word-inner symbols (##a) were numbered in
    # the order of a hash map that changes with each process, so which tied merges made the cut
    # varied. Listed first (sorted) as special tokens, they get fixed ids too, and so does every
    # merge; they are the symbols the trainer adds itself, so the vocabulary keeps its size.
    inner = sorted({char for text in texts
                    for word, _ in tokenizer.pre_tokenizer.pre_tokenize_str(
                        tokenizer.normalizer.normalize_str(text))
                    for char in word[1:]})
    tokenizer.train_from_iterator(texts, trainers.WordPieceTrainer(
        vocab_size=WORDPIECES, show_progress=False,
        special_tokens=[*SPECIALS, *(f"##{char}" for char in inner)]))
    pieces = sorted(set(tokenizer.get_vocab()) - set(SPECIALS))
    vocab = [*SPECIALS, *pieces][:WORDPIECES]
    vocab += [f"[unused{i}]" for i in range(WORDPIECES - len(vocab))]
    return vocab + ["<|startofpiece|>", "<|endofpiece|>"]


def wordpiece_encoder(vocab: Sequence[str]):
    """``encode(text) -> [ids]`` with ``vocab`` (BERT's normaliser and pre-tokeniser)."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

    tokenizer = Tokenizer(models.WordPiece({piece: i for i, piece in enumerate(vocab)},
                                           unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    return lambda text: tokenizer.encode(text, add_special_tokens=False).ids


def entity_spans(words: Sequence[str]) -> list[tuple[int, int]]:
    """``(start, end)`` word spans of the entities in ``words``: maximal runs of capitalised
    words, the first not at the start of a sentence (after ``.``, ``:`` ...) nor of the text."""
    spans, start = [], None
    for i, word in enumerate(words + [""]):
        capital = word[:1].isupper() and len(word) > 1
        if capital and start is None and i > 0 and words[i - 1] not in _SENTENCE_END:
            start = i
        elif not capital and start is not None:
            spans.append((start, i))
            start = None
    return spans


def cloze_samples(name: str, text: str, rng) -> Iterator[dict]:
    """ReCoRD-style samples from one licence text: ``{"split" ("train" or "eval"), "passage",
    "query" (with ``@placeholder``), "candidates" (the answer first), "answer"}``, strings."""
    words = _WORD.findall(text)
    span = PASSAGE_WORDS + QUERY_WORDS
    for start in range(0, len(words) - span, STRIDE):
        first, last = (start // BLOCK_WORDS, (start + span - 1) // BLOCK_WORDS)
        in_eval = [block % EVAL_EVERY == EVAL_EVERY - 1 for block in (first, last)]
        if in_eval[0] != in_eval[1]:
            continue  # across the boundary of an evaluation block: in neither set
        passage = words[start:start + PASSAGE_WORDS]
        query = words[start + PASSAGE_WORDS:start + PASSAGE_WORDS + QUERY_WORDS]
        entities = sorted({" ".join(passage[a:b]) for a, b in entity_spans(passage)})
        shared = [(a, b) for a, b in entity_spans(query) if " ".join(query[a:b]) in entities]
        if len(entities) < 2 or not shared:
            continue
        a, b = shared[int(rng.integers(len(shared)))]
        answer = " ".join(query[a:b])
        others = [e for e in entities if e != answer]
        picked = rng.permutation(len(others))[:CANDIDATES - 1]
        yield {"split": "eval" if in_eval[0] else "train", "source": name,
               "passage": " ".join(passage),
               "query": " ".join(query[:a] + ["@placeholder"] + query[b:]),
               "answer": answer, "candidates": [answer] + [others[i] for i in sorted(picked)]}


def encode_candidate(encode, passage: str, query: str, candidate: str,
                     length: int = SEQ_LEN) -> dict:
    """One candidate's row as THUDM/GLM's ``RecordPVP`` and ``build_input_from_ids`` make it
    (``add_cls``, ``add_piece``, eos = [PAD]): ``text``, ``position`` and ``block`` ``[length]``,
    ``sep``, ``target`` and ``logit_mask`` ``[length]``, as lists. The passage is cut from its
    end where the row would not fit (GLM's ``shortenable``).

    Raises:
        ValueError: the query and candidate alone do not fit in ``length``.
    """
    before, after = query.split("@placeholder")
    query_ids = encode(before) + [MASK] + encode(after)
    answer = encode(" " + candidate)
    room = length - 2 - len(query_ids) - len(answer)  # [CLS], [eos]
    if room < 1:
        raise ValueError(f"a query and candidate of {len(query_ids) + len(answer)} tokens do "
                         f"not fit in {length}")
    ids = [CLS] + encode(passage)[:room] + query_ids + [PAD]
    sep, mask_position = len(ids), ids.index(MASK)
    text = ids + [SOP] + answer[:-1]
    position = list(range(sep)) + [mask_position] * len(answer)
    block = [0] * sep + list(range(1, len(answer) + 1))
    target = [0] * sep + answer
    logit_mask = [0] * sep + [1] * len(answer)
    pad = [0] * (length - len(text))
    return {"text": text + pad, "position": position + pad, "block": block + pad, "sep": sep,
            "target": target + pad, "logit_mask": logit_mask + pad}


def encode_samples(samples: Sequence[dict], encode, shuffle_rng=None) -> dict:
    """The dense arrays of an hdf5 file for ``samples``: as :func:`write_record_hdf5` takes
    them. With ``shuffle_rng`` (the evaluation file) each sample's candidates are shuffled and
    its answer's index kept in ``answer_idx``; without, the answer stays first (training)."""
    import numpy as np

    rows = {key: [] for key in ("text", "position", "target", "logit_mask", "mask")}
    choice, answer_span, answer_idx = [], [], []
    for sample in samples:
        candidates = list(sample["candidates"])
        if shuffle_rng is not None:
            candidates = [candidates[i] for i in shuffle_rng.permutation(len(candidates))]
        start = len(rows["text"])
        for candidate in candidates:
            row = encode_candidate(encode, sample["passage"], sample["query"], candidate)
            rows["text"].append(row["text"])
            rows["position"] += [row["position"], row["block"]]
            rows["target"].append(row["target"])
            rows["logit_mask"].append(row["logit_mask"])
            rows["mask"].append([row["sep"]])
        choice.append([start, len(rows["text"])])
        answer_span.append([len(answer_idx), len(answer_idx) + 1])
        answer_idx.append([candidates.index(sample["answer"])])
    arrays = {key: np.asarray(value, dtype=np.int64) for key, value in rows.items()}
    arrays["choice_start_end"] = np.asarray(choice, dtype=np.int64)
    arrays["answer_start_end"] = np.asarray(answer_span, dtype=np.int64)
    arrays["answer_idx"] = np.asarray(answer_idx, dtype=np.int64)
    return arrays


def write_record_hdf5(path: Path, arrays: dict) -> None:
    """``arrays`` (name -> 2-D integer ndarray) as h5sparse writes scipy CSR matrices: per
    name a group with attributes ``h5sparse_format`` ``"csr"`` and ``h5sparse_shape``, and the
    datasets ``data`` (int64), ``indices`` (int32) and ``indptr`` (int64) of its non-zeros."""
    import h5py
    import numpy as np

    path.parent.mkdir(parents=True, exist_ok=True)
    with h5py.File(path, "w") as handle:
        for name in sorted(arrays):
            dense = arrays[name]
            rows, columns = np.nonzero(dense)
            group = handle.create_group(name)
            group.attrs["h5sparse_format"] = "csr"
            group.attrs["h5sparse_shape"] = np.asarray(dense.shape, dtype=np.int64)
            group.create_dataset("data", data=dense[rows, columns].astype(np.int64))
            group.create_dataset("indices", data=columns.astype(np.int32))
            indptr = np.zeros(dense.shape[0] + 1, dtype=np.int64)
            np.cumsum(np.bincount(rows, minlength=dense.shape[0]), out=indptr[1:])
            group.create_dataset("indptr", data=indptr)


def tiny_state_dict(seed: int = SEED) -> dict:
    """The cpu profile's GLM (:data:`TINY_LAYERS` layers of width :data:`TINY_HIDDEN`,
    :data:`VOCAB` ids, :data:`SEQ_LEN` positions) with random weights, as
    ``{THUDM/GLM key: float32 ndarray}``: GLM's initialisation (N(0, 0.02), the attention's and
    MLP's output projections N(0, 0.02 / sqrt(2 layers)), biases 0, LayerNorms 1 and 0), drawn
    from ``numpy.random.RandomState(seed)`` in sorted key order."""
    import numpy as np

    h = TINY_HIDDEN
    shapes = {"word_embeddings.weight": (VOCAB, h),
              "transformer.position_embeddings.weight": (SEQ_LEN + 1, h),
              "transformer.block_position_embeddings.weight": (SEQ_LEN + 1, h),
              "transformer.final_layernorm.weight": (h,), "transformer.final_layernorm.bias": (h,)}
    for layer in range(TINY_LAYERS):
        prefix = f"transformer.layers.{layer}."
        for name, shape in (("input_layernorm", (h,)), ("post_attention_layernorm", (h,)),
                            ("attention.query_key_value", (3 * h, h)),
                            ("attention.dense", (h, h)), ("mlp.dense_h_to_4h", (4 * h, h)),
                            ("mlp.dense_4h_to_h", (h, 4 * h))):
            shapes[prefix + name + ".weight"] = shape
            shapes[prefix + name + ".bias"] = (shape[0],)
    generator = np.random.RandomState(seed)
    scaled = 0.02 / (2.0 * TINY_LAYERS) ** 0.5
    state = {}
    for key in sorted(shapes):
        shape = shapes[key]
        if "layernorm" in key:
            value = 1.0 if key.endswith(".weight") else 0.0
            state[key] = np.full(shape, value, dtype=np.float32)
        elif key.endswith(".bias"):
            state[key] = np.zeros(shape, dtype=np.float32)
        else:
            std = scaled if key.endswith(("attention.dense.weight", "dense_4h_to_h.weight")) \
                else 0.02
            state[key] = generator.normal(0.0, std, shape).astype(np.float32)
    return state


def write_tiny_checkpoint(path: Path, seed: int = SEED) -> None:
    """Save :func:`tiny_state_dict` as ``torch.save({"module": state_dict})``, the layout of
    GLM's ``mp_rank_00_model_states.pt`` that FlagPerf reads (``sd["module"]``), byte for byte
    the same on every run of the same torch so that the cpu profile can pin its SHA-256.

    Raises:
        ImportError: torch is not installed (the ``local`` extra).
        OSError: ``path`` cannot be written.
    """
    import torch

    module = {key: torch.from_numpy(value) for key, value in tiny_state_dict(seed).items()}
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"module": module}, path)
    # DeepSpeed's marker of the newest iteration, as beside blocklm-large-blank/200000/.
    (path.parent.parent / "latest_checkpointed_iteration.txt").write_text(path.parent.name)


def generate(target: Path) -> dict[str, int]:
    """Write the tiny ReCoRD files, the vocabulary and the tiny checkpoint under ``target``;
    returns the samples per file.

    Raises:
        FileNotFoundError: the licence texts are missing (:func:`license_texts`).
        ImportError: h5py, numpy, tokenizers or torch is missing (the ``local`` extra).
        OSError: ``target`` cannot be written.
    """
    import numpy as np

    texts = license_texts()
    vocab = train_vocabulary([text for _, text in texts])
    encode = wordpiece_encoder(vocab)
    rng = np.random.default_rng(SEED)
    train, evaluation = [], []
    for name, text in texts:
        for sample in cloze_samples(name, text, rng):
            (evaluation if sample["split"] == "eval" else train).append(sample)
    train_path, eval_path = (target / relative for relative in GLM_RECORD_FILES)
    write_record_hdf5(train_path, encode_samples(train, encode))
    write_record_hdf5(eval_path, encode_samples(evaluation, encode, shuffle_rng=rng))
    vocab_path = target / TINY_MODEL_DIR / "vocab.txt"
    vocab_path.parent.mkdir(parents=True, exist_ok=True)
    vocab_path.write_text("".join(piece + "\n" for piece in vocab), encoding="utf-8")
    write_tiny_checkpoint(target / TINY_CHECKPOINT)
    return {"train samples": len(train), "eval samples": len(evaluation), "tiny checkpoint": 1}


FORMAT = Format(
    name=NAME,
    description="GLM's ReCoRD hdf5 (h5sparse CSR groups): ReCoRD/glm_train_eval_hdf5_sparse/"
                "{train_hdf5/train_sparse,eval_hdf5/eval_sparse}.hdf5 (tiny: cloze on licence "
                "texts, and the cpu profile's GLM checkpoint)",
    check=partial(data_check.check, NAME),
    generate=generate,
)
