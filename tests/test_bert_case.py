"""The bert case: BERT-large's parameter count, the tiny MLPerf-format data (WordPiece vocabulary
trained here, create_pretraining_data's masking, the cpu profile's checkpoint pinned and loading
as the converted MLPerf checkpoint loads), LAMB against a hand computation, the schedule, the
masked-LM metric, and the declared FLOPs formula against torch.utils.flop_counter."""

from __future__ import annotations

import hashlib
import importlib
import json
import random
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
import yaml
from torch.utils.flop_counter import FlopCounterMode

from case_model import ROOT, case_model, case_module
from driver.convergence import majority_share
from flagperf_ansible import datasets
from flagperf_ansible.config.case_schema import evaluate_formula
from flagperf_ansible.datasets import mlperf_bert_hdf5 as bert_data

CASE = ROOT / "benchmarks" / "bert" / "pytorch"
STANDARD = yaml.safe_load((CASE / "config" / "standard.yaml").read_text())["params"]
CPU = yaml.safe_load((CASE / "config" / "cpu.yaml").read_text())
PROFILE = {**STANDARD, **CPU["params"]}


lamb = case_module("bert", "lamb")
bert_common = importlib.import_module("bert.common")  # shared with the paddle case
entry = case_module("bert", "training")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("mlperf_bert_hdf5")
    datasets.prepare("mlperf_bert_hdf5", root)
    return root


# --- model ---------------------------------------------------------------------------------

def test_bert_large_parameter_count_on_meta_device():
    with torch.device("meta"):
        model = case_model("bert").build_model(STANDARD)
        unpadded = case_model("bert").build_model({**STANDARD, "vocab_size": 30522})
    count = sum(p.numel() for p in model.parameters())
    encoder = sum(p.numel() for p in model.bert.parameters())
    assert count == 336_232_258  # decoder tied to the word embeddings: counted once
    assert encoder == 335_148_032
    # BERT-large's published 335 M is BertModel's at bert_config.json's 30522 rows.
    assert sum(p.numel() for p in unpadded.bert.parameters()) == 335_141_888
    assert round(encoder / 1e6) == 335
    assert bert_common.padded_vocab(30522) == 30528 == STANDARD["vocab_size"]


# --- tiny data -------------------------------------------------------------------------------

def test_tiny_checkpoint_is_pinned_and_in_the_converted_format(tiny):
    path = tiny / CPU["checkpoint"]["path"]
    assert hashlib.sha256(path.read_bytes()).hexdigest() == CPU["checkpoint"]["sha256"]
    saved = torch.load(path, map_location="cpu", weights_only=True)
    assert list(saved) == ["model"]
    config = json.loads((tiny / PROFILE["bert_config_path"]).read_text())
    assert config == bert_data.TINY_CONFIG
    model = case_model("bert").build_model(PROFILE)  # random: the keys are what matters
    own = set(model.state_dict()) - set(case_model("bert").NOT_IN_CHECKPOINT)
    assert set(saved["model"]) == own


def test_tiny_checkpoint_loads_and_bad_files_are_named(tiny, tmp_path):
    model = case_model("bert").build_model(PROFILE, tiny)
    saved = torch.load(tiny / PROFILE["init_checkpoint"], weights_only=True)["model"]
    for key, value in saved.items():
        assert torch.equal(model.state_dict()[key], value), key
    with pytest.raises(ValueError, match=r"bert_config.json: hidden_size is 128, the "
                                         r"configuration says 256"):
        case_model("bert").build_model({**PROFILE, "hidden_size": 256}, tiny)
    wrong = tmp_path / "cpu_checkpoint"
    wrong.mkdir()
    (wrong / "bert_config.json").write_text((tiny / PROFILE["bert_config_path"]).read_text())
    torch.save({"model": {k: v for k, v in saved.items() if "pooler" not in k}},
               wrong / "model.ckpt-0.pt")
    with pytest.raises(ValueError, match=r"model.ckpt-0.pt: does not fit the configured BERT: "
                                         r"missing: bert.pooler.dense.bias"):
        case_model("bert").build_model(PROFILE, tmp_path)
    (wrong / "model.ckpt-0.pt").unlink()
    with pytest.raises(FileNotFoundError, match="no such checkpoint"):
        case_model("bert").build_model(PROFILE, tmp_path)


def test_unpadded_vocabulary_rows_are_padded_on_load(tmp_path):
    config = {**PROFILE, "vocab_size": 4096}
    arrays = bert_data.checkpoint_arrays({**bert_data.TINY_CONFIG, "vocab_size": 4090})
    torch.save({"model": {k: torch.from_numpy(v) for k, v in arrays.items()}}, tmp_path / "c.pt")
    model = case_model("bert").build_model({**config, "init_checkpoint": "c.pt",
                                            "bert_config_path": None}, tmp_path)
    rows = model.bert.embeddings.word_embeddings.weight
    assert rows.shape[0] == 4096 and not rows[4090:].any()


def test_vocabulary_has_bert_uncased_special_ids(tiny):
    vocab = (tiny / "vocab.txt").read_text(encoding="utf-8").splitlines()
    assert len(vocab) == bert_data.VOCAB == PROFILE["vocab_size"]
    assert [vocab[i] for i in (0, 100, 101, 102, 103)] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]",
                                                          "[MASK]"]
    assert all(t.startswith("[unused") for t in vocab[104:bert_data.FIRST_WORD])
    tokenizer = bert_data.tokenizer_for(vocab)
    pieces = tokenizer.encode("This License applies to any program.",
                              add_special_tokens=False).tokens
    assert pieces[:3] == ["this", "license", "applies"] and pieces[-1] == "."


def test_shards_are_create_pretraining_data_samples(tiny):
    vocab = (tiny / "vocab.txt").read_text(encoding="utf-8").splitlines()
    counts = []
    for shard in sorted(tiny.rglob("part*.hdf5")):
        with h5py.File(shard, "r") as f:
            arrays = {key: np.asarray(f[key][:]) for key in bert_common.KEYS}
        assert arrays["input_ids"].shape[1] == PROFILE["max_seq_length"]
        assert arrays["masked_lm_ids"].shape[1] == PROFILE["max_predictions_per_seq"]
        for row in range(len(arrays["input_ids"])):
            length = int(arrays["input_mask"][row].sum())
            ids, segments = arrays["input_ids"][row], arrays["segment_ids"][row]
            # [CLS] A [SEP] B [SEP]; B is segment 1 (a masked token may become a random id,
            # [SEP] too, as create_pretraining_data draws from the whole vocabulary).
            seps = np.array([int(np.argmax(segments)) - 1, length - 1])
            assert ids[0] == bert_data.CLS and (ids[seps] == bert_data.SEP).all()
            assert not segments[:seps[0] + 1].any() and segments[seps[0] + 1:length].all()
            count = int(np.count_nonzero(arrays["masked_lm_positions"][row]))
            assert count == min(bert_data.MAX_PREDICTIONS, max(1, round(0.15 * length)))
            positions = arrays["masked_lm_positions"][row, :count]
            assert (np.diff(positions) > 0).all() and positions.max() < length
            assert not np.isin(positions, seps).any()
            counts.append(np.mean(ids[positions] == bert_data.MASK))
            labels = arrays["masked_lm_ids"][row, :count]
            assert (labels >= bert_data.FIRST_WORD).all()
        assert set(np.unique(arrays["next_sentence_labels"])) == {0, 1}
    assert 0.75 < float(np.mean(counts)) < 0.85  # 80 % [MASK]
    words = " ".join(vocab[i] for i in arrays["masked_lm_ids"][0] if i)
    assert words  # real pieces of the licence texts


def test_mask_tokens_follows_the_80_10_10_rule():
    rng = random.Random(0)
    kept = masked = randomised = total = 0
    for _ in range(300):
        tokens = [bert_data.CLS] + [bert_data.FIRST_WORD + 5] * 100 + [bert_data.SEP]
        positions, labels = bert_data.mask_tokens(tokens, rng)
        assert len(positions) == min(bert_data.MAX_PREDICTIONS, round(0.15 * 102))
        assert 0 not in positions and 101 not in positions
        assert labels == [bert_data.FIRST_WORD + 5] * len(positions)
        for p in positions:
            total += 1
            masked += tokens[p] == bert_data.MASK
            kept += tokens[p] == bert_data.FIRST_WORD + 5
        randomised = total - masked - kept
    assert abs(masked / total - 0.8) < 0.03 and abs(kept / total - 0.1) < 0.03
    assert abs(randomised / total - 0.1) < 0.03


def test_cpu_target_clears_the_untrained_model_and_the_most_frequent_piece(tiny):
    """The cpu profile's baselines on the tiny data, from the case's code: the model as its
    checkpoint builds it, and always the training shards' most frequent masked-LM label (the
    case's input-blind predictor, against a count of the shards' arrays); the target lies
    beyond both by at least 3 x the profile's spread."""
    seq, preds = PROFILE["max_seq_length"], PROFILE["max_predictions_per_seq"]
    train = entry.BertShards(tiny / bert_common.TRAIN_DIR, seq, preds)
    val = entry.BertShards(tiny / bert_common.EVAL_DIR, seq, preds)
    blind = majority_share(train.masked_lm_labels(), val.masked_lm_labels())
    counts = {}
    for folder in (bert_common.TRAIN_DIR, bert_common.EVAL_DIR):
        ids = []
        for path in sorted((tiny / folder).glob("part*")):
            with h5py.File(path, "r") as shard:
                ids.append(shard["masked_lm_ids"][()][shard["masked_lm_positions"][()] > 0])
        counts[folder] = np.bincount(np.concatenate(ids), minlength=bert_data.VOCAB)
    top = int(np.argmax(counts[bert_common.TRAIN_DIR]))
    assert bert_data.tokenizer_for(
        (tiny / "vocab.txt").read_text(encoding="utf-8").splitlines()).id_to_token(top) == "the"
    masked = int(counts[bert_common.EVAL_DIR].sum())
    assert blind == counts[bert_common.EVAL_DIR][top] / masked and masked == 4402
    model = case_model("bert").build_model(PROFILE, tiny).eval()
    sums = {"correct": 0, "masked": 0}
    with torch.no_grad():
        for start in range(0, len(val), 64):
            batch = entry.collate([val[i] for i in range(start, min(start + 64, len(val)))])
            for key, value in entry.mlm_sums(model, batch).items():
                sums[key] += value
    untrained = entry.mlm_accuracy(sums)
    spread, target = CPU["profile"]["baselines"]["spread"], PROFILE["target_mlm_accuracy"]
    assert spread == pytest.approx((target * (1 - target) / masked) ** 0.5, abs=5e-5)
    print(f"untrained {untrained:.5f}, most frequent piece {blind:.4f}, target {target}, "
          f"spread {spread}")
    assert max(untrained, blind) + 3 * spread <= target


# --- optimizer and schedule ------------------------------------------------------------------

def test_lamb_step_matches_the_formulation():
    torch.manual_seed(0)
    w, b = torch.nn.Parameter(torch.randn(4, 3)), torch.nn.Parameter(torch.randn(3))
    gw, gb = torch.randn(4, 3) * 3, torch.randn(3) * 3
    optimizer = lamb.Lamb([{"params": [w], "weight_decay": 0.01},
                           {"params": [b], "weight_decay": 0.0}], lr=0.1, betas=(0.9, 0.999),
                          eps=1e-6, max_grad_norm=1.0)
    p0 = [w.detach().clone().double(), b.detach().clone().double()]
    norm = torch.cat([gw.flatten(), gb.flatten()]).double().norm()
    assert norm > 1.0  # the global clip applies
    expected = []
    for p, g, wd in ((p0[0], gw.double(), 0.01), (p0[1], gb.double(), 0.0)):
        g = g / norm
        m, v = 0.1 * g, 0.001 * g * g
        u = (m / 0.1) / ((v / 0.001).sqrt() + 1e-6) + wd * p
        ratio = p.norm() / u.norm() if wd else 1.0
        expected.append(p - 0.1 * ratio * u)
    w.grad, b.grad = gw, gb
    optimizer.step()
    assert torch.allclose(w.double(), expected[0], atol=1e-6)
    assert torch.allclose(b.double(), expected[1], atol=1e-6)
    with pytest.raises(ValueError, match="out of range"):
        lamb.Lamb([w], lr=0.0)


def test_bert_param_groups_follow_flagperf():
    model = case_model("bert").build_model(PROFILE)
    decay, plain = lamb.bert_param_groups(model, 0.01)
    names = {id(p): n for n, p in model.named_parameters()}
    assert all("LayerNorm" in names[id(p)] or names[id(p)].endswith("bias")
               for p in plain["params"])
    assert decay["weight_decay"] == 0.01 and plain["weight_decay"] == 0.0
    assert len(decay["params"]) + len(plain["params"]) == len(list(model.parameters()))


def test_poly_warmup_schedule():
    assert [bert_common.poly_warmup_factor(s, 0, 100) for s in (0, 50, 100, 150)] == [1.0, 0.5, 0.0, 0.0]
    assert [bert_common.poly_warmup_factor(s, 10, 100) for s in (0, 5, 10)] == [0.0, 0.5, 0.9]


# --- loss, metric, FLOPs ---------------------------------------------------------------------

def _batch(config: dict, batch: int, seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    t, p = config["max_seq_length"], config["max_predictions_per_seq"]
    positions = torch.sort(torch.randperm(t - 2, generator=g)[:p] + 1).values
    positions = positions.expand(batch, -1).clone()
    positions[0, -2:] = 0  # unused predictions are zero-padded
    return {"input_ids": torch.randint(config["vocab_size"], (batch, t), generator=g),
            "segment_ids": torch.zeros(batch, t, dtype=torch.long),
            "input_mask": torch.ones(batch, t, dtype=torch.long),
            "masked_lm_positions": positions,
            "masked_lm_ids": torch.randint(config["vocab_size"], (batch, p), generator=g),
            "next_sentence_labels": torch.randint(2, (batch,), generator=g)}


def test_mlm_accuracy_counts_masked_positions_only():
    torch.manual_seed(0)
    model = case_model("bert").build_model(PROFILE).eval()
    batch = _batch(PROFILE, 3)
    with torch.no_grad():
        mlm, _ = entry.heads(model, batch)
        batch["masked_lm_ids"] = mlm.argmax(-1)  # every prediction right ...
        batch["masked_lm_ids"][1, :5] = (batch["masked_lm_ids"][1, :5] + 1) % 4096  # ... but 5
        sums = entry.mlm_sums(model, batch)
    used = 3 * PROFILE["max_predictions_per_seq"] - 2
    assert sums == {"correct": used - 5, "masked": used}
    assert entry.mlm_accuracy(sums) == pytest.approx((used - 5) / used)
    assert entry.mlm_accuracy({"correct": 0, "masked": 0}) == 0.0


def test_collate_cuts_padding_without_changing_the_loss():
    torch.manual_seed(0)
    model = case_model("bert").build_model(PROFILE).eval()
    batch = _batch(PROFILE, 2)
    batch["input_mask"][:, 100:] = 0
    batch["input_ids"][:, 100:] = 0
    batch["masked_lm_positions"].clamp_(max=99)
    items = [{k: v[i] for k, v in batch.items()} for i in range(2)]
    cut = entry.collate(items)
    assert cut["input_ids"].shape == (2, 100)
    with torch.no_grad():
        assert torch.allclose(entry.pretraining_loss(model, cut),
                              entry.pretraining_loss(model, batch), atol=1e-5)


def test_declared_flops_match_flop_counter():
    config = {**PROFILE, "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 2,
              "intermediate_size": 256, "vocab_size": 512, "max_seq_length": 32,
              "max_predictions_per_seq": 5, "hidden_dropout_prob": 0.0,
              "attention_probs_dropout_prob": 0.0}
    case = yaml.safe_load((CASE / "case.yml").read_text())
    per_sequence = evaluate_formula(case["mfu"]["flops_per_unit"]["formula"], config)
    model = case_model("bert").build_model(config)
    # The CPU's fused attention kernel has no FLOP formula in torch.utils.flop_counter; the
    # eager attention (matmuls, softmax) computes the same and is counted.
    model.bert.set_attn_implementation("eager")
    batch = _batch(config, 4)
    with FlopCounterMode(display=False) as counter:
        entry.pretraining_loss(model, batch).backward()
    assert counter.get_total_flops() == pytest.approx(4 * per_sequence, rel=1e-9)
    standard = evaluate_formula(case["mfu"]["flops_per_unit"]["formula"], STANDARD)
    assert standard == pytest.approx(1.0198e12, rel=1e-4)
