"""The wav2vec2 case (benchmarks/wav2vec2/pytorch): the BASE model's size, the configuration's
mapping onto transformers, fairseq's batching, accuracy and schedule, and the tiny
LibriSpeech's file lists."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from case_model import case_config, case_model, case_module
from flagperf_ansible import datasets

ROOT = Path(__file__).resolve().parents[1]
CASE = ROOT / "benchmarks" / "wav2vec2" / "pytorch"


@pytest.fixture(scope="module")
def pretraining():
    """The case's ``pretraining.py``."""
    return case_module("wav2vec2", "training")


def config(hardware: str = "standard") -> dict:
    return case_config("wav2vec2", hardware)


@pytest.fixture(scope="module")
def librispeech(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("librispeech")
    datasets.prepare("librispeech", root)
    return root


def test_standard_model_is_wav2vec2_base():
    # fairseq wav2vec_small / facebook/wav2vec2-base: 95.0 M (Baevski et al. 2020, "BASE ... 95m
    # parameters"); transformers' Wav2Vec2ForPreTraining of that configuration has 95,044,608.
    model_py = case_model("wav2vec2")
    with torch.device("meta"):
        model = model_py.build_model(config())
    assert sum(p.numel() for p in model.parameters()) == 95_044_608
    hf = model.config
    assert (tuple(hf.conv_dim), tuple(hf.conv_kernel), tuple(hf.conv_stride)) == (
        (512,) * 7, (10, 3, 3, 3, 3, 2, 2), (5, 2, 2, 2, 2, 2, 2))
    assert (hf.codevector_dim, hf.proj_codevector_dim, hf.num_codevectors_per_group) == (
        256, 256, 320)
    assert model_py.feature_frames(hf, 16000) == 49  # 20 ms frames, 25 ms receptive field


def test_conv_layers_reads_only_literals():
    model_py = case_model("wav2vec2")
    assert model_py.conv_layers("[(8,10,5)]+[(8,3,2)]*2") == [(8, 10, 5), (8, 3, 2), (8, 3, 2)]
    with pytest.raises(ValueError, match="conv_feature_layers"):
        model_py.conv_layers("[(8,10,5)] + __import__('os').getcwd()")


def test_feature_grad_mult_scales_the_encoder_gradient_only():
    model_py = case_model("wav2vec2")
    cfg = config("cpu")
    grads = {}
    for mult in (1.0, 0.1):
        torch.manual_seed(0)
        model = model_py.build_model({**cfg, "feature_grad_mult": mult}).eval()
        out = model(torch.randn(1, 4000))
        (out.projected_states.sum() + model.features_pen).backward()
        grads[mult] = model.wav2vec2.feature_extractor.conv_layers[0].conv.weight.grad.clone()
        assert float(model.features_pen.detach()) > 0
    # The penalty's own gradient is not scaled in fairseq either; the rest of it is x 0.1.
    assert not torch.allclose(grads[1.0], grads[0.1])


def test_batch_by_size_follows_fairseq(pretraining):
    sizes = np.array([100, 90, 80, 70, 60, 50])
    assert pretraining.batch_by_size(sizes, np.arange(6), 200) == [[0, 1], [2, 3], [4, 5]]
    # a batch of 5 items at multiple 2 keeps 4, the fifth starts the next batch
    assert pretraining.batch_by_size(np.full(7, 10), np.arange(7), 50, 2) == [
        [0, 1, 2, 3], [4, 5, 6]]
    with pytest.raises(ValueError, match="max_tokens"):
        pretraining.batch_by_size(np.array([300]), np.arange(1), 200)


def test_accuracy_counts_as_fairseq(pretraining):
    logits = torch.tensor([[3.0, 1.0, 2.0],    # target highest: correct
                           [1.0, 3.0, 2.0],    # a distractor highest
                           [2.0, 2.0, 2.0]])   # all equal: argmax and argmin 0, not correct
    assert pretraining.accuracy_counts(logits) == (1, 3)
    assert pretraining.accuracy_counts(torch.empty(0, 3)) == (0, 0)


def test_schedules(pretraining):
    factor = pretraining.poly_lr_factor
    assert [factor(s, 32000, 400000) for s in (0, 16000, 32000, 216000, 400000)] == [
        0.0, 0.5, 1.0, 0.5, 0.0]
    assert pretraining.gumbel_temperature(0, [2.0, 0.5, 0.999995]) == 2.0
    assert pretraining.gumbel_temperature(10**6, [2.0, 0.5, 0.999995]) == 0.5


def test_tiny_librispeech_has_its_file_lists(librispeech, pretraining):
    root, entries = pretraining.read_manifest(librispeech / "train-clean-100.tsv")
    assert root.resolve() == (librispeech / "train-clean-100").resolve() and len(entries) == 6
    assert (librispeech / "train-clean-100.tsv").read_text().splitlines()[0] == "train-clean-100"
    import soundfile

    for path, samples in entries:
        assert soundfile.info(str(root / path)).frames == samples


def test_manifest_roots(librispeech, pretraining, tmp_path):
    # generate_filelists.sh writes an absolute root; where it is not a folder here (the data
    # mounted elsewhere), the manifest's folder stands for it.
    lines = (librispeech / "test-clean.tsv").read_text().splitlines()
    manifest = tmp_path / "test-clean.tsv"
    for first, root in ((str(librispeech / "test-clean"), librispeech / "test-clean"),
                        ("/no/such/LibriSpeech/test-clean", tmp_path)):
        manifest.write_text("\n".join([first] + lines[1:]) + "\n")
        assert pretraining.read_manifest(manifest) == (
            root, [(line.split("\t")[0], int(line.split("\t")[1])) for line in lines[1:]])


def test_checker_catches_broken_file_lists(librispeech, tmp_path):
    root = tmp_path / "copy"
    shutil.copytree(librispeech, root)
    assert datasets.check("librispeech", root) == []
    (root / "dev-clean.tsv").write_text(f"{root / 'dev-clean'}\n2001/201/x.flac\t10\nno tab\n")
    (root / "test-clean.tsv").write_text("\n")
    assert datasets.check("librispeech", root) == [
        "dev-clean.tsv: 1 line(s) are not <path>\\t<samples>: line 3",
        "test-clean.tsv: line 1 is not the audio root folder"]


def test_missing_file_list_is_one_line(librispeech, pretraining, tmp_path):
    with pytest.raises(pretraining.ManifestError, match=r"dev-other\.tsv: .*generate_filelists"):
        pretraining.read_manifest(tmp_path / "dev-other.tsv")


def test_cpu_profile_batches_and_masks(librispeech, pretraining):
    cfg = config("cpu")
    case = pretraining.wav2vec2_case(cfg, librispeech)
    assert len(case.train_set) == 3 and len(case.val_set) == 3
    batch = case.eval_collate_fn([case.val_set[0]])
    again = case.eval_collate_fn([case.val_set[0]])
    assert torch.equal(batch["mask"][0], again["mask"][0])  # validation draws are fixed
    assert torch.equal(batch["source"][0], again["source"][0])
    mask, negatives = batch["mask"][0], batch["negatives"][0]
    assert negatives.shape == (*mask.shape, cfg["num_negatives"])
    assert pretraining.masked_frames(batch) == int(mask.sum()) > 0
    torch.manual_seed(0)
    model = case.build_model().eval()
    with torch.no_grad():
        sums = case.eval_sums(model, batch)
        loss = case.train_loss(model.train(), batch)
    assert sums["count"] == int(mask.sum()) and 0 <= sums["correct"] <= sums["count"]
    # an untrained model's InfoNCE loss is about ln(1 + K), the penalties on top
    assert float(loss) > np.log(cfg["num_negatives"] + 1) - 0.5
