"""The bert_large inference case (FlagPerf bertLarge) on its tiny data: the ``bert_eval_text``
format (generator, stdlib checker against the safetensors library, named problems of broken
layouts), upstream's masking reproduced, the masked-token accuracy, the six functions on the
cpu configuration as the controller merges it, the ONNX export (onnx's checker, onnxruntime's
logits against PyTorch's). Its whole cpu round runs once, in the local run
(tests/test_local_run.py, check_inference_round)."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import math
import random
import shutil
import struct
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
import yaml
from safetensors import safe_open
from transformers import BertTokenizer

from driver.torch import inference
from flagperf_ansible import datasets
from flagperf_ansible.config.cases import effective_config, load_case
from flagperf_ansible.config.casespec import parse_case_spec
from flagperf_ansible.datasets import bert_eval_text
from flagperf_host.checks.bert_eval_text import safetensors_index

ROOT = Path(__file__).resolve().parents[1]
CASE_DIR = ROOT / "benchmarks" / "inference" / "bert_large" / "pytorch"
CPU_VENDOR = ROOT / "vendors" / "cpu"
CPU_PROFILE = yaml.safe_load((CASE_DIR / "config" / "cpu.yaml").read_text())
#: eval.txt's 8705 tokens with [CLS] and [SEP] (8707) in chunks of the cpu profile's 128.
CHUNKS = 68


def _load_case():
    """The case's ``case.py`` under a name of its own (other cases have a ``case.py`` too)."""
    spec = importlib.util.spec_from_file_location("case_bert_large_inference", CASE_DIR / "case.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


case = _load_case()


def merged_config(hardware: str = "cpu", vendor: str = "cpu") -> dict:
    """The configuration a round runs with: configurations.yaml, parameters.yaml, the profile,
    the vendor's vendor_config, merged by the controller (``cases.effective_config``)."""
    spec = parse_case_spec({"model": "bert_large", "framework": "pytorch", "suite": "inference",
                            "hardware": hardware, "nnodes": 1, "nproc_per_node": 1}, "test", "case")
    return dict(effective_config(ROOT, load_case(ROOT, "bert_large", "pytorch", "inference"),
                                 spec, vendor).config)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("bert_eval_text")
    datasets.prepare("bert_eval_text", root)
    return root


@pytest.fixture(scope="module")
def config() -> dict:
    return {**merged_config(), "device": "cpu"}  # the CPU here even where a GPU is


@pytest.fixture(scope="module")
def model(config, tiny):
    return case.create_model(config, tiny)


@pytest.fixture(scope="module")
def validation(model, config, tiny):
    return case.model_forward(model, case.build_dataloader(config, tiny), case.evaluator, config)


# --- the data format -------------------------------------------------------------------------

def test_tiny_data_passes_its_checker_and_is_the_pinned_stand_in(tiny):
    assert datasets.check("bert_eval_text", tiny) == []
    weights = tiny / "cpu_weights"
    note = json.loads((weights / "config.json").read_text())["flagperf_note"]
    assert "stand-in, NOT bert-large" in note and note in (weights / "README.md").read_text()
    pinned = CPU_PROFILE["checkpoint"]
    assert pinned["path"] == "cpu_weights/model.safetensors"
    assert hashlib.sha256((tiny / pinned["path"]).read_bytes()).hexdigest() == pinned["sha256"]
    tokenizer = BertTokenizer.from_pretrained(weights)  # offline, from vocab.txt
    assert (tokenizer.pad_token_id, tokenizer.unk_token_id, tokenizer.cls_token_id,
            tokenizer.sep_token_id, tokenizer.mask_token_id) == (0, 100, 101, 102, 103)
    assert len(tokenizer) == bert_eval_text.TINY_MODEL["vocab_size"]
    text = (tiny / "eval.txt").read_text()
    assert text.startswith("GNU GENERAL PUBLIC LICENSE") and "\n\n" in text  # two documents


def test_safetensors_header_reader_agrees_with_safetensors(tiny):
    path = tiny / "cpu_weights" / "model.safetensors"
    found = safetensors_index(str(path))
    with safe_open(str(path), framework="pt") as handle:
        expected = {key: list(handle.get_slice(key).get_shape()) for key in handle.keys()}
    assert {key: shape for key, (_, shape) in found.items()} == expected
    assert found["bert.embeddings.word_embeddings.weight"] == ("F32", [4096, 64])


def _edit_json(path: Path, **changes) -> None:
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


@pytest.mark.parametrize("breakage, problems", [
    (lambda d: (d / "eval.txt").unlink(), ["eval.txt: missing file"]),
    (lambda d: (d / "eval.txt").write_bytes(b"caf\xe9 au lait\n"),
     ["eval.txt: not UTF-8 (byte 3)"]),
    (lambda d: shutil.rmtree(d / "cpu_weights"),
     ["no model folder (a subfolder with a transformers BERT's config.json, weights and vocab.txt,"
      " as FlagPerf's weights/)"]),
    (lambda d: (d / "cpu_weights" / "vocab.txt").unlink(), ["cpu_weights/vocab.txt: missing file"]),
    (lambda d: (d / "cpu_weights" / "model.safetensors").unlink(),
     ["cpu_weights/: no weights (model.safetensors, pytorch_model.bin, "
      "model.safetensors.index.json, pytorch_model.bin.index.json)"]),
    (lambda d: _edit_json(d / "cpu_weights" / "config.json", model_type="gpt2"),
     ["cpu_weights/config.json: model_type 'gpt2', expected bert"]),
    (lambda d: _edit_json(d / "cpu_weights" / "config.json", vocab_size=30522),
     ["cpu_weights/model.safetensors: word embeddings [4096, 64], config.json says "
      "[vocab_size 30522, hidden_size 64]"]),
    (lambda d: (d / "cpu_weights" / "vocab.txt").write_text("[PAD]\n[UNK]\nthe\n"),
     ["cpu_weights/vocab.txt: no [CLS], [SEP], [MASK] token"]),
])
def test_checker_names_what_is_broken(tiny, tmp_path, breakage, problems):
    broken = Path(shutil.copytree(tiny, tmp_path / "data"))
    breakage(broken)
    assert datasets.check("bert_eval_text", broken) == problems


def test_checker_catches_truncated_weights_and_missing_shards(tiny, tmp_path):
    broken = Path(shutil.copytree(tiny, tmp_path / "data"))
    weights = broken / "cpu_weights" / "model.safetensors"
    whole = weights.read_bytes()
    data = len(whole) - 8 - struct.unpack("<Q", whole[:8])[0]  # after the header
    weights.write_bytes(whole[:-4])
    assert datasets.check("bert_eval_text", broken) == [
        f"cpu_weights/model.safetensors: {data - 4} bytes of data, the header says {data}"]
    weights.unlink()
    (broken / "cpu_weights" / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {"a": "model-00001-of-00002.safetensors",
                        "b": "model-00002-of-00002.safetensors"}}))
    assert datasets.check("bert_eval_text", broken) == [
        "cpu_weights/: shards missing: model-00001-of-00002.safetensors, "
        "model-00002-of-00002.safetensors"]


# --- data, metric ------------------------------------------------------------------------------

def test_masking_is_upstreams(config, tiny):
    """FlagPerf's dataloader.py, step by step: random.seed(random_seed), one random.random()
    per token of eval.txt, [MASK] below mask_ratio, [CLS] ... [SEP], chunks of seq_length
    with the remainder dropped; its evaluator counts the positions holding [MASK] (id 103)."""
    tokenizer = BertTokenizer.from_pretrained(tiny / config["weight_dir"])
    tokens = tokenizer.tokenize((tiny / config["eval_file"]).read_text())
    label_ids = [101] + tokenizer.convert_tokens_to_ids(tokens) + [102]
    draw = random.Random(config["random_seed"])
    masked = ["[MASK]" if draw.random() < config["mask_ratio"] else t for t in tokens]
    input_ids = [101] + tokenizer.convert_tokens_to_ids(masked) + [102]
    length = config["seq_length"]
    chunks = len(input_ids) // length
    upstream_x = torch.tensor(input_ids[:chunks * length]).view(chunks, length)
    upstream_y = torch.tensor(label_ids[:chunks * length]).view(chunks, length)

    got_x, got_y = case.masked_chunks(config, tiny)
    assert got_x.dtype == torch.int32 and got_y.dtype == torch.int64
    assert torch.equal(got_x.long(), upstream_x)
    is_masked = upstream_x == 103
    assert torch.equal(got_y, torch.where(is_masked, upstream_y, case.IGNORE))
    assert chunks == CHUNKS and len(tokens) == 8705
    assert 0.08 < is_masked.float().mean().item() < 0.12   # mask_ratio 0.10
    assert not (upstream_y[is_masked] == 103).any()        # a masked position's label is its token


def test_dataloader_batches_every_chunk(config, tiny):
    loader = case.build_dataloader(config, tiny)
    batches = list(loader)
    assert len(batches) == math.ceil(CHUNKS / config["batch_size"]) == 9
    (input_ids,), labels = batches[0]
    assert input_ids.shape == labels.shape == (8, 128) and input_ids.dtype == torch.int32
    assert input_ids[0, 0] == 101  # [CLS] opens the text
    assert batches[-1][1].shape == (CHUNKS - 8 * 8, 128)  # drop_last false: the short batch counts


def test_evaluator_counts_masked_positions_only():
    labels = torch.full((2, 4), case.IGNORE)
    labels[0, 1], labels[1, 0], labels[1, 3] = 7, 5, 9
    predicted = torch.tensor([[7, 7, 7, 7], [5, 5, 5, 9]])  # right at 3 of the 3 masked
    assert case.evaluator(predicted, labels) == (3, 3)
    predicted[1, 3] = 8
    assert case.evaluator(predicted, labels) == (2, 3)
    logits = torch.nn.functional.one_hot(predicted, 12).float()
    assert case.evaluator(logits, labels) == (2, 3)             # logits: their argmax
    flat = [logits.reshape(-1)]                                  # an engine's flat binding
    assert torch.equal(case.predicted_ids(flat, labels), predicted)


# --- the six functions ---------------------------------------------------------------------------

def test_the_cpu_configuration_is_the_merged_one(config):
    assert config["compiler"] == "onnxruntime" and config["fp16"] is False   # the vendor's
    assert (config["seq_length"], config["batch_size"], config["repeat"]) == (128, 8, 2)
    assert config["weight_dir"] == "cpu_weights" and config["target_acc_gap"] == 0.05


def test_model_is_the_stand_in_returning_logits(model):
    assert isinstance(model, case.MaskedLMLogits) and not model.training
    assert sum(p.numel() for p in model.parameters()) == 378_944  # cpu.yaml's flops count
    logits = model(torch.full((3, 128), 103, dtype=torch.int32))
    assert isinstance(logits, torch.Tensor) and logits.shape == (3, 128, 4096)


def test_validation_counts_chunks_times_repeat(validation, config, tiny):
    _, labels = case.masked_chunks(config, tiny)
    assert isinstance(validation, inference.PathResult)
    assert validation.items == CHUNKS * config["repeat"]
    assert validation.batches == 9 * config["repeat"] == len(validation.batch_s)
    assert validation.counted == int((labels != case.IGNORE).sum()) * config["repeat"]
    assert 0 <= validation.correct < validation.counted  # random weights: near 0


def test_onnx_export_and_onnxruntime_agree_with_pytorch(model, validation, config, tiny,
                                                        tmp_path):
    path = case.export_model(model, config, tmp_path / "onnx" / "bert_large.onnx")
    assert path == tmp_path / "onnx" / "bert_large.onnx"
    exported = onnx.load(str(path))
    onnx.checker.check_model(exported, full_check=True)
    (graph_input,), (graph_output,) = exported.graph.input, exported.graph.output
    assert graph_input.name == "input_ids" and graph_output.name == "logits"
    assert graph_input.type.tensor_type.elem_type == onnx.TensorProto.INT32
    dims = [d.dim_param or d.dim_value for d in graph_input.type.tensor_type.shape.dim]
    assert dims == ["batch", 128]

    engine = inference.load_engine_class("onnxruntime", CPU_VENDOR)(config, path, model)
    input_ids, _ = case.masked_chunks(config, tiny)
    for batch in (input_ids[:3], input_ids[:8]):  # the batch axis is dynamic
        outputs, foo_time = engine((batch,))
        with torch.no_grad():
            expected = model(batch)
        assert foo_time == 0.0
        np.testing.assert_allclose(outputs[0].numpy(), expected.numpy(), atol=1e-4, rtol=1e-4)

    result = case.engine_forward(engine, case.build_dataloader(config, tiny), case.evaluator,
                                 config)
    assert (result.items, result.counted) == (validation.items, validation.counted)
    assert abs(result.accuracy - validation.accuracy) <= config["target_acc_gap"]
