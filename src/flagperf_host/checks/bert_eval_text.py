"""BERT evaluation text and a transformers BERT folder (FlagPerf's bertLarge inference data)."""

import json
import os
import struct

from flagperf_host.checks.common import need, some, subfolders, text_problem


BERT_EVAL_FILE = "eval.txt"
# What save_pretrained writes for the weights: one file, or an index of shards (large models).
HF_WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin", "model.safetensors.index.json",
                   "pytorch_model.bin.index.json")
BERT_SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
# config.json, a shard index and vocab.txt are read whole below this size (bert-large-uncased's
# vocab.txt: 232 kB); a safetensors header (its JSON index) up to the format's own limit.
HF_SMALL_FILE, SAFETENSORS_HEADER_LIMIT = 16 << 20, 100 << 20


def _json_file(path):
    """The JSON document in ``path``, read whole; ValueError when it is HF_SMALL_FILE or larger
    or not JSON."""
    if os.path.getsize(path) >= HF_SMALL_FILE:
        raise ValueError("over %d MiB" % (HF_SMALL_FILE >> 20))
    with open(path, "rb") as handle:
        try:
            return json.loads(handle.read().decode("utf-8"))
        except (ValueError, UnicodeDecodeError) as err:
            raise ValueError("not JSON (%s)" % err)


def safetensors_index(path):
    """``{tensor name: (dtype, shape)}`` of a safetensors file, from its header (an 8-byte
    little-endian length, then that much JSON); the data must end where the header says.

    Raises:
        ValueError: not a safetensors file, or truncated.
    Layout: huggingface/safetensors, docs/source/index.mdx ("Format").
    """
    size = os.path.getsize(path)
    with open(path, "rb") as handle:
        head = handle.read(8)
        if len(head) < 8:
            raise ValueError("shorter than a safetensors header")
        length = struct.unpack("<Q", head)[0]
        if length > min(SAFETENSORS_HEADER_LIMIT, size - 8):
            raise ValueError("header length %d: not a safetensors file" % length)
        try:
            header = json.loads(handle.read(length).decode("utf-8"))
        except (ValueError, UnicodeDecodeError):
            raise ValueError("header is not JSON: not a safetensors file")
    if not isinstance(header, dict):
        raise ValueError("header is not a JSON object")
    tensors, end = {}, 0
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            tensors[name] = (entry["dtype"], list(entry["shape"]))
            end = max(end, int(entry["data_offsets"][1]))
        except (TypeError, KeyError, IndexError, ValueError):
            raise ValueError("tensor %s: no dtype, shape and data_offsets" % name)
    if size - 8 - length != end:
        raise ValueError("%d bytes of data, the header says %d" % (size - 8 - length, end))
    return tensors


def hf_bert_problems(root, folder):
    """Problems of ``root/folder`` as a transformers BERT ``save_pretrained`` folder with its
    tokenizer: ``config.json`` (``model_type`` bert), weights (HF_WEIGHT_FILES; a safetensors
    file's header and size are checked, and its word embeddings against ``vocab_size`` and
    ``hidden_size``; a shard index's files must exist), ``vocab.txt`` with BERT's special tokens
    and no more lines than ``vocab_size``."""
    problems, where = [], os.path.join(root, folder)
    try:
        config = _json_file(os.path.join(where, "config.json"))
    except ValueError as err:
        return ["%s/config.json: %s" % (folder, err)]
    if not isinstance(config, dict) or config.get("model_type") != "bert":
        return ["%s/config.json: model_type %r, expected bert" % (
            folder, config.get("model_type") if isinstance(config, dict) else None)]
    vocab_size, hidden = config.get("vocab_size"), config.get("hidden_size")
    weights = [n for n in HF_WEIGHT_FILES if os.path.isfile(os.path.join(where, n))]
    if not weights:
        problems.append("%s/: no weights (%s)" % (folder, ", ".join(HF_WEIGHT_FILES)))
    elif weights[0] == "model.safetensors":
        try:
            tensors = safetensors_index(os.path.join(where, weights[0]))
        except ValueError as err:
            tensors = {}
            problems.append("%s/model.safetensors: %s" % (folder, err))
        shape = tensors.get("bert.embeddings.word_embeddings.weight", (None, None))[1]
        if shape is not None and shape != [vocab_size, hidden]:
            problems.append("%s/model.safetensors: word embeddings %s, config.json says "
                            "[vocab_size %s, hidden_size %s]" % (folder, shape, vocab_size, hidden))
    elif weights[0].endswith(".index.json"):
        try:
            shards = set(_json_file(os.path.join(where, weights[0]))["weight_map"].values())
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            shards = set()
            problems.append("%s/%s: no weight_map (%s)" % (folder, weights[0], err))
        missing = sorted(s for s in shards if not os.path.isfile(os.path.join(where, s)))
        if missing:
            problems.append("%s/: shards missing: %s" % (folder, some(missing)))
    elif os.path.getsize(os.path.join(where, weights[0])) == 0:
        problems.append("%s/%s: empty" % (folder, weights[0]))
    if not need(root, folder + "/vocab.txt", problems):
        return problems
    if os.path.getsize(os.path.join(where, "vocab.txt")) < HF_SMALL_FILE:
        with open(os.path.join(where, "vocab.txt"), "rb") as handle:
            tokens = handle.read().decode("utf-8", "replace").splitlines()
        missing = [t for t in BERT_SPECIAL_TOKENS if t not in tokens]
        if missing:
            problems.append("%s/vocab.txt: no %s token" % (folder, ", ".join(missing)))
        if isinstance(vocab_size, int) and len(tokens) > vocab_size:
            problems.append("%s/vocab.txt: %d tokens, config.json vocab_size %d" % (
                folder, len(tokens), vocab_size))
    return problems


def check(root):
    """FlagPerf's bertLarge inference data: ``eval.txt`` (MLPerf BERT's evaluation text,
    non-empty UTF-8; its first 64 KiB is read) and at least one model folder, a subfolder with
    a ``config.json`` (FlagPerf's ``weights/``, the case's ``weight_dir``): a transformers BERT
    saved with ``save_pretrained`` and its tokenizer's ``vocab.txt`` (``hf_bert_problems``).
    Reads the weights' header and size, never the weights.
    """
    problems = []
    if need(root, BERT_EVAL_FILE, problems):
        problem = text_problem(root, BERT_EVAL_FILE)
        if problem:
            problems.append(problem)
    folders = [name for name in subfolders(root)
               if os.path.isfile(os.path.join(root, name, "config.json"))]
    if not folders:
        problems.append("no model folder (a subfolder with a transformers BERT's config.json, "
                        "weights and vocab.txt, as FlagPerf's weights/)")
    for name in folders:
        problems.extend(hf_bert_problems(root, name))
    return problems
