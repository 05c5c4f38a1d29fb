"""The inference suite's image cases (benchmarks/inference/{resnet50,vit_l_16,swin_transformer}/
pytorch/) on their cpu profile, with the digits data in the ImageNet layout.

Each case's configuration is merged as a cpu round gets it: configurations.yaml and
parameters.yaml, the cpu profile, then the cpu vendor's vendor_config (the controller's own
``inference_config`` functions). Its six functions run directly: the loader's batches, the
model's validation pass, the ONNX export (checked by ``onnx.checker``) and the cpu vendor's
onnxruntime engine against PyTorch on the same images; the standard configuration's weight
loading runs on small stand-ins written here in the same formats. Each case's whole cpu round
runs once, in the local run (tests/test_local_run.py, check_inference_round).
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time
from pathlib import Path
from types import ModuleType

import onnx
import pytest
import torch
import yaml

from driver.torch.inference import PathResult, load_engine_class
from flagperf_ansible.config import inference_config

ROOT = Path(__file__).resolve().parents[1]
CASES = ("resnet50", "vit_l_16", "swin_transformer")
CPU_VENDOR = ROOT / "vendors" / "cpu"
#: The digits' val split: 360 images of 10 classes.
VAL_IMAGES, CLASSES = 360, 10


def case_folder(name: str) -> Path:
    return ROOT / "benchmarks" / "inference" / name / "pytorch"


def cpu_config(name: str) -> dict:
    """The effective configuration of the case's cpu round (see the module docstring)."""
    folder = case_folder(name)
    standard = inference_config.load_standard(folder, ROOT)
    config = dict(standard.params)
    profile = yaml.safe_load((folder / "config" / "cpu.yaml").read_text())["params"]
    assert set(profile) <= set(config), "a profile changes only keys of the two files"
    config.update(profile)
    parameters = [key for key in standard.params if key not in standard.mutable]
    vendor_file = inference_config.vendor_config_path(
        CPU_VENDOR / "inference" / f"{name}-pytorch", "cpu")
    config, record = inference_config.apply_vendor_config(vendor_file, ROOT, "cpu", config,
                                                          parameters)
    assert record["file"] and not record["warnings"]
    return config


def load_case(name: str) -> ModuleType:
    """The case's ``case.py`` under a module name of its own (each case's is ``case``)."""
    module_name = f"inference_image_case_{name}"
    if module_name not in sys.modules:
        spec = importlib.util.spec_from_file_location(module_name, case_folder(name) / "case.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
    return sys.modules[module_name]


@pytest.fixture(scope="module", params=CASES)
def prepared(request, digits_dir) -> tuple[str, ModuleType, dict, torch.nn.Module]:
    """``(name, case module, cpu config, model)``, the model built once per case."""
    torch.set_num_threads(min(2, os.cpu_count() or 1))
    name = request.param
    case, config = load_case(name), cpu_config(name)
    return name, case, config, case.create_model(config, digits_dir)


def test_the_cpu_configuration_is_the_profile_with_the_cpu_vendor_s_engine():
    for name in CASES:
        config = cpu_config(name)
        assert config["compiler"] == "onnxruntime" and config["fp16"] is False
        assert config["weight_dir"] is None and config["image_size"] == 32
        assert isinstance(config["flops"], float) and 0 < config["target_acc_gap"] <= 0.01


def test_the_loader_gives_every_val_image_in_batches_of_inputs_and_labels(prepared, digits_dir):
    name, case, config, _ = prepared
    # 360 = 7 x 50 + 10: the last partial batch is kept.
    loader = case.build_dataloader({**config, "batch_size": 50}, digits_dir)
    batches = list(loader)
    assert [len(labels) for _, labels in batches] == [50] * 7 + [10]
    (images,), labels = batches[0]
    assert images.shape == (50, 3, 32, 32) and images.dtype == torch.float32
    assert labels.dtype == torch.int64
    assert set(torch.cat([lab for _, lab in batches]).tolist()) == set(range(CLASSES))


def test_validation_counts_every_image_repeat_times(prepared, digits_dir):
    name, case, config, model = prepared
    config = {**config, "repeat": 2}
    loader = case.build_dataloader(config, digits_dir)
    result = case.model_forward(model, loader, case.evaluator, config)
    assert isinstance(result, PathResult)
    assert result.items == result.counted == 2 * VAL_IMAGES
    assert result.batches == 2 * len(loader)
    assert 0.0 <= result.accuracy <= 1.0
    assert result.core_s > 0 and result.whole_s >= result.core_s


def test_the_onnx_export_runs_in_onnxruntime_as_in_pytorch(prepared, digits_dir, tmp_path):
    name, case, config, model = prepared
    start = time.perf_counter()
    onnx_path = case.export_model(model, config, tmp_path / f"{name}.onnx")
    exported_s = time.perf_counter() - start
    assert onnx_path == tmp_path / f"{name}.onnx"
    onnx.checker.check_model(str(onnx_path), full_check=True)
    graph = onnx.load(str(onnx_path), load_external_data=False).graph
    [image] = graph.input
    dims = image.type.tensor_type.shape.dim
    assert dims[0].dim_param and [d.dim_value for d in dims[1:]] == [3, 32, 32]
    # The cpu vendor's engine, as the driver loads it; a batch of 60, the export's being 2.
    engine = load_engine_class("onnxruntime", CPU_VENDOR)(config, onnx_path, model)
    (images,), labels = next(iter(case.build_dataloader(config, digits_dir)))
    start = time.perf_counter()
    outputs, foo_time = engine((images,))
    ort_s = time.perf_counter() - start
    with torch.no_grad():
        expected = model(images)
    [logits] = outputs
    assert logits.shape == expected.shape == (60, CLASSES) and foo_time == 0.0
    assert torch.allclose(logits, expected, rtol=1e-4, atol=1e-4), \
        f"max abs diff {(logits - expected).abs().max():.2e}"
    assert case.evaluator(outputs, labels) == case.evaluator(expected, labels)
    print(f"{name}: export {exported_s:.1f} s, onnxruntime batch of 60 {ort_s:.2f} s")


def test_top1_counts_the_argmax_and_reshapes_flat_engine_outputs():
    evaluator = load_case("resnet50").evaluator
    logits = torch.tensor([[0.1, 0.9, 0.0], [0.8, 0.1, 0.1], [0.2, 0.3, 0.5]])
    labels = torch.tensor([1, 2, 2])
    assert evaluator(logits, labels) == (2, 3)
    assert evaluator([logits.flatten().half()], labels) == (2, 3)


# -- the standard configuration's weights, in their formats, on small stand-ins --------------

def data_with(digits_dir: Path, tmp_path: Path) -> Path:
    """A data folder holding the digits' val split (linked) beside the weights to come."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "val").symlink_to(digits_dir / "val")
    return data


@pytest.mark.parametrize("name", ["resnet50", "swin_transformer"])
def test_a_torchvision_state_dict_file_under_the_data_folder_is_loaded(name, digits_dir, tmp_path):
    case, config = load_case(name), cpu_config(name)
    data = data_with(digits_dir, tmp_path)
    saved = case.create_model({**config, "random_seed": 7}, data)
    torch.save(saved.state_dict(), data / "weights.pth")
    loaded = case.create_model({**config, "weight_dir": "weights.pth"}, data)
    images = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(loaded(images), saved(images))
    with pytest.raises(FileNotFoundError, match="missing.pth: no such weights file"):
        case.create_model({**config, "weight_dir": "missing.pth"}, data)
    if name == "swin_transformer":
        with pytest.raises(RuntimeError, match="size mismatch"):
            case.create_model({**config, "weight_dir": "weights.pth", "embed_dim": 16}, data)


def test_a_save_pretrained_vit_folder_is_loaded_and_checked_against_the_parameters(
        digits_dir, tmp_path):
    case, config = load_case("vit_l_16"), cpu_config("vit_l_16")
    data = data_with(digits_dir, tmp_path)
    saved = case.create_model({**config, "random_seed": 7}, data)
    saved.classifier.save_pretrained(data / "vit")
    loaded = case.create_model({**config, "weight_dir": "vit"}, data)
    images = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(loaded(images), saved(images))
    with pytest.raises(ValueError, match="'hidden_size': 64.*'hidden_size': 128"):
        case.create_model({**config, "weight_dir": "vit", "hidden_size": 128}, data)
    with pytest.raises(FileNotFoundError, match="no save_pretrained folder"):
        case.create_model({**config, "weight_dir": "absent"}, data)
