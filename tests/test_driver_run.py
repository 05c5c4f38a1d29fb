"""The one entry of the cases that name a driver (benchmarks/driver/run.py) on its own: what it
reads of case.yml, how it builds the model case.yml names, and its errors. Every case's own run
through it: tests/test_local_run.py; through each launcher: tests/test_launchers.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from driver.run import Case, ModelBuilder, import_object

ROOT = Path(__file__).resolve().parents[1]


def test_import_object_takes_a_module_or_a_name_in_one():
    assert import_object("driver.torch.classification").__name__ == \
        "driver.torch.classification"
    assert import_object("torchvision.models.resnet18").__name__ == "resnet18"
    with pytest.raises(ImportError, match="torchvision.models.resnet19: module "
                                          "torchvision.models has no 'resnet19'"):
        import_object("torchvision.models.resnet19")
    with pytest.raises(ModuleNotFoundError):
        import_object("no_such_package.module")


def test_arguments_take_config_values_and_leave_missing_or_null_keys_to_the_builder():
    builder = ModelBuilder("builtins.dict", {"size": "width", "pair": ["a", "b"],
                                             "unset": "nothing", "null": "none"})
    assert builder.keywords({"width": 8, "a": 1, "b": 2, "none": None}) == {
        "size": 8, "pair": [1, 2]}
    # a pair with a missing key is left out whole
    assert builder.keywords({"width": 8, "a": 1}) == {"size": 8}
    assert builder.build({"width": 8, "a": 1, "b": 2}, Path("/d"), extra=3) == {
        "size": 8, "pair": [1, 2], "extra": 3}


def test_a_cases_own_builder_takes_the_configuration_the_data_dir_and_the_drivers(
        tmp_path, monkeypatch):
    (tmp_path / "own_model.py").write_text(
        "def build_model(config, data_dir=None, **extra):\n"
        "    return {'config': config, 'data_dir': data_dir, 'extra': extra}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    built = ModelBuilder("own_model.build_model").build({"k": 1}, Path("/d"), num_classes=10)
    assert built == {"config": {"k": 1}, "data_dir": Path("/d"), "extra": {"num_classes": 10}}


def test_a_case_folder_reads_as_the_driver_sees_it():
    case = Case.from_folder(ROOT / "benchmarks" / "swin_transformer" / "pytorch")
    assert (case.name, case.framework, case.package, case.driver) == (
        "swin_transformer", "pytorch", "swin_transformer.pytorch",
        "driver.torch.classification")
    assert (case.metric, case.config_key) == ("acc1", "target_acc1")
    # the list form of arguments: patch_size [4, 4], window_size [7, 7]
    with torch.device("meta"):
        model = case.build_model({"patch_size": 4, "embed_dim": 96, "depths": [2, 2, 6, 2],
                                  "num_heads": [3, 6, 12, 24], "window_size": 7,
                                  "mlp_ratio": 4.0, "drop_path_rate": 0.2}, num_classes=1000)
    assert sum(p.numel() for p in model.parameters()) == 28_288_354  # Swin_T_Weights
    inference = Case.from_folder(ROOT / "benchmarks" / "inference" / "resnet50" / "pytorch")
    assert (inference.package, inference.name, inference.model) == (
        "inference.resnet50.pytorch", "resnet50", None)
    with pytest.raises(ValueError, match="no model"):
        inference.build_model({})


def test_a_folder_that_is_no_driver_case_is_one_line(tmp_path):
    with pytest.raises(SystemExit, match="not a case folder under a benchmarks/"):
        Case.from_folder(tmp_path)
    # the diagnostic case runs its entry file: it names no driver
    with pytest.raises(SystemExit, match="sleep/pytorch/case.yml: no driver"):
        Case.from_folder(ROOT / "benchmarks" / "sleep" / "pytorch")
