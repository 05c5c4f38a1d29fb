"""Format ``mlperf_bert_hdf5``: MLPerf BERT pre-training shards, as FlagPerf's bert case reads them.

Real layout (under data_dir): ``2048_shards_uncompressed/part_*.hdf5`` (Wikipedia, 2048
shards) and ``eval_set_uncompressed/part_eval_10k.hdf5``, each with the datasets
``input_ids`` [samples, 512] int32, ``input_mask`` and ``segment_ids`` [samples, 512] int8,
``masked_lm_positions`` and ``masked_lm_ids`` [samples, 76] int32 (zero-padded),
``next_sentence_labels`` [samples] int8 (MLCommons training, language_model/tensorflow/bert;
NVIDIA's ``create_pretraining_data.py``); beside them the case reads ``model.ckpt-28252.pt``
and ``bert_config.json``. What the checker accepts:
``flagperf_host.checks.mlperf_bert_hdf5.check``.

Tiny data, from English text that ships with Debian (the licence texts of
``/usr/share/common-licenses``, symbolic links skipped, one document per file):

* ``vocab.txt``: a lower-cased WordPiece vocabulary of :data:`VOCAB` entries in BERT-uncased's
  id layout (``[PAD]`` 0, ``[UNK]`` 100, ``[CLS]`` 101, ``[SEP]`` 102, ``[MASK]`` 103, the
  other ids below :data:`FIRST_WORD` ``[unusedN]``), the pieces trained here with the
  ``tokenizers`` library's ``WordPieceTrainer`` taking the ids from :data:`FIRST_WORD` on
  (where BERT's whole-word pieces begin), so that the shards' special ids are the real ones;
* two training shards of 512 samples (every licence but GPL-2 and MPL-1.1) and an evaluation
  file of 256 (GPL-2 and MPL-1.1, held out as MLPerf holds out its evaluation articles), made
  by :func:`create_instances`, a port of create_pretraining_data.py (google-research/bert, as
  MLPerf runs it: masked_lm_prob 0.15, short_seq_prob 0.1, dupe_factor 10, no whole-word
  masking) at BERT's phase-1 shape, max_seq_length 128 and max_predictions_per_seq 20 (MLPerf's
  512 and 76 make a CPU run minutes long);
* ``cpu_checkpoint/bert_config.json`` and ``cpu_checkpoint/model.ckpt-0.pt``: the bert case's
  cpu-profile model (BERT with 2 layers of width 128 over :data:`VOCAB` ids) with random
  weights, saved as NVIDIA's convert_tf_checkpoint.py saves ``model.ckpt-28252.pt``
  (``torch.save({"model": state_dict})``, the TF checkpoint's names), pinned by SHA-256 in
  the case's cpu profile.
"""

from __future__ import annotations

import json
import random
import re
from functools import partial
from pathlib import Path

from flagperf_ansible.datasets.registry import Format
from flagperf_host import data_check
from flagperf_host.checks.mlperf_bert_hdf5 import BERT_DATASETS, BERT_EVAL_DIR, BERT_TRAIN_DIR

NAME = "mlperf_bert_hdf5"
LICENSES = Path("/usr/share/common-licenses")
EVAL_DOCUMENTS = ("GPL-2", "MPL-1.1")
# The tiny shards are MLPerf-format at BERT's phase-1 shape (google-research/bert's and
# create_pretraining_data's 128 tokens, 20 predictions): a CPU trains on them in seconds.
SEQ_LEN, MAX_PREDICTIONS, TRAIN_SAMPLES, TRAIN_SHARDS, EVAL_SAMPLES = 128, 20, 1024, 2, 256
MASKED_LM_PROB, SHORT_SEQ_PROB, DUPE_FACTOR = 0.15, 0.1, 10
# BERT uncased's id layout: [PAD] 0, [UNK] 100, [CLS] 101, [SEP] 102, [MASK] 103; trained
# WordPieces from 1996 on; VOCAB ids in all (a multiple of 8, as NVIDIA pads BERT's vocabulary).
PAD, UNK, CLS, SEP, MASK, FIRST_WORD, VOCAB = 0, 100, 101, 102, 103, 1996, 4096
CHECKPOINT_DIR = "cpu_checkpoint"
CHECKPOINT, BERT_CONFIG = f"{CHECKPOINT_DIR}/model.ckpt-0.pt", f"{CHECKPOINT_DIR}/bert_config.json"
#: The cpu profile's model, in bert_config.json's keys (MLPerf's file has the same keys with
#: BERT-large's values: 1024, 24, 16, 4096 and vocab_size 30522).
TINY_CONFIG = {"attention_probs_dropout_prob": 0.1, "hidden_act": "gelu",
               "hidden_dropout_prob": 0.1, "hidden_size": 128, "initializer_range": 0.02,
               "intermediate_size": 512, "max_position_embeddings": 512,
               "num_attention_heads": 2, "num_hidden_layers": 2, "type_vocab_size": 2,
               "vocab_size": VOCAB}


def documents(root: Path = LICENSES) -> dict[str, list[str]]:
    """The licence texts under ``root`` as ``{file name: sentences}``, by file name; symbolic
    links (``GPL`` -> ``GPL-3``) are skipped. Sentences: runs of text ending in ``.``, ``;``,
    ``:``, ``!`` or ``?``, white space folded (create_pretraining_data reads one sentence a
    line, documents separated by blank lines).

    Raises:
        FileNotFoundError: ``root`` holds no licence text.
    """
    found = {}
    for path in sorted(root.glob("*")) if root.is_dir() else []:
        if path.is_file() and not path.is_symlink():
            text = " ".join(path.read_text(encoding="utf-8", errors="replace").split())
            found[path.name] = [s for s in re.split(r"(?<=[.;:!?])\s+", text) if s]
    if not found:
        raise FileNotFoundError(f"{root}: no licence texts to make BERT samples from")
    return found


def train_vocabulary(texts: list[str]) -> list[str]:
    """A WordPiece vocabulary of :data:`VOCAB` tokens in BERT-uncased's id layout (see the module
    docstring), trained on ``texts`` by ``tokenizers`` (BERT's normaliser: lower case, accents
    stripped; BERT's pre-tokeniser: white space and punctuation)."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    # The trainer breaks ties between equally frequent pairs by symbol id, and gives the
    # word-inner symbols (##a) ids in its hash map's order, which changes from run to run;
    # given first, in sorted order, they get the same ids on every run (as the alphabet does).
    chars = sorted({c for text in texts for c in tokenizer.normalizer.normalize_str(text)
                    if not c.isspace()})
    trainer = trainers.WordPieceTrainer(vocab_size=VOCAB - FIRST_WORD, show_progress=False,
                                        special_tokens=[f"##{c}" for c in chars])
    tokenizer.train_from_iterator(texts, trainer)
    pieces = [p for p, _ in sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])]
    vocab = [f"[unused{i}]" for i in range(FIRST_WORD)]
    for token_id, special in ((PAD, "[PAD]"), (UNK, "[UNK]"), (CLS, "[CLS]"), (SEP, "[SEP]"),
                              (MASK, "[MASK]")):
        vocab[token_id] = special
    vocab += pieces[:VOCAB - FIRST_WORD]
    vocab += [f"[unused{i}]" for i in range(len(vocab), VOCAB)]  # a corpus short of pieces
    return vocab


def tokenizer_for(vocab: list[str]):
    """A ``tokenizers.Tokenizer`` applying ``vocab`` as BERT's BasicTokenizer and
    WordpieceTokenizer do (lower case, split on punctuation, greedy longest-match pieces)."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

    tokenizer = Tokenizer(models.WordPiece({t: i for i, t in enumerate(vocab)},
                                           unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    return tokenizer


def create_instances(docs: list[list[list[int]]], rng: random.Random) -> list[dict]:
    """Training instances from tokenised documents (lists of sentences of ids), as
    create_pretraining_data.py's ``create_training_instances`` makes them: ``DUPE_FACTOR``
    passes over the documents, each cut into ``[CLS] A [SEP] B [SEP]`` pairs of up to
    ``SEQ_LEN`` tokens (a shorter target length with probability ``SHORT_SEQ_PROB``; B the
    true continuation or, with probability 0.5, a random span of another document), then
    :func:`mask_tokens`; shuffled at the end. Returns dicts with ``tokens``, ``segment_ids``,
    ``is_random_next``, ``masked_lm_positions`` and ``masked_lm_labels``."""
    instances = []
    for _ in range(DUPE_FACTOR):
        for index in range(len(docs)):
            instances.extend(_document_instances(docs, index, rng))
    rng.shuffle(instances)
    return instances


def _document_instances(docs, index, rng):
    # create_instances_from_document, line for line where it matters for the samples.
    document, max_tokens = docs[index], SEQ_LEN - 3
    target = rng.randint(2, max_tokens) if rng.random() < SHORT_SEQ_PROB else max_tokens
    instances, chunk, length, i = [], [], 0, 0
    while i < len(document):
        chunk.append(document[i])
        length += len(document[i])
        if i == len(document) - 1 or length >= target:
            if chunk:
                a_end = rng.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
                tokens_a = [t for s in chunk[:a_end] for t in s]
                tokens_b, is_random_next = [], False
                if len(chunk) == 1 or rng.random() < 0.5:
                    is_random_next = True
                    target_b = target - len(tokens_a)
                    other = index
                    for _ in range(10):
                        other = rng.randint(0, len(docs) - 1)
                        if other != index:
                            break
                    start = rng.randint(0, len(docs[other]) - 1)
                    for sentence in docs[other][start:]:
                        tokens_b.extend(sentence)
                        if len(tokens_b) >= target_b:
                            break
                    i -= len(chunk) - a_end  # put the unused segments back
                else:
                    tokens_b = [t for s in chunk[a_end:] for t in s]
                _truncate_pair(tokens_a, tokens_b, max_tokens, rng)
                if tokens_a and tokens_b:
                    tokens = [CLS, *tokens_a, SEP, *tokens_b, SEP]
                    positions, labels = mask_tokens(tokens, rng)
                    instances.append({"tokens": tokens, "is_random_next": is_random_next,
                                      "segment_ids": [0] * (len(tokens_a) + 2)
                                      + [1] * (len(tokens_b) + 1),
                                      "masked_lm_positions": positions,
                                      "masked_lm_labels": labels})
            chunk, length = [], 0
        i += 1
    return instances


def _truncate_pair(tokens_a, tokens_b, max_tokens, rng):
    while len(tokens_a) + len(tokens_b) > max_tokens:
        longer = tokens_a if len(tokens_a) > len(tokens_b) else tokens_b
        del longer[0 if rng.random() < 0.5 else -1]


def mask_tokens(tokens: list[int], rng: random.Random) -> tuple[list[int], list[int]]:
    """create_pretraining_data's ``create_masked_lm_predictions`` (in place on ``tokens``):
    ``min(MAX_PREDICTIONS, max(1, round(len(tokens) * MASKED_LM_PROB)))`` positions other than
    ``[CLS]``/``[SEP]`` drawn at random; each becomes ``[MASK]`` with probability 0.8, stays
    with 0.1, becomes a random vocabulary id with 0.1. Returns (sorted positions, original
    ids)."""
    candidates = [i for i, t in enumerate(tokens) if t not in (CLS, SEP)]
    rng.shuffle(candidates)
    count = min(MAX_PREDICTIONS, max(1, int(round(len(tokens) * MASKED_LM_PROB))))
    chosen = sorted(candidates[:count])
    labels = [tokens[i] for i in chosen]
    for i in chosen:
        if rng.random() < 0.8:
            tokens[i] = MASK
        elif rng.random() >= 0.5:  # else kept
            tokens[i] = rng.randint(0, VOCAB - 1)
    return chosen, labels


def as_arrays(instances: list[dict]) -> dict:
    """Instances as the six arrays of a shard (``BERT_DATASETS``), zero-padded to
    ``SEQ_LEN`` and ``MAX_PREDICTIONS`` as create_pretraining_data writes them."""
    import numpy as np

    count = len(instances)
    arrays = {"input_ids": np.zeros((count, SEQ_LEN), "i4"),
              "input_mask": np.zeros((count, SEQ_LEN), "i1"),
              "segment_ids": np.zeros((count, SEQ_LEN), "i1"),
              "masked_lm_positions": np.zeros((count, MAX_PREDICTIONS), "i4"),
              "masked_lm_ids": np.zeros((count, MAX_PREDICTIONS), "i4"),
              "next_sentence_labels": np.zeros(count, "i1")}
    for row, item in enumerate(instances):
        length, predictions = len(item["tokens"]), len(item["masked_lm_positions"])
        arrays["input_ids"][row, :length] = item["tokens"]
        arrays["input_mask"][row, :length] = 1
        arrays["segment_ids"][row, :length] = item["segment_ids"]
        arrays["masked_lm_positions"][row, :predictions] = item["masked_lm_positions"]
        arrays["masked_lm_ids"][row, :predictions] = item["masked_lm_labels"]
        arrays["next_sentence_labels"][row] = int(item["is_random_next"])
    return arrays


def write_shard(path: Path, arrays: dict) -> None:
    """``arrays`` as one uncompressed HDF5 shard."""
    import h5py

    with h5py.File(path, "w") as shard:
        for name in BERT_DATASETS:
            shard.create_dataset(name, data=arrays[name])


def checkpoint_arrays(config: dict = TINY_CONFIG, seed: int = 0) -> dict:
    """A BertForPreTraining of ``config`` (bert_config.json's keys) as ``{state-dict key: float32
    ndarray}`` in the names of the converted MLPerf checkpoint (``bert.embeddings.*``,
    ``bert.encoder.layer.<i>.attention.self.query.weight`` ..., ``bert.pooler.dense.*``,
    ``cls.predictions.transform.*``, ``cls.predictions.bias``,
    ``cls.predictions.decoder.weight`` (the word embeddings, tied), ``cls.seq_relationship.*``).
    Weights normal with std ``initializer_range`` (BERT's initialisation), drawn from
    ``numpy.random.RandomState(seed)`` in sorted key order; biases 0, LayerNorm weights 1."""
    import numpy as np

    d, f, v = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    shapes = {"bert.embeddings.word_embeddings.weight": (v, d),
              "bert.embeddings.position_embeddings.weight": (config["max_position_embeddings"], d),
              "bert.embeddings.token_type_embeddings.weight": (config["type_vocab_size"], d),
              "bert.pooler.dense.weight": (d, d), "bert.pooler.dense.bias": (d,),
              "cls.predictions.transform.dense.weight": (d, d),
              "cls.predictions.transform.dense.bias": (d,), "cls.predictions.bias": (v,),
              "cls.seq_relationship.weight": (2, d), "cls.seq_relationship.bias": (2,)}
    norms = ["bert.embeddings.LayerNorm", "cls.predictions.transform.LayerNorm"]
    for layer in range(config["num_hidden_layers"]):
        block = f"bert.encoder.layer.{layer}"
        for name in ("attention.self.query", "attention.self.key", "attention.self.value",
                     "attention.output.dense"):
            shapes[f"{block}.{name}.weight"], shapes[f"{block}.{name}.bias"] = (d, d), (d,)
        shapes[f"{block}.intermediate.dense.weight"] = (f, d)
        shapes[f"{block}.intermediate.dense.bias"] = (f,)
        shapes[f"{block}.output.dense.weight"] = (d, f)
        shapes[f"{block}.output.dense.bias"] = (d,)
        norms += [f"{block}.attention.output.LayerNorm", f"{block}.output.LayerNorm"]
    for norm in norms:
        shapes[f"{norm}.weight"], shapes[f"{norm}.bias"] = (d,), (d,)
    generator = np.random.RandomState(seed)
    arrays = {}
    for key in sorted(shapes):
        if key.endswith(".weight") and len(shapes[key]) == 2:
            arrays[key] = generator.normal(0.0, config["initializer_range"],
                                           shapes[key]).astype(np.float32)
        else:
            value = 1.0 if key.endswith("LayerNorm.weight") else 0.0
            arrays[key] = np.full(shapes[key], value, dtype=np.float32)
    arrays["cls.predictions.decoder.weight"] = arrays["bert.embeddings.word_embeddings.weight"]
    return arrays


def write_checkpoint(target: Path, seed: int = 0) -> None:
    """:data:`TINY_CONFIG` as ``target/BERT_CONFIG`` and :func:`checkpoint_arrays` as
    ``target/CHECKPOINT``, ``torch.save({"model": state_dict})`` as the converted MLPerf
    checkpoint is saved, byte for byte the same on every run of the same torch.

    Raises:
        ImportError: torch is not installed (the ``local`` extra).
        OSError: ``target`` cannot be written.
    """
    import torch

    (target / CHECKPOINT_DIR).mkdir(parents=True, exist_ok=True)
    (target / BERT_CONFIG).write_text(json.dumps(TINY_CONFIG, indent=2, sort_keys=True) + "\n",
                                      encoding="utf-8")
    arrays = checkpoint_arrays(TINY_CONFIG, seed)
    state = {key: torch.from_numpy(array) for key, array in arrays.items()}
    # The converted file holds the tied decoder weight as the same tensor as the embeddings.
    state["cls.predictions.decoder.weight"] = state["bert.embeddings.word_embeddings.weight"]
    torch.save({"model": state}, target / CHECKPOINT)


def generate(target: Path) -> dict[str, int]:
    """Write the tiny data under ``target`` (see the module docstring); returns what was written
    per part.

    Raises:
        FileNotFoundError: no licence texts under :data:`LICENSES`.
        ImportError: tokenizers, h5py or torch is not installed (the ``local`` extra).
        OSError: ``target`` cannot be written.
    """
    texts = documents()
    vocab = train_vocabulary([" ".join(s) for s in texts.values()])
    tokenizer = tokenizer_for(vocab)
    tokenised = {}
    for name, sentences in texts.items():
        encoded = tokenizer.encode_batch(sentences, add_special_tokens=False)
        tokenised[name] = [e.ids for e in encoded if e.ids]
    train_docs = [doc for name, doc in tokenised.items() if name not in EVAL_DOCUMENTS]
    eval_docs = [doc for name, doc in tokenised.items() if name in EVAL_DOCUMENTS]
    train_set = create_instances(train_docs, random.Random(12345))  # MLPerf's random_seed
    eval_set = create_instances(eval_docs, random.Random(54321))[:EVAL_SAMPLES]

    train, evaluation = target / BERT_TRAIN_DIR, target / BERT_EVAL_DIR
    train.mkdir(parents=True, exist_ok=True)
    evaluation.mkdir(parents=True, exist_ok=True)
    (target / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    per_shard = TRAIN_SAMPLES // TRAIN_SHARDS
    for shard in range(TRAIN_SHARDS):
        part = train_set[shard * per_shard:(shard + 1) * per_shard]
        write_shard(train / f"part_{shard:05d}_of_{TRAIN_SHARDS:05d}.hdf5", as_arrays(part))
    write_shard(evaluation / "part_eval_10k.hdf5", as_arrays(eval_set))
    write_checkpoint(target)
    return {BERT_TRAIN_DIR: TRAIN_SHARDS * per_shard,
            BERT_EVAL_DIR: len(eval_set), "vocab.txt": len(vocab),
            "cpu checkpoint": 1}


FORMAT = Format(
    name=NAME,
    description="MLPerf BERT hdf5: 2048_shards_uncompressed/part_*.hdf5 + eval_set_uncompressed/"
                " (input_ids ... next_sentence_labels; tiny: 1280 sequences of 128 tokens of"
                " Debian's licence texts, a local WordPiece vocab.txt, the cpu profile's"
                " checkpoint)",
    check=partial(data_check.check, NAME),
    generate=generate,
)
