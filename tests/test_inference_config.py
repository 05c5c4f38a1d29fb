"""Seed 004's configuration rules for inference cases (flagperf_ansible.config.inference_config), on a
case written into a scratch folder: configurations.yaml and parameters.yaml share no key and
take no host key; a vendor's file may add a key (a warning), change one (recorded), never set a
host or parameters key nor repeat a value; the four switches never contradict each other. Each
outcome through ``cases.effective_config``, as the plan asks it, and the warning through the
``validate`` command line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from checkout_copy import copy_checkout, write_local_inventory
from flagperf_ansible.config.cases import effective_config, load_case
from flagperf_ansible.config.casespec import parse_case_spec
from flagperf_ansible.config.errors import ConfigError

CONFIGURATIONS = {"batch_size": 256, "flops": "2*512*0.33e9", "fp16": True,
                  "compiler": "tensorrt", "num_workers": 8, "log_freq": 30, "repeat": 5,
                  "no_validation": False, "exist_onnx_path": None, "exist_compiler_path": None}
PARAMETERS = {"image_size": 224, "target_acc_gap": 0.01}
CASE = {"suite": "inference", "description": "a scratch inference case", "launcher": "python",
        "entry": "run.py", "timeout": 60,
        "metrics": {"final_acc_gap": {"direction": "lower"}},
        "target": {"metric": "final_acc_gap", "comparison": "<=", "config_key": "target_acc_gap"},
        "throughput": {"figure": "p_inference_core", "unit": "images", "count": "num_items"}}


def write(path: Path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))


@pytest.fixture
def project(tmp_path: Path) -> Path:
    folder = tmp_path / "benchmarks/inference/scratch/pytorch"
    write(folder / "case.yml", CASE)
    write(folder / "run.py", "")
    write(folder / "config/configurations.yaml", CONFIGURATIONS)
    write(folder / "config/parameters.yaml", PARAMETERS)
    write(folder / "config/cpu.yaml", {"profile": {"description": "small", "reduced": ["image size"]},
                                       "params": {"image_size": 32, "batch_size": 8}})
    # The scratch vendor's engines: a compiler must name one of them.
    for engine in ("tensorrt", "onnxruntime"):
        write(tmp_path / f"vendors/cpu/inference_engine/{engine}.py", "")
    return tmp_path


def vendor_file(project: Path, data) -> Path:
    path = project / "vendors/cpu/inference/scratch-pytorch/vendor_config/cpu_configurations.yaml"
    write(path, data)
    return path


def effective(project: Path, hardware: str = "cpu"):
    case = load_case(project, "scratch", "pytorch", "inference")
    spec = parse_case_spec({"model": "scratch", "framework": "pytorch", "suite": "inference",
                            "hardware": hardware, "nnodes": 1, "nproc_per_node": 1}, "inv", "case")
    return effective_config(project, case, spec, "cpu")


def test_the_standard_configuration_is_both_files_with_flops_as_a_number(project):
    case = load_case(project, "scratch", "pytorch", "inference")
    assert case.standard.params["flops"] == pytest.approx(2 * 512 * 0.33e9)
    assert set(case.standard.mutable) == set(CONFIGURATIONS)
    got = effective(project)
    assert got.config["image_size"] == 32 and got.config["batch_size"] == 8   # the cpu profile
    assert got.vendor_config == {"file": None, "changed": {}, "added": {}, "warnings": []}


def test_a_vendor_file_changes_a_key_recorded_and_adds_one_with_a_warning(project):
    vendor_file(project, {"compiler": "onnxruntime", "fp16": False, "ort_threads": 1})
    got = effective(project)
    record = got.vendor_config
    assert record["file"] == "vendors/cpu/inference/scratch-pytorch/vendor_config/cpu_configurations.yaml"
    assert record["changed"] == {"compiler": {"default": "tensorrt", "value": "onnxruntime"},
                                 "fp16": {"default": True, "value": False}}
    assert record["added"] == {"ort_threads": 1}
    assert record["warnings"] == [f"{record['file']}: new key ort_threads set by vendor cpu"]
    assert got.config["compiler"] == "onnxruntime" and got.config["ort_threads"] == 1
    assert got.overrides == {"compiler": "onnxruntime", "fp16": False, "ort_threads": 1}


@pytest.mark.parametrize("data, key, says", [
    ({"data_dir": "/data"}, "data_dir", "a key the host sets"),
    ({"image_size": 64}, "image_size", "parameters.yaml"),
    # Equal to the value it replaces: the profile's batch size, not only the standard one.
    ({"batch_size": 8}, "batch_size", "equals the value it replaces"),
    ({"repeat": 0}, "repeat", "greater than 0"),
])
def test_a_vendor_file_may_not(project, data, key, says):
    path = vendor_file(project, data)
    with pytest.raises(ConfigError) as err:
        effective(project)
    assert err.value.source == str(path.relative_to(project)) and err.value.key == key
    assert says in err.value.message


@pytest.mark.parametrize("file, data, key, says", [
    ("parameters.yaml", {**PARAMETERS, "batch_size": 4}, "batch_size", "share no key"),
    ("parameters.yaml", {**PARAMETERS, "case": "x"}, "case", "a key the host sets"),
    ("configurations.yaml", {**CONFIGURATIONS, "seq_length": 4}, "seq_length", "unknown key"),
    ("configurations.yaml", {k: v for k, v in CONFIGURATIONS.items() if k != "repeat"}, "repeat",
     "required key is missing"),
    ("configurations.yaml", {**CONFIGURATIONS, "flops": "2*__import__"}, "flops",
     "not a positive number"),
])
def test_the_case_files_are_checked(project, file, data, key, says):
    write(project / "benchmarks/inference/scratch/pytorch/config" / file, data)
    with pytest.raises(ConfigError) as err:
        effective(project)
    assert err.value.source.endswith(f"config/{file}") and err.value.key == key
    assert says in err.value.message


@pytest.mark.parametrize("data, key, says", [
    ({"no_validation": True}, "no_validation", "needs exist_onnx_path"),
    ({"compiler": None, "no_validation": True, "exist_onnx_path": "m.onnx"}, "no_validation",
     "nothing would run"),
    ({"compiler": None, "exist_onnx_path": "m.onnx"}, "exist_onnx_path", "nothing reads"),
    ({"compiler": None, "exist_compiler_path": "m.plan"}, "exist_compiler_path", "nothing reads"),
])
def test_contradictory_switches_are_one_error_naming_the_file(project, data, key, says):
    path = vendor_file(project, data)
    with pytest.raises(ConfigError) as err:
        effective(project)
    assert err.value.source == str(path.relative_to(project)) and err.value.key == key
    assert says in err.value.message


@pytest.mark.parametrize("data, runs", [
    ({"compiler": None}, "validation only"),
    ({"no_validation": True, "exist_onnx_path": "model.onnx"}, "engine only"),
    ({"exist_onnx_path": "model.onnx", "exist_compiler_path": "model.plan"}, "both, no export"),
])
def test_consistent_switches_pass(project, data, runs):
    vendor_file(project, data)
    assert effective(project).config["compiler"] == data.get("compiler", "tensorrt"), runs


def test_validate_prints_the_new_key_warning(tmp_path):
    """The checkout's own cases, one inference case with a vendor file that adds a key."""
    project = copy_checkout(tmp_path / "project")
    case_dir = project / "benchmarks/inference/scratch/pytorch"
    for name, data in (("case.yml", CASE), ("run.py", ""),
                       ("config/configurations.yaml", CONFIGURATIONS),
                       ("config/parameters.yaml", PARAMETERS)):
        write(case_dir / name, data)
    vendor_file(project, {"compiler": "onnxruntime", "ort_threads": 1})
    inventory = write_local_inventory(tmp_path / "inv", {
        "flagperf_vendor": "cpu", "flagperf_container_runtime": "none",
        "flagperf_root": str(project), "flagperf_python": sys.executable,
        "flagperf_cases": [{"model": "scratch", "framework": "pytorch", "suite": "inference",
                            "hardware": "cpu", "nnodes": 1, "nproc_per_node": 1}]})
    done = subprocess.run([sys.executable, "-m", "flagperf_ansible", "validate", "-i", str(inventory)],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "FLAGPERF_PROJECT_DIR": str(project)})
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == [
        "warning: vendors/cpu/inference/scratch-pytorch/vendor_config/cpu_configurations.yaml: "
        "new key ort_threads set by vendor cpu"], done.stderr
    assert "scratch-pytorch-inference-cpux1x1" in done.stdout
