"""The cpm case (benchmarks/cpm/pytorch): CPM-1 medium's parameter count, the Megatron
checkpoint mapping against upstream's forward pass, the pinned tiny checkpoint, the cpm_text
format (checker, generator, CPM's tokenizer files), the embedding-average metric against
upstream's definition, the learning-rate schedule and the FLOPs formula."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from case_model import case_config, case_model, case_module
from flagperf_ansible import datasets
from flagperf_ansible.config.case_schema import evaluate_formula
from flagperf_ansible.config.cases import load_case, profile_of
from flagperf_ansible.datasets import cpm_text
from flagperf_host.data_check import checkpoint_problems

ROOT = Path(__file__).resolve().parents[1]
CASE_DIR = ROOT / "benchmarks" / "cpm" / "pytorch"
#: CPM-1 medium: 24 x 12,596,224 (layers) + 30,720,000 (tied word embedding) + 1,048,576
#: (positions) + 2,048 (final LayerNorm); FlagPerf's README and the CPM paper: 0.33 B.
CPM_MEDIUM_PARAMS = 334_080_000


def cpm_config(hardware: str = "standard") -> dict:
    return case_config("cpm", hardware)


def cpm_module(name: str):
    return case_module("cpm", name)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("cpm_text")
    datasets.prepare("cpm_text", root)
    return root


# -- the model -------------------------------------------------------------------------------

def test_standard_model_has_cpm_mediums_parameter_count():
    config = cpm_config()
    with torch.device("meta"):
        net = case_model("cpm").build_model(config)
    assert sum(p.numel() for p in net.parameters()) == CPM_MEDIUM_PARAMS
    assert net.lm_head.weight is net.transformer.wte.weight  # tied: counted once


def megatron_forward(state: dict, input_ids: torch.Tensor, num_layers: int, heads: int,
                     eps: float = 1e-5) -> torch.Tensor:
    """Upstream's GPT2Model forward (model/models/gpt2_modeling.py and transformer.py: pre-LN
    layers, q/k/v split of query_key_value, scores / sqrt(hn) masked as scores * mask - 10000
    (1 - mask), tanh GELU, final LayerNorm, logits against the word embeddings), in eval mode,
    on a Megatron-layout state dict."""
    ln = torch.nn.functional.layer_norm
    lin = torch.nn.functional.linear
    b, s = input_ids.shape
    x = state["word_embeddings.weight"][input_ids] + state["position_embeddings.weight"][:s]
    h = x.shape[-1]
    mask = torch.tril(torch.ones(s, s))
    for i in range(num_layers):
        p = {k[len(f"transformer.layers.{i}."):]: v for k, v in state.items()
             if k.startswith(f"transformer.layers.{i}.")}
        y = ln(x, (h,), p["input_layernorm.weight"], p["input_layernorm.bias"], eps)
        q, k, v = lin(y, p["attention.query_key_value.weight"],
                      p["attention.query_key_value.bias"]).split(h, dim=-1)
        q, k, v = (t.view(b, s, heads, h // heads).permute(0, 2, 1, 3) for t in (q, k, v))
        scores = q @ k.transpose(-1, -2) / math.sqrt(h // heads)
        probs = torch.softmax(scores * mask - 10000.0 * (1.0 - mask), dim=-1)
        context = (probs @ v).permute(0, 2, 1, 3).reshape(b, s, h)
        x = x + lin(context, p["attention.dense.weight"], p["attention.dense.bias"])
        y = ln(x, (h,), p["post_attention_layernorm.weight"], p["post_attention_layernorm.bias"],
               eps)
        y = lin(y, p["mlp.dense_h_to_4h.weight"], p["mlp.dense_h_to_4h.bias"])
        y = 0.5 * y * (1.0 + torch.tanh(0.7978845608028654 * y * (1.0 + 0.044715 * y * y)))
        x = x + lin(y, p["mlp.dense_4h_to_h.weight"], p["mlp.dense_4h_to_h.bias"])
    x = ln(x, (h,), state["transformer.final_layernorm.weight"],
           state["transformer.final_layernorm.bias"], eps)
    return lin(x, state["word_embeddings.weight"])


def random_megatron_state(layers=2, hidden=32, vocab=97, positions=16, seed=3) -> dict:
    arrays = cpm_text.megatron_arrays(layers, hidden, vocab, positions, seed=seed)
    generator = np.random.RandomState(seed)  # non-trivial norms and biases too
    return {k: torch.from_numpy(a + (generator.normal(0, 0.05, a.shape).astype(np.float32)
                                     if a.ndim == 1 else 0)) for k, a in arrays.items()}


def test_checkpoint_mapping_reproduces_upstreams_forward_pass(tmp_path):
    model_py = case_model("cpm")
    state = random_megatron_state()
    config = {"num_layers": 2, "hidden_size": 32, "num_attention_heads": 4, "vocab_size": 97,
              "max_position_embeddings": 16, "hidden_dropout": 0.0, "attention_dropout": 0.0,
              "init_checkpoint": "ckpt.pt"}
    torch.save({"model": state}, tmp_path / "ckpt.pt")
    net = model_py.build_model(config, tmp_path).eval()
    ids = torch.randint(0, 97, (3, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ours = net(input_ids=ids).logits
    torch.testing.assert_close(ours, megatron_forward(state, ids, 2, 4), atol=2e-5, rtol=1e-4)
    back = model_py.gpt2_to_megatron(net.state_dict(), 2)
    assert back.keys() == state.keys()
    assert all(torch.equal(back[k], state[k]) for k in state)


def test_checkpoint_mapping_names_a_missing_extra_or_misshapen_key(tmp_path):
    model_py = case_model("cpm")
    state = random_megatron_state()
    with pytest.raises(ValueError, match="no transformer.layers.1.mlp.dense_4h_to_h.bias"):
        model_py.megatron_to_gpt2({k: v for k, v in state.items()
                                   if k != "transformer.layers.1.mlp.dense_4h_to_h.bias"}, 2)
    with pytest.raises(ValueError, match="not in a 1-layer CPM"):
        model_py.megatron_to_gpt2(state, 1)
    config = {"num_layers": 2, "hidden_size": 32, "num_attention_heads": 4, "vocab_size": 98,
              "max_position_embeddings": 16, "hidden_dropout": 0.0, "attention_dropout": 0.0,
              "init_checkpoint": "ckpt.pt"}
    torch.save(state, tmp_path / "ckpt.pt")
    with pytest.raises(ValueError, match=r"ckpt.pt: .*transformer.wte.weight is \(97, 32\)"):
        model_py.build_model(config, tmp_path)
    with pytest.raises(FileNotFoundError, match="init_checkpoint"):
        model_py.build_model({**config, "init_checkpoint": "none.pt"}, tmp_path)


def test_tiny_checkpoint_is_pinned_and_loads_into_the_cpu_model(tiny):
    case = load_case(ROOT, "cpm", "pytorch")
    pinned = profile_of(ROOT, case, "cpu")[0]["checkpoint"]
    path = tiny / pinned["path"]
    assert hashlib.sha256(path.read_bytes()).hexdigest() == pinned["sha256"]
    config = cpm_config("cpu")
    for key, value in cpm_text.TINY_MODEL.items():
        assert config[key] == value, key
    net = case_model("cpm").build_model(config, tiny)
    state = torch.load(path, weights_only=True)["model"]
    torch.testing.assert_close(net.transformer.h[1].attn.c_attn.weight,
                               state["transformer.layers.1.attention.query_key_value.weight"].t())
    assert checkpoint_problems(str(tiny), pinned["path"], pinned["sha256"]) == []


# -- the data --------------------------------------------------------------------------------

def test_tiny_data_is_in_the_cpm_text_layout(tiny):
    assert datasets.check("cpm_text", tiny) == []
    lines = (tiny / "valid.txt").read_text(encoding="utf-8").splitlines()
    assert len(lines) > 150
    assert all(line.startswith("对话上文:") and " 回复:" in line for line in lines)
    vocab = json.loads((tiny / "bpe_tiny" / "vocab.json").read_text(encoding="utf-8"))
    assert [p for p, i in sorted(vocab.items(), key=lambda kv: kv[1])][:8] == list(
        cpm_text.SPECIAL_PIECES)


def test_checker_names_each_problem(tiny, tmp_path):
    bad = tmp_path / "bad"
    (bad / "bpe").mkdir(parents=True)
    (bad / "train.txt").write_bytes(b"\xff\xfe broken")
    (bad / "bpe" / "vocab.json").write_text('{"<pad>": 5}', encoding="utf-8")
    (bad / "bpe" / "chinese_vocab.model").write_bytes(b"")
    assert datasets.check("cpm_text", bad) == [
        "train.txt: not UTF-8 (byte 0)", "valid.txt: missing file",
        "bpe/chinese_vocab.model: empty", "bpe/vocab.json: no <eod> piece"]
    (bad / "bpe" / "vocab.json").unlink()
    assert "no tokenizer folder" in datasets.check("cpm_text", bad)[-1]


def test_tokenizer_reads_cpms_files_and_encodes_as_upstream(tiny):
    cpm_data = cpm_module("cpm_data")
    pieces, normalizer = cpm_data.read_sentencepiece_model(tiny / "bpe_tiny" /
                                                           "chinese_vocab.model")
    assert normalizer == "identity"
    assert [kind for _, _, kind in pieces[:8]] == [2, 3, 3, 4, 4, 4, 4, 4]
    tokenizer = cpm_data.CPMTokenizer(tiny / "bpe_tiny", "none")
    line = (tiny / "valid.txt").read_text(encoding="utf-8").splitlines(keepends=True)[0]
    ids = tokenizer.encode(line)
    assert ids[-1] == tokenizer.encoder["\u2583"]           # the kept newline, as upstream
    assert tokenizer.encoder["<unk>"] not in ids
    text = "".join(pieces[i][0] for i in ids)
    assert text == "\u2581" + line.translate(cpm_data.WHITESPACE)
    with pytest.raises(ValueError, match="word_segmentation"):
        cpm_data.CPMTokenizer(tiny / "bpe_tiny", "words")


def test_sentencepiece_writer_and_reader_agree(tmp_path):
    cpm_data = cpm_module("cpm_data")
    pieces = [("<unk>", 0.0, 2), ("▁对话", -1.5, 1), ("é" * 40, -12.25, 1)]
    path = tmp_path / "m.model"
    path.write_bytes(cpm_text.sentencepiece_model_bytes(pieces))
    assert cpm_data.read_sentencepiece_model(path) == (pieces, "identity")
    path.write_bytes(b"\x0a\x05ab")
    with pytest.raises(ValueError, match="m.model: not a SentencePiece model"):
        cpm_data.read_sentencepiece_model(path)


def test_documents_are_cut_and_collated_as_upstream():
    cpm_data = cpm_module("cpm_data")
    # GenDataset.process: a new sample every seq_length + 1 tokens, the last one padded.
    assert cpm_data.split_document([1, 2, 3, 4, 5, 7], 2, 0) == [[1, 2, 3], [4, 5, 7]]
    assert cpm_data.split_document([1, 2, 3, 4, 7], 2, 0) == [[1, 2, 3], [4, 7, 0]]
    assert cpm_data.split_document([1, 7], 3, 0) == [[1, 7, 0, 0]]
    dataset = cpm_data.CPMDataset.__new__(cpm_data.CPMDataset)
    dataset.pad_id = 0
    input_ids, labels, loss_mask = dataset.collate([[1, 2, 3], [4, 7, 0]])
    assert input_ids.tolist() == [[1, 2], [4, 7]]
    assert labels.tolist() == [[2, 3], [7, 0]]
    assert loss_mask.tolist() == [[1.0, 1.0], [1.0, 0.0]]


def test_vocab_size_below_the_tokenizers_is_refused(tiny):
    cpm_data = cpm_module("cpm_data")
    config = {**cpm_config("cpu"), "vocab_size": 100}
    with pytest.raises(ValueError, match="config vocab_size: 100"):
        cpm_data.load_datasets(config, tiny)


# -- the maths -------------------------------------------------------------------------------

def upstream_embedding_average(preds, labels, embeddings, loss_mask):
    """train/metrics.py average_corpus_level, transcribed: per sample, the summed embeddings of
    the unmasked predictions and references, skipped when the reference sum is ~0, 0 when the
    prediction sum is, else their cosine; the mean over the samples kept."""
    scores = []
    for hyp, ref, mask in zip(preds, labels, loss_mask):
        x = sum((embeddings[t] for t in hyp[mask != 0]), np.zeros(embeddings.shape[1]))
        y = sum((embeddings[t] for t in ref[mask != 0]), np.zeros(embeddings.shape[1]))
        if np.linalg.norm(y) < 1e-11:
            continue
        if np.linalg.norm(x) < 1e-11:
            scores.append(0)
            continue
        x, y = x / np.linalg.norm(x), y / np.linalg.norm(y)
        scores.append(np.dot(x, y) / np.linalg.norm(x) / np.linalg.norm(y))
    return float(np.mean(scores))


def test_embedding_average_is_upstreams():
    generator = torch.Generator().manual_seed(1)
    embeddings = torch.randn(50, 8, generator=generator)
    embeddings[0] = 0.0                                       # a zero embedding
    preds = torch.randint(0, 50, (6, 10), generator=generator)
    labels = torch.randint(1, 50, (6, 10), generator=generator)
    loss_mask = (torch.rand(6, 10, generator=generator) > 0.3).float()
    loss_mask[1] = 0.0                                        # no reference: skipped
    preds[2] = 0                                              # zero prediction sum: scores 0
    scores, counted = case_model("cpm").embedding_average_scores(preds, labels, loss_mask,
                                                                 embeddings)
    assert counted.tolist() == [True, False, True, True, True, True]
    assert scores[2] == 0.0
    expected = upstream_embedding_average(preds.numpy(), labels.numpy(),
                                          embeddings.double().numpy(), loss_mask.numpy())
    assert float(scores.sum() / counted.sum()) == pytest.approx(expected, abs=1e-6)


def test_cpu_loss_target_clears_the_untrained_model_and_the_unigram(tiny):
    """The cpu profile's baselines on the tiny data, from the case's code: the model as its
    checkpoint builds it and the case's input-blind predictor (the training labels' unigram,
    against a count of the tokenised samples; always the most frequent training token for the
    embedding average) lie above the loss target by at least 3 x the profile's spread, which is
    the loss's; the model as built copies its input, which the embedding average scores above
    its own target: the loss must be the target that tells learning."""
    config = cpm_config("cpu")
    case = cpm_module("training").cpm_case(config, tiny)
    assert [t.metric for t in case.also] == ["loss"] and not case.also[0].higher_is_better
    model = case.build_model().eval()
    batch = case.val_set.collate(case.val_set.samples)
    with torch.no_grad():
        untrained = case.eval_metric(case.eval_sums(model, batch))
        blind = case.input_blind(model)
    labels = [np.array(s[1:]) for s in case.train_set.samples]
    counts = np.bincount(np.concatenate(labels), minlength=config["vocab_size"]).astype(float)
    counts[case.train_set.pad_id] = 0.0
    reference = np.concatenate([np.array(s[1:]) for s in case.val_set.samples])
    reference = reference[reference != case.val_set.pad_id]
    probability = (counts + 1) / (counts.sum() + config["vocab_size"])
    assert blind["loss"] == pytest.approx(float(-np.log(probability[reference]).mean()))
    baselines = profile_of(ROOT, load_case(ROOT, "cpm", "pytorch"), "cpu")[0]["baselines"]
    assert baselines["target"] == "final_loss"
    print(f"untrained {untrained}, blind {blind}, targets {config['target_loss']}, "
          f"{config['target_embedding_average']}, spread {baselines['spread']}")
    assert min(untrained["loss"], blind["loss"]) - 3 * baselines["spread"] >= config["target_loss"]
    assert untrained["embedding_average"] > config["target_embedding_average"] > blind[
        "embedding_average"]


def test_learning_rate_schedule_is_upstreams_annealing():
    factor = cpm_module("training").annealing_factor
    # config_A100x1x8: 4000 updates, warmup 0.2 -> 800; the first update runs at lr 0.
    assert factor(0, 800.0, 4000, "linear") == 0.0
    assert factor(400, 800.0, 4000, "linear") == 0.5
    assert factor(800, 800.0, 4000, "linear") == 1.0
    assert factor(2400, 800.0, 4000, "linear") == pytest.approx(0.6)
    assert factor(4000, 800.0, 4000, "linear") == pytest.approx(0.2)  # upstream never reaches 0
    assert factor(10, 0.0, 100, "cosine") == pytest.approx((math.cos(math.pi / 10) + 1) / 2)
    with pytest.raises(ValueError, match="lr_decay_style"):
        factor(0, 0.0, 10, "step")


def test_flops_formula_matches_torchs_flop_counter():
    from torch.utils.flop_counter import FlopCounterMode

    spec = yaml.safe_load((CASE_DIR / "case.yml").read_text(encoding="utf-8"))
    formula = spec["mfu"]["flops_per_unit"]["formula"]
    config = {"num_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 300,
              "max_position_embeddings": 64, "hidden_dropout": 0.0, "attention_dropout": 0.0,
              "seq_length": 48}
    net = case_model("cpm").build_model(config)
    net.set_attn_implementation("eager")  # the counter has no formula for SDPA's CPU kernel
    ids = torch.randint(0, 300, (2, 48))
    with FlopCounterMode(display=False) as counter:
        net(input_ids=ids).logits.float().sum().backward()
    assert counter.get_total_flops() / 2 == evaluate_formula(formula, config)
    standard = evaluate_formula(formula, cpm_config())
    assert standard == pytest.approx(4.111e11, rel=1e-3)
