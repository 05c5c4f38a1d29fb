"""The glm training case (benchmarks/glm/pytorch) and its data format (``glm_record_hdf5``).

* GLM-large as written in the case's model.py has the parameter count its architecture gives,
  the "335M" of the GLM paper (built on the meta device: no memory).
* The declared FLOPs per candidate sequence (``case.yml`` ``mfu.flops_per_unit``) equal what
  ``torch.utils.flop_counter`` counts for one training step of the model on a small config.
* The tiny ReCoRD files are in h5sparse's CSR layout, read back as FlagPerf's loader reads
  them (rows per candidate, 2D positions, the answer first in training); the checker refuses a
  missing or non-HDF5 file. The WordPiece vocabulary comes out the same on every training
  (the trainer's hash-map order once changed it) and covers the texts without [UNK].
* The cpu profile's checkpoint has the pinned SHA-256, is GLM's ``{"module": state_dict}`` and
  loads; a checkpoint lacking weights is refused.
* GLM's blank-infilling mask, its linear warmup and decay, and the multi-token cloze score.
* The answer prior, the case's input-blind predictor: the better of the most-often-answer and
  the answer-rate priors, on hand-made files; on the tiny data, beyond chance, short of the
  cpu target.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from case_model import case_config, case_model, case_module
from flagperf_ansible import datasets
from flagperf_ansible.config.cases import load_case, profile_of
from flagperf_ansible.datasets import glm_record_hdf5
from flagperf_ansible.results.mfu import flops_per_unit
from flagperf_host.checks.glm_record_hdf5 import GLM_RECORD_FILES

ROOT = Path(__file__).resolve().parents[1]
CASE_DIR = ROOT / "benchmarks" / "glm" / "pytorch"
#: GLM-large from its architecture (model.py's docstring): word embeddings 30592 x 1024, two
#: position tables 2 x 513 x 1024, 24 layers of 12 h^2 + 13 h, the final LayerNorm 2 h.
GLM_LARGE_PARAMS = 30592 * 1024 + 2 * 513 * 1024 + 24 * (12 * 1024 ** 2 + 13 * 1024) + 2 * 1024


def glm_module(name: str):
    return case_module("glm", name)


def config(hardware: str = "standard") -> dict:
    return case_config("glm", hardware)


@pytest.fixture(scope="module")
def record(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("glm_record")
    datasets.prepare("glm_record_hdf5", root)
    return root


# -- the model against its published size and FLOPs ------------------------------------------

def test_glm_large_has_the_parameter_count_of_its_architecture():
    with torch.device("meta"):
        net = case_model("glm").build_model(config())
    assert sum(p.numel() for p in net.parameters()) == GLM_LARGE_PARAMS == 334_688_256
    assert round(GLM_LARGE_PARAMS / 1e6) == 335  # GLM paper, table 1: GLM-Large 335M


def test_state_dict_keys_are_thudm_glms():
    with torch.device("meta"):
        net = case_model("glm").build_model({**config(), "num_layers": 1})
    assert set(net.model.state_dict()) == {
        "word_embeddings.weight", "transformer.position_embeddings.weight",
        "transformer.block_position_embeddings.weight", "transformer.final_layernorm.weight",
        "transformer.final_layernorm.bias",
        *(f"transformer.layers.0.{name}.{kind}"
          for name in ("input_layernorm", "attention.query_key_value", "attention.dense",
                       "post_attention_layernorm", "mlp.dense_h_to_4h", "mlp.dense_4h_to_h")
          for kind in ("weight", "bias"))}


def test_declared_flops_are_what_flop_counter_counts_for_a_training_step():
    params = {**config(), "num_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
              "vocab_size": 256, "max_seq_length": 32, "max_position_embeddings": 32,
              "checkpoint_activations": False}
    net = case_model("glm").build_model(params)
    batch, choices, length = 2, 3, params["max_seq_length"]
    ids = torch.randint(1, 256, (batch, choices, length))
    positions = torch.arange(length).expand(batch, choices, 2, length)
    sep = torch.full((batch, choices), length // 2)
    with FlopCounterMode(display=False) as counter:
        net(ids, positions, sep, ids, torch.ones(batch, choices, length)).sum().backward()
    declared = load_case(ROOT, "glm", "pytorch").spec.mfu.flops_per_unit.model_dump()
    assert flops_per_unit(declared, params) * batch * choices == pytest.approx(
        counter.get_total_flops(), rel=1e-6)
    assert flops_per_unit(declared, config()) == pytest.approx(1.1013e12, rel=1e-4)


# -- GLM's maths -------------------------------------------------------------------------------

def test_blank_infilling_mask_is_bidirectional_in_part_a_and_causal_after():
    mask = case_model("glm").blank_infilling_mask(torch.tensor([2]), 4)[0, 0]
    assert mask.int().tolist() == [[1, 1, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]]


def test_annealing_lr_warms_up_from_zero_then_decays_linearly_to_the_ratio():
    annealing = glm_module("training").annealing_lr
    factor = [annealing(step, warmup_steps=10, decay_steps=90, decay_ratio=0.1)
              for step in (0, 5, 10, 55, 100, 1000)]
    assert factor == pytest.approx([0.0, 0.5, 1.0, 0.55, 0.1, 0.1])


def test_cloze_score_is_the_log_probability_of_the_candidates_tokens():
    params = {**config("cpu"), "hidden_dropout": 0.0, "attention_dropout": 0.0}
    net = case_model("glm").build_model(params).eval()
    length = params["max_seq_length"]
    ids = torch.randint(5, 100, (1, 1, length))
    positions = torch.arange(length).expand(1, 1, 2, length).clone()
    target, logit_mask = torch.zeros_like(ids), torch.zeros(1, 1, length)
    target[0, 0, 10:12], logit_mask[0, 0, 10:12] = torch.tensor([7, 9]), 1.0
    score = net(ids, positions, torch.tensor([[10]]), target, logit_mask)
    log_probs = torch.log_softmax(net.model(ids[0], positions[0], torch.tensor([10])), -1)
    assert score.item() == pytest.approx((log_probs[0, 10, 7] + log_probs[0, 11, 9]).item(),
                                         rel=1e-5)


# -- the data format ---------------------------------------------------------------------------

def test_tiny_record_files_are_h5sparse_csr_groups(record):
    import h5py

    with h5py.File(record / GLM_RECORD_FILES[1], "r") as handle:
        assert set(handle) == {"text", "position", "mask", "target", "logit_mask",
                               "choice_start_end", "answer_start_end", "answer_idx"}
        text = handle["text"]
        assert text.attrs["h5sparse_format"] == "csr"
        assert set(text) == {"data", "indices", "indptr"}
        assert text["indices"].dtype == np.int32 and text["indptr"].dtype == np.int64
        rows, length = (int(n) for n in text.attrs["h5sparse_shape"])
        assert length == glm_record_hdf5.SEQ_LEN and len(text["indptr"]) == rows + 1
        assert tuple(handle["position"].attrs["h5sparse_shape"]) == (2 * rows, length)


def test_samples_read_back_as_glms_record_encoding(record):
    reader = glm_module("record")
    train = reader.RecordSet(record / GLM_RECORD_FILES[0], False,
                             glm_record_hdf5.SEQ_LEN)
    evaluation = reader.RecordSet(record / GLM_RECORD_FILES[1], True,
                                  glm_record_hdf5.SEQ_LEN)
    assert len(train) > 500 and len(evaluation) > 100
    sample = evaluation[0]
    sep = int(sample["sep"][0])
    text, positions, target = sample["text"][0], sample["position"][0], sample["target"][0]
    assert text[0] == glm_record_hdf5.CLS and text[sep - 1] == glm_record_hdf5.PAD
    assert text[sep] == glm_record_hdf5.SOP
    mask_at = list(text).index(glm_record_hdf5.MASK)
    answer = np.flatnonzero(sample["logit_mask"][0])
    assert answer[0] == sep and positions[0, sep] == mask_at and positions[1, sep] == 1
    # Part B feeds the answer shifted by one: the target at i is the input at i + 1.
    assert list(text[sep + 1:answer[-1] + 1]) == list(target[sep:answer[-1]])
    assert sample["answers"] and max(sample["answers"]) < len(sample["text"])
    batch = reader.collate([train[0], evaluation[0], evaluation[1]])
    choices = max(len(s["text"]) for s in (train[0], evaluation[0], evaluation[1]))
    assert batch["text"].shape == (3, choices, glm_record_hdf5.SEQ_LEN)
    assert batch["position"].shape == (3, choices, 2, glm_record_hdf5.SEQ_LEN)
    assert batch["label"].tolist() == [0, 0, 0]


def test_training_samples_put_the_answer_first_and_chance_is_well_below_the_target(record):
    texts = glm_record_hdf5.license_texts()
    rng = np.random.default_rng(glm_record_hdf5.SEED)
    samples = [s for name, text in texts for s in glm_record_hdf5.cloze_samples(name, text, rng)]
    assert all(s["candidates"][0] == s["answer"] and "@placeholder" in s["query"]
               and s["answer"] in s["passage"] for s in samples)
    evaluation = [s for s in samples if s["split"] == "eval"]
    chance = np.mean([1 / len(s["candidates"]) for s in evaluation])
    assert chance < config("cpu")["target_accuracy"] - 0.1


def test_vocabulary_is_the_same_on_every_training_and_covers_the_texts():
    # Each training's hash maps get new random keys: before the word-inner symbols had fixed
    # ids, 6 trainings in one process gave 2 or 3 different vocabularies in 4 runs out of 5.
    texts = [text for _, text in glm_record_hdf5.license_texts()]
    vocabularies = {tuple(glm_record_hdf5.train_vocabulary(texts)) for _ in range(6)}
    assert len(vocabularies) == 1
    vocab = list(vocabularies.pop())
    assert len(vocab) == glm_record_hdf5.VOCAB and not any(p.startswith("[unused") for p in vocab)
    encode = glm_record_hdf5.wordpiece_encoder(vocab)
    assert all(glm_record_hdf5.UNK not in encode(text) for text in texts)


def test_checker_wants_both_files_as_hdf5(record, tmp_path):
    assert datasets.check("glm_record_hdf5", record) == []
    (tmp_path / GLM_RECORD_FILES[0]).parent.mkdir(parents=True)
    (tmp_path / GLM_RECORD_FILES[0]).write_text("not hdf5")
    assert datasets.check("glm_record_hdf5", tmp_path) == [
        f"{GLM_RECORD_FILES[0]}: not an HDF5 file (no signature)",
        f"{GLM_RECORD_FILES[1]}: missing file"]


def test_a_file_of_another_sequence_length_is_refused(record):
    reader = glm_module("record")
    with pytest.raises(ValueError, match="text: sequences of 64 tokens, the configuration's "
                                         "max_seq_length is 512"):
        reader.RecordSet(record / GLM_RECORD_FILES[0], False, 512)


WORDS = ("a", "b", "alpha", "beta", "delta", "epsilon")


def write_record_files(folder: Path, train: list, evaluation: list) -> list[Path]:
    """``train`` and ``evaluation`` (lists of ``(candidates, answer)``, words of
    :data:`WORDS`) as ReCoRD hdf5 files under ``folder``; a word's id is 10 + its index."""
    def encode(text: str) -> list[int]:
        return [10 + WORDS.index(word) for word in text.split()]

    paths = []
    for name, samples in (("train", train), ("eval", evaluation)):
        rows = [{"passage": " ".join(candidates), "query": "a @placeholder b",
                 "candidates": candidates, "answer": answer} for candidates, answer in samples]
        paths.append(folder / f"{name}.hdf5")
        glm_record_hdf5.write_record_hdf5(paths[-1], glm_record_hdf5.encode_samples(rows, encode))
    return paths


def test_answer_prior_is_the_better_of_the_count_and_the_rate_prior(tmp_path):
    reader = glm_module("record")
    # alpha: 3 answers of 5 offers; delta: 2 of 2; beta: 0 of 3.
    train = [(["alpha", "beta"], "alpha")] * 3 + [(["delta", "alpha"], "delta")] * 2
    # count prior: alpha, alpha, alpha, beta (a tie: the first) -> 2 of 4 right;
    # rate prior: alpha (4/7 > 1/5), delta (3/4 > 4/7), delta, epsilon (1/2 > 1/5) -> 3 of 4.
    evaluation = [(["beta", "alpha"], "alpha"), (["alpha", "delta"], "delta"),
                  (["delta", "alpha"], "alpha"), (["beta", "epsilon"], "epsilon")]
    # Where alpha is the answer against delta, the count prior is right and the rate prior not.
    counted = [(["delta", "alpha"], "alpha")] * 2 + [(["beta", "alpha"], "alpha")]

    def prior(evaluation: list, folder: Path) -> float:
        folder.mkdir()
        paths = write_record_files(folder, train, evaluation)
        sets = [reader.RecordSet(path, path.stem == "eval", glm_record_hdf5.SEQ_LEN)
                for path in paths]
        assert sets[1].candidate_tokens(0) == [(10 + WORDS.index(word),)
                                               for word in evaluation[0][0]]
        return reader.answer_prior(*sets)

    assert prior(evaluation, tmp_path / "rate") == 0.75
    assert prior(counted, tmp_path / "count") == 1.0


def test_answer_prior_on_the_tiny_data_beats_chance_short_of_the_target(record):
    reader = glm_module("record")
    train, evaluation = (reader.RecordSet(record / relative, is_eval, glm_record_hdf5.SEQ_LEN)
                         for relative, is_eval in zip(GLM_RECORD_FILES, (False, True)))
    chance = np.mean([1 / len(evaluation.candidate_tokens(i)) for i in range(len(evaluation))])
    prior = reader.answer_prior(train, evaluation)
    print(f"\nchance {chance:.3f}, answer prior {prior:.3f} over {len(evaluation)} samples")
    assert chance < prior < config("cpu")["target_accuracy"]


# -- checkpoints -------------------------------------------------------------------------------

def test_cpu_checkpoint_is_pinned_and_loads(record):
    case = load_case(ROOT, "glm", "pytorch")
    label, params = profile_of(ROOT, case, "cpu")
    pinned = label["checkpoint"]
    path = record / pinned["path"]
    assert hashlib.sha256(path.read_bytes()).hexdigest() == pinned["sha256"]
    assert params["init_checkpoint"] == pinned["path"]
    module = case_model("glm")
    net = module.build_model(config("cpu"))
    assert module.load_glm_checkpoint(net.model, path) == []
    saved = torch.load(path, weights_only=True)["module"]
    assert torch.equal(net.model.state_dict()["transformer.layers.1.mlp.dense_4h_to_h.weight"],
                       saved["transformer.layers.1.mlp.dense_4h_to_h.weight"])


def test_standard_checkpoint_is_blocklm_large_blank_unpinned():
    checkpoint = load_case(ROOT, "glm", "pytorch").spec.checkpoint
    assert checkpoint.path == config()["init_checkpoint"] and checkpoint.sha256 is None
    assert "checksum" in checkpoint.unpinned


def test_a_checkpoint_lacking_weights_or_without_module_is_refused(record, tmp_path):
    module = case_model("glm")
    net = module.build_model(config("cpu"))
    saved = torch.load(record / glm_record_hdf5.TINY_CHECKPOINT, weights_only=True)
    del saved["module"]["transformer.final_layernorm.bias"]
    torch.save(saved, tmp_path / "broken.pt")
    with pytest.raises(ValueError, match=r"broken.pt: lacks 1 weights of the model, e.g. "
                                         r"transformer.final_layernorm.bias"):
        module.load_glm_checkpoint(net.model, tmp_path / "broken.pt")
    torch.save(saved["module"], tmp_path / "bare.pt")
    with pytest.raises(ValueError, match="bare.pt: no 'module' state dict"):
        module.load_glm_checkpoint(net.model, tmp_path / "bare.pt")


class Hook:
    """A class a checkpoint could carry: unpickling it would run code of its choosing."""


def test_deepspeed_client_state_loads_without_unpickling_code(record, tmp_path):
    import argparse

    module = case_model("glm")
    net = module.build_model(config("cpu"))
    saved = torch.load(record / glm_record_hdf5.TINY_CHECKPOINT, weights_only=True)
    torch.save({**saved, "args": argparse.Namespace(iteration=200000)}, tmp_path / "ds.pt")
    assert module.load_glm_checkpoint(net.model, tmp_path / "ds.pt") == []
    torch.save({**saved, "hook": Hook()}, tmp_path / "hook.pt")
    with pytest.raises(ValueError, match="init_checkpoint_full_pickle: true reads Python objects"):
        module.load_glm_checkpoint(net.model, tmp_path / "hook.pt")
    assert module.load_glm_checkpoint(net.model, tmp_path / "hook.pt", full_pickle=True) == []
