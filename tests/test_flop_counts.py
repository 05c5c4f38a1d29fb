"""Declared FLOP counts against counts of the models themselves: torch's own counter
(``torch.utils.flop_counter.FlopCounterMode``, 2 FLOPs a multiply-add) over one forward pass of
the model each case builds, standard configuration and cpu profile.

FlagPerf's inference configurations give ``flops`` per item as the image models' multiply-adds
(resnet50 4.12e9, vit_l_16 6.16e10, swin_transformer 1.55e10) and bert_large's as 2 x tokens x
parameters; the MFU of those cases reads them, so each must be the model's own to a few per
cent."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from test_inference_image_cases import case_folder, cpu_config, load_case
from flagperf_ansible.config import inference_config

ROOT = Path(__file__).resolve().parents[1]
#: Declared and counted may differ by this much (FlagPerf rounds to three digits).
REL = 0.02


def multiply_adds(model: torch.nn.Module, *shape: int) -> int:
    """Multiply-adds of one forward pass of ``model`` (on the meta device) on an input of
    ``shape`` (torch's count / 2), attention through its plain matrix products (the counter
    does not count the CPU's fused attention kernel)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), \
            FlopCounterMode(display=False) as counter:
        model(torch.zeros(*shape, device="meta"))
    return counter.get_total_flops() // 2


def class_folders(root: Path, classes: int) -> Path:
    """A data folder whose ``val/`` holds ``classes`` class folders (what the image cases read
    the number of classes from)."""
    for index in range(classes):
        (root / "val" / f"n{index:08d}").mkdir(parents=True, exist_ok=True)
    return root


@pytest.mark.parametrize("name", ["resnet50", "vit_l_16", "swin_transformer"])
def test_an_image_cases_flops_are_its_models_multiply_adds(name, tmp_path, monkeypatch):
    from driver.torch import inference

    case = load_case(name)
    standard = dict(inference_config.load_standard(case_folder(name), ROOT).params)
    # The case's own model, built on the meta device: shapes without weights.
    monkeypatch.setattr(inference, "device", lambda config: torch.device("meta"))
    for config, classes in ((standard, 1000), (cpu_config(name), 10)):
        config = {**config, "fp16": False, "weight_dir": None}
        data = class_folders(tmp_path / f"{classes}", classes)
        with torch.device("meta"):
            model = case.create_model(config, data)
        size = int(config["image_size"])
        counted = multiply_adds(model, 1, 3, size, size)
        assert config["flops"] == pytest.approx(counted, rel=REL), (size, counted)


def test_bert_larges_flops_are_two_per_parameter_and_token():
    from transformers import BertConfig, BertForMaskedLM

    standard = inference_config.load_standard(case_folder("bert_large"), ROOT).params
    # bert-large-uncased's dimensions (its config.json), built without its weights.
    with torch.device("meta"):
        bert = BertForMaskedLM(BertConfig(hidden_size=1024, num_hidden_layers=24,
                                          num_attention_heads=16, intermediate_size=4096))
    parameters = sum(p.numel() for p in bert.parameters())  # the tied decoder counted once
    assert standard["flops"] == pytest.approx(2 * standard["seq_length"] * parameters, rel=REL)


def resnet50_v1_multiply_adds(image_size: int, classes: int) -> int:
    """Multiply-adds of ResNet-50 v1 (He et al. 2015: the stride of a stage's first block in
    its first 1x1 convolution, as Keras' ``ResNet50``), counted on torchvision's ResNet-50 (v1.5:
    the stride in the 3x3) with each stride moved back, for ``classes`` outputs."""
    import torchvision

    with torch.device("meta"):
        model = torchvision.models.resnet50(num_classes=classes).eval()
    for stage in (model.layer2, model.layer3, model.layer4):
        stage[0].conv1.stride, stage[0].conv2.stride = (2, 2), (1, 1)
    return multiply_adds(model, 1, 3, image_size, image_size)


def test_moving_the_stride_to_the_1x1_convolution_is_resnet50_v1():
    # torchvision's own v1.5 count (ResNet50_Weights: 4.089 GFLOPS, multiply-adds) and the
    # v1 ResNet-50's 3.86e9 of its paper's Table 1 (there: "3.8 x 10^9 FLOPs").
    import torchvision

    with torch.device("meta"):
        v15 = multiply_adds(torchvision.models.resnet50(), 1, 3, 224, 224)
    assert v15 == pytest.approx(4.089e9, rel=1e-3)
    assert resnet50_v1_multiply_adds(224, 1000) == pytest.approx(3.86e9, rel=1e-3)
